package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCallRoundTrip(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{})
	client := listen(t, Config{})
	server.Handle(func(_ context.Context, req []byte) ([]byte, error) {
		switch string(req) {
		case "fail":
			return nil, errors.New("cluster: not the leader")
		case "panic":
			panic("boom")
		}
		return append([]byte("re: "), req...), nil
	})
	ctx := testCtx(t)
	addr := server.Addr().String()

	resp, err := client.Call(ctx, addr, []byte("hello"))
	require.NoError(t, err)
	assert.Equal(t, "re: hello", string(resp))

	resp, err = client.Call(ctx, addr, nil)
	require.NoError(t, err)
	assert.Equal(t, "re: ", string(resp))

	_, err = client.Call(ctx, addr, []byte("fail"))
	assert.ErrorIs(t, err, ErrRemote)
	assert.ErrorContains(t, err, "cluster: not the leader")

	_, err = client.Call(ctx, addr, []byte("panic"))
	assert.ErrorIs(t, err, ErrRemote)
	assert.ErrorContains(t, err, "boom")

	resp, err = client.Call(ctx, addr, []byte("still serving"))
	require.NoError(t, err)
	assert.Equal(t, "re: still serving", string(resp))

	server.Handle(nil)
	_, err = client.Call(ctx, addr, []byte("anyone?"))
	assert.ErrorIs(t, err, ErrRemote)
	assert.ErrorContains(t, err, "no handler")
}

// Request 1's handler cannot finish until request 2 has been answered on
// the same connection: only a pipelined connection completes both.
func TestCallPipelinesOnOneConnection(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{})
	client := listen(t, Config{MaxIdleConns: 1})
	secondAnswered := make(chan struct{})
	server.Handle(func(ctx context.Context, req []byte) ([]byte, error) {
		if string(req) == "1" {
			select {
			case <-secondAnswered:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return req, nil
	})
	ctx := testCtx(t)
	addr := server.Addr().String()

	first := make(chan error, 1)
	go func() {
		_, err := client.Call(ctx, addr, []byte("1"))
		first <- err
	}()
	resp, err := client.Call(ctx, addr, []byte("2"))
	require.NoError(t, err)
	assert.Equal(t, "2", string(resp))
	close(secondAnswered)
	assert.NoError(t, <-first)
	assert.Equal(t, 1, serverConns(server), "both calls must share one connection")
}

// Handler i waits until the caller has received answer i+1, so the answers
// arrive in exactly the reverse order of the requests, all on one connection.
func TestCallsCompleteOutOfOrder(t *testing.T) {
	requireNoLeaks(t)
	const n = 20
	server := listen(t, Config{})
	client := listen(t, Config{MaxIdleConns: 1})
	answered := make([]chan struct{}, n+1)
	for i := range answered {
		answered[i] = make(chan struct{})
	}
	close(answered[n])
	server.Handle(func(ctx context.Context, req []byte) ([]byte, error) {
		i, err := strconv.Atoi(string(req))
		if err != nil {
			return nil, err
		}
		select {
		case <-answered[i+1]:
			return req, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	ctx := testCtx(t)
	addr := server.Addr().String()

	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := client.Call(ctx, addr, []byte(strconv.Itoa(i)))
			if !assert.NoError(t, err) {
				return
			}
			assert.Equal(t, strconv.Itoa(i), string(resp))
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			close(answered[i])
		})
	}
	wg.Wait()
	want := make([]int, n)
	for i := range want {
		want[i] = n - 1 - i
	}
	assert.Equal(t, want, order)
	assert.Equal(t, 1, serverConns(server))
}

func TestCallCancelReachesHandler(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{})
	client := listen(t, Config{})
	started := make(chan struct{})
	handlerErr := make(chan error, 1)
	server.Handle(func(ctx context.Context, req []byte) ([]byte, error) {
		close(started)
		<-ctx.Done()
		handlerErr <- ctx.Err()
		return nil, ctx.Err()
	})

	ctx, cancel := context.WithCancel(testCtx(t))
	go func() {
		<-started
		cancel()
	}()
	_, err := client.Call(ctx, server.Addr().String(), []byte("wait"))
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ErrNotSent, "the request was written")
	select {
	case err := <-handlerErr:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's ctx was not cancelled")
	}

	// The connection is still good for the next call.
	server.Handle(echo)
	resp, err := client.Call(testCtx(t), server.Addr().String(), []byte("next"))
	require.NoError(t, err)
	assert.Equal(t, "next", string(resp))
}

