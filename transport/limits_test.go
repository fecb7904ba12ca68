package transport

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Connections that send their kind byte and then nothing are closed after
// HeaderTimeout, raft's and the RPC's alike, and leave no goroutine behind.
func TestHalfOpenPeerConnectionsAreClosed(t *testing.T) {
	requireNoLeaks(t)
	var logs logBuffer
	server := listen(t, Config{HeaderTimeout: 300 * time.Millisecond, Logger: logs.logger()})
	server.Handle(echo)
	const each = 40
	var conns []net.Conn
	for _, kind := range []byte{kindRaft, kindRPC} {
		for range each {
			nc, err := net.Dial("tcp", server.Addr().String())
			require.NoError(t, err)
			t.Cleanup(func() { nc.Close() })
			_, err = nc.Write([]byte{kind})
			require.NoError(t, err)
			conns = append(conns, nc)
		}
	}
	// Half a frame header is not a frame either.
	partial, err := net.Dial("tcp", server.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { partial.Close() })
	_, err = partial.Write(append([]byte{kindRPC}, frameBytes(frameRequest, 1, nil, 4)[:6]...))
	require.NoError(t, err)
	conns = append(conns, partial)

	for _, nc := range conns {
		requireClosedByPeer(t, nc)
	}
	require.Eventually(t, func() bool {
		server.mu.Lock()
		defer server.mu.Unlock()
		return len(server.headerConns) == 0 && len(server.rpcConns) == 0 && len(server.raftConns) == 0
	}, 5*time.Second, 5*time.Millisecond)
	assert.Contains(t, logs.String(), "sent nothing in time")
	assert.NotContains(t, logs.String(), "[WARN]", "silent connections are no operator's problem")
	assert.NotContains(t, logs.String(), "[ERROR]")

	// Real traffic still flows, with the same short timeout.
	client := listen(t, Config{HeaderTimeout: 300 * time.Millisecond})
	resp, err := client.Call(testCtx(t), server.Addr().String(), []byte("still here"))
	require.NoError(t, err)
	assert.Equal(t, "still here", string(resp))
}

// A raft connection is handed to raft once its first byte is in, that byte
// included.
func TestRaftConnKeepsItsFirstByte(t *testing.T) {
	requireNoLeaks(t)
	a, b := listen(t, Config{}), listen(t, Config{})
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := a.StreamLayer().Accept(); err == nil {
			accepted <- c
		}
	}()
	out, err := b.StreamLayer().Dial(raft.ServerAddress(a.Addr().String()), time.Second)
	require.NoError(t, err)
	_, err = out.Write([]byte("hello raft"))
	require.NoError(t, err)
	in := <-accepted
	require.NoError(t, in.SetReadDeadline(time.Now().Add(5*time.Second)))
	got := make([]byte, len("hello raft"))
	_, err = io.ReadFull(in, got)
	require.NoError(t, err)
	assert.Equal(t, "hello raft", string(got))
	require.NoError(t, in.SetReadDeadline(time.Time{}))
	require.NoError(t, a.StreamLayer().Close())
}

// An RPC connection with no request running is closed after IdleTimeout,
// but never while a request runs, however long.
func TestIdleRPCConnectionIsClosed(t *testing.T) {
	requireNoLeaks(t)
	release := make(chan struct{})
	server := listen(t, Config{IdleTimeout: 300 * time.Millisecond})
	server.Handle(func(ctx context.Context, req []byte) ([]byte, error) {
		if string(req) == "wait" {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return req, nil
	})
	nc, err := net.Dial("tcp", server.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	_, err = nc.Write(append([]byte{kindRPC}, frameBytes(frameRequest, 1, []byte("wait"), 4)...))
	require.NoError(t, err)

	// Three idle timeouts with the request running: still open.
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(900*time.Millisecond)))
	_, err = nc.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "closed or answered while the request ran")

	close(release)
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	var hdr [frameHeaderSize]byte
	f, err := readFrame(bufioReader(nc), &hdr)
	require.NoError(t, err)
	assert.Equal(t, "wait", string(f.body))
	// Now idle: closed.
	requireClosedByPeer(t, nc)
}

func bufioReader(nc net.Conn) *bufio.Reader { return bufio.NewReaderSize(nc, frameHeaderSize+16) }

// The dialling side closes its idle pooled connections first (at half the
// IdleTimeout), and a later call dials anew without an error.
func TestClientClosesIdlePooledConnections(t *testing.T) {
	requireNoLeaks(t)
	var logs logBuffer
	server := listen(t, Config{IdleTimeout: 10 * time.Second})
	server.Handle(echo)
	client := listen(t, Config{IdleTimeout: 400 * time.Millisecond, Logger: logs.logger()})
	addr := server.Addr().String()
	_, err := client.Call(testCtx(t), addr, []byte("one"))
	require.NoError(t, err)
	require.Equal(t, 1, liveClientConns(client, addr))
	require.Eventually(t, func() bool { return liveClientConns(client, addr) == 0 }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return serverConns(server) == 0 }, 5*time.Second, 10*time.Millisecond)
	resp, err := client.Call(testCtx(t), addr, []byte("two"))
	require.NoError(t, err)
	assert.Equal(t, "two", string(resp))
	assert.NotContains(t, logs.String(), "[WARN]")
	assert.NotContains(t, logs.String(), "[INFO]", "an idle close is routine")
}

// At MaxConns accepted connections the next waits until one closes, and the
// transport says so once.
func TestPeerConnectionCap(t *testing.T) {
	requireNoLeaks(t)
	var logs logBuffer
	const max = 3
	server := listen(t, Config{MaxConns: max, HeaderTimeout: time.Minute, Logger: logs.logger()})
	server.Handle(echo)
	var held []net.Conn
	for range max {
		nc, err := net.Dial("tcp", server.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { nc.Close() })
		held = append(held, nc)
	}
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "peer connection limit reached") },
		5*time.Second, 5*time.Millisecond)

	client := listen(t, Config{MaxIdleConns: 1}) // both calls on one connection
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := client.Call(ctx, server.Addr().String(), []byte("full"))
	require.Error(t, err, "served beyond the cap")
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)

	held[0].Close()
	resp, err := client.Call(testCtx(t), server.Addr().String(), []byte("room now"))
	require.NoError(t, err)
	assert.Equal(t, "room now", string(resp))
	assert.Equal(t, 1, strings.Count(logs.String(), "peer connection limit reached"), "rate-limited: %s", logs.String())
}