func TestConnectionLossCancelsHandler(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{})
	client := listen(t, Config{})
	started := make(chan struct{})
	handlerDone := make(chan struct{})
	server.Handle(func(ctx context.Context, req []byte) ([]byte, error) {
		close(started)
		<-ctx.Done()
		close(handlerDone)
		return nil, ctx.Err()
	})
	callErr := make(chan error, 1)
	go func() {
		_, err := client.Call(context.Background(), server.Addr().String(), []byte("wait"))
		callErr <- err
	}()
	<-started
	require.NoError(t, client.Close())
	err := <-callErr
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, err, ErrConnLost, "the request had been written")
	select {
	case <-handlerDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's ctx did not end when its connection dropped")
	}
}

func TestCallReconnectsAfterPeerRestart(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{})
	client := listen(t, Config{})
	server.Handle(echo)
	addr := server.Addr().String()
	ctx := testCtx(t)
	for range 4 { // fill both pool slots
		_, err := client.Call(ctx, addr, []byte("before"))
		require.NoError(t, err)
	}
	require.Equal(t, 2, liveClientConns(client, addr))

	require.NoError(t, server.Close())
	restarted := listen(t, Config{BindAddr: addr})
	restarted.Handle(func(_ context.Context, req []byte) ([]byte, error) { return append(req, '!'), nil })
	// Once the client has seen its connections drop, every call dials anew
	// and succeeds: the restart costs callers nothing.
	require.Eventually(t, func() bool { return liveClientConns(client, addr) == 0 }, 5*time.Second, time.Millisecond)
	for range 4 {
		resp, err := client.Call(ctx, addr, []byte("after"))
		require.NoError(t, err)
		assert.Equal(t, "after!", string(resp))
	}
}

// A call that meets a connection while it shuts down (its failure
// recorded, its socket still being closed) moves to a fresh connection, as
// it does with one found dead: the pool must not hand the dying connection
// out again on each retry, which would fail the call with ErrNotSent
// without trying a fresh one.
func TestCallMovesOnFromConnectionShuttingDown(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{})
	server.Handle(echo)
	addr := server.Addr().String()
	var first atomic.Pointer[closeGatedConn] // the first connection dialled; its Close waits for release
	closing := make(chan struct{})
	release := make(chan struct{})
	client := listen(t, Config{MaxIdleConns: 1, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		g := &closeGatedConn{Conn: nc}
		if first.CompareAndSwap(nil, g) {
			g.closing, g.release = closing, release
		}
		return g, nil
	}})
	t.Cleanup(func() { close(release) }) // runs before the client's Close, which waits for the shutdown
	ctx := testCtx(t)

	_, err := client.Call(ctx, addr, []byte("warm up"))
	require.NoError(t, err)
	g := first.Load()
	require.NotNil(t, g)
	// Break the socket under the pooled connection: its reader fails and
	// shuts it down, which stays inside Close until release.
	require.NoError(t, g.Conn.Close())
	select {
	case <-closing:
	case <-time.After(5 * time.Second):
		t.Fatal("the broken connection was never shut down")
	}

	resp, err := client.Call(ctx, addr, []byte("again"))
	require.NoError(t, err, "the call dials a fresh connection")
	assert.Equal(t, "again", string(resp))
}

// closeGatedConn is a connection whose Close, when gated, reports that it
// began (closes closing) and waits for release before closing the socket.
type closeGatedConn struct {
	net.Conn
	closing, release chan struct{} // nil: not gated
	once             sync.Once
}

func (c *closeGatedConn) Close() error {
	if c.closing != nil {
		c.once.Do(func() { close(c.closing) })
		<-c.release
	}
	return c.Conn.Close()
}

func TestCallNotSentWhenNothingListens(t *testing.T) {
	requireNoLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	client := listen(t, Config{})

	_, err = client.Call(testCtx(t), addr, []byte("hello"))
	assert.ErrorIs(t, err, ErrNotSent)
	assert.NotErrorIs(t, err, ErrConnLost)
}

func TestCallConnLostWhenPeerDiesMidCall(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{})
	client := listen(t, Config{})
	started := make(chan struct{})
	server.Handle(func(ctx context.Context, req []byte) ([]byte, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	callErr := make(chan error, 1)
	go func() {
		_, err := client.Call(testCtx(t), server.Addr().String(), []byte("wait"))
		callErr <- err
	}()
	<-started
	require.NoError(t, server.Close())
	err := <-callErr
	assert.ErrorIs(t, err, ErrConnLost)
	assert.NotErrorIs(t, err, ErrNotSent)
	assert.NotErrorIs(t, err, ErrClosed, "the client itself is not closed")
}

// fakePeer accepts one connection, checks the RPC kind byte and hands the
// test a frame reader and the raw connection.
func fakePeer(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		t.Cleanup(func() { nc.Close() })
		ch <- nc
	}()
	return ln.Addr().String(), ch
}

// A peer that never answers cannot hold a call past its ctx, and learns
// that the caller gave up through a cancel frame for the same request ID.
func TestCallHonoursCtxWhenPeerIsSilent(t *testing.T) {
	requireNoLeaks(t)
	addr, accepted := fakePeer(t)
	client := listen(t, Config{})

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := client.Call(ctx, addr, []byte("anyone?"))
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	nc := <-accepted
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	br := bufio.NewReader(nc)
	kind, err := br.ReadByte()
	require.NoError(t, err)
	assert.Equal(t, kindRPC, kind)
	var hdr [frameHeaderSize]byte
	req, err := readClientFrame(br, &hdr)
	require.NoError(t, err)
	assert.Equal(t, frameRequest, req.typ)
	assert.Equal(t, "anyone?", string(req.body))
	cancelFrame, err := readFrame(br, &hdr)
	require.NoError(t, err)
	assert.Equal(t, frameCancel, cancelFrame.typ)
	assert.Equal(t, req.id, cancelFrame.id)
}

func TestCallRejectsOversizedFrames(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{})
	client := listen(t, Config{})
	server.Handle(func(_ context.Context, req []byte) ([]byte, error) {
		if string(req) == "big" {
			return make([]byte, MaxFrameSize+1), nil
		}
		return req, nil
	})
	ctx := testCtx(t)
	addr := server.Addr().String()

	_, err := client.Call(ctx, addr, make([]byte, MaxFrameSize+1))
	assert.ErrorIs(t, err, ErrTooLarge)

	_, err = client.Call(ctx, addr, []byte("big"))
	assert.ErrorIs(t, err, ErrTooLarge)
	assert.ErrorIs(t, err, ErrRemote)

	resp, err := client.Call(ctx, addr, make([]byte, MaxFrameSize))
	require.NoError(t, err, "a frame of exactly MaxFrameSize is allowed")
	assert.Len(t, resp, MaxFrameSize)
}

// A server sending an oversized or malformed frame loses its connection;
// the call on it fails with ErrConnLost and the client logs why.
func TestClientDropsMisbehavingServer(t *testing.T) {
	cases := map[string][]byte{
		"oversized":    frameBytes(frameResponse, 1, nil, MaxFrameSize+1),
		"unknown type": frameBytes(9, 1, nil, 0),
		"request":      frameBytes(frameRequest, 1, []byte("x"), 1),
	}
	for name, reply := range cases {
		t.Run(name, func(t *testing.T) {
			requireNoLeaks(t)
			addr, accepted := fakePeer(t)
			var logs logBuffer
			client := listen(t, Config{Logger: logs.logger()})
			go func() {
				nc := <-accepted
				br := bufio.NewReader(nc)
				if _, err := br.ReadByte(); err != nil {
					return
				}
				var hdr [frameHeaderSize]byte
				if _, err := readClientFrame(br, &hdr); err != nil {
					return
				}
				nc.Write(reply)
			}()
			_, err := client.Call(testCtx(t), addr, []byte("hi"))
			assert.ErrorIs(t, err, ErrConnLost)
			assert.Contains(t, logs.String(), "bad frame")
		})
	}
}

// frameBytes encodes a frame header claiming size bytes, then body.
func frameBytes(typ frameType, id uint64, body []byte, size uint32) []byte {
	b := make([]byte, frameHeaderSize, frameHeaderSize+len(body))
	b[0] = byte(typ)
	binary.BigEndian.PutUint64(b[1:9], id)
	binary.BigEndian.PutUint32(b[9:13], size)
	return append(b, body...)
}

func TestCloseFailsCallsInFlight(t *testing.T) {
	requireNoLeaks(t)
	const n = 10
	server := listen(t, Config{})
	client := listen(t, Config{})
	var started sync.WaitGroup
	started.Add(n)
	server.Handle(func(ctx context.Context, req []byte) ([]byte, error) {
		started.Done()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := client.Call(context.Background(), server.Addr().String(), []byte("wait"))
			errs <- err
		}()
	}
	started.Wait()
	require.NoError(t, client.Close())
	for range n {
		assert.ErrorIs(t, <-errs, ErrClosed)
	}

	_, err := client.Call(testCtx(t), server.Addr().String(), []byte("late"))
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, err, ErrNotSent)
	assert.NoError(t, client.Close(), "a second Close is harmless")
}

// The server side: Close cancels running handlers and waits for them.
func TestCloseWaitsForHandlers(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{})
	client := listen(t, Config{})
	started := make(chan struct{})
	var handlerReturned bool
	var mu sync.Mutex
	server.Handle(func(ctx context.Context, req []byte) ([]byte, error) {
		close(started)
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a handler that takes a moment to wind down
		mu.Lock()
		handlerReturned = true
		mu.Unlock()
		return nil, ctx.Err()
	})
	go client.Call(context.Background(), server.Addr().String(), []byte("wait"))
	<-started
	require.NoError(t, server.Close())
	mu.Lock()
	defer mu.Unlock()
	assert.True(t, handlerReturned, "Close returned while a handler was still running")
}

func TestCallsSpreadOverPooledConnections(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{})
	client := listen(t, Config{MaxIdleConns: 3})
	server.Handle(echo)
	ctx := testCtx(t)
	for i := range 9 {
		_, err := client.Call(ctx, server.Addr().String(), []byte(fmt.Sprint(i)))
		require.NoError(t, err)
	}
	assert.Equal(t, 3, liveClientConns(client, server.Addr().String()))
	assert.Equal(t, 3, serverConns(server))
}

func TestManyConcurrentCalls(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{})
	client := listen(t, Config{})
	server.Handle(echo)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				want := fmt.Sprintf("%d/%d", g, i)
				resp, err := client.Call(ctx, server.Addr().String(), []byte(want))
				if !assert.NoError(t, err) || !assert.Equal(t, want, string(resp)) {
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestCallWithDoneContextIsNotSent(t *testing.T) {
	requireNoLeaks(t)
	client := listen(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := client.Call(ctx, "127.0.0.1:1", []byte("x"))
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, ErrNotSent)
}

// Calls racing a Close, on either side, end with the documented errors and
// leave nothing behind.
func TestCloseRacingCalls(t *testing.T) {
	for _, side := range []string{"client", "server"} {
		t.Run(side+" closes", func(t *testing.T) {
			requireNoLeaks(t)
			server := listen(t, Config{})
			client := listen(t, Config{})
			server.Handle(echo)
			victim := client
			if side == "server" {
				victim = server
			}
			var wg sync.WaitGroup
			var successes sync.WaitGroup
			successes.Add(8)
			for g := range 8 {
				wg.Go(func() {
					first := true
					for {
						_, err := client.Call(testCtx(t), server.Addr().String(), []byte(fmt.Sprint(g)))
						if err == nil {
							if first {
								successes.Done()
								first = false
							}
							continue
						}
						if side == "client" {
							assert.ErrorIs(t, err, ErrClosed)
						} else {
							assert.True(t, errors.Is(err, ErrNotSent) || errors.Is(err, ErrConnLost), "unexpected error: %v", err)
							assert.NotErrorIs(t, err, ErrClosed)
						}
						if first {
							successes.Done()
						}
						return
					}
				})
			}
			successes.Wait()
			require.NoError(t, victim.Close())
			wg.Wait()
		})
	}
}
