package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestListenConfig(t *testing.T) {
	serverTLS, clientTLS := selfSignedTLS(t)
	cases := []struct {
		name    string
		cfg     Config
		wantErr string
		// wantAddr is checked when wantErr is empty; "PORT" stands for the bound port.
		wantAddr string
	}{
		{name: "defaults", cfg: Config{BindAddr: "127.0.0.1:0"}, wantAddr: "127.0.0.1:PORT"},
		{name: "server TLS only", cfg: Config{BindAddr: "127.0.0.1:0", ServerTLS: serverTLS}, wantErr: "both ServerTLS and ClientTLS"},
		{name: "client TLS only", cfg: Config{BindAddr: "127.0.0.1:0", ClientTLS: clientTLS}, wantErr: "both ServerTLS and ClientTLS"},
		{name: "server TLS without certificate", cfg: Config{BindAddr: "127.0.0.1:0", ServerTLS: &tls.Config{}, ClientTLS: clientTLS}, wantErr: "no certificate"},
		{name: "unspecified bind, no advertise", cfg: Config{BindAddr: "0.0.0.0:0"}, wantErr: "set AdvertiseAddr"},
		{name: "unspecified advertise", cfg: Config{BindAddr: "127.0.0.1:0", AdvertiseAddr: "0.0.0.0:7000"}, wantErr: "cannot be dialled"},
		{name: "advertise without port", cfg: Config{BindAddr: "0.0.0.0:0", AdvertiseAddr: "10.1.2.3:"}, wantAddr: "10.1.2.3:PORT"},
		{name: "advertise port zero", cfg: Config{BindAddr: "127.0.0.1:0", AdvertiseAddr: "10.1.2.3:0"}, wantAddr: "10.1.2.3:PORT"},
		{name: "advertise host name", cfg: Config{BindAddr: "127.0.0.1:0", AdvertiseAddr: "node-1.example:7000"}, wantAddr: "node-1.example:7000"},
		{name: "advertise garbage", cfg: Config{BindAddr: "127.0.0.1:0", AdvertiseAddr: "no port here"}, wantErr: "AdvertiseAddr"},
		{name: "bad bind address", cfg: Config{BindAddr: "127.0.0.1:99999"}, wantErr: "transport: listen"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireNoLeaks(t)
			tr, err := Listen(tc.cfg)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				assert.Nil(t, tr)
				return
			}
			require.NoError(t, err)
			t.Cleanup(func() { tr.Close() })
			port := tr.ln.Addr().(*net.TCPAddr).Port
			want := tc.wantAddr
			if p := len(want) - len("PORT"); p >= 0 && want[p:] == "PORT" {
				want = want[:p] + strconv.Itoa(port)
			}
			assert.Equal(t, want, tr.Addr().String())
			assert.Equal(t, "tcp", tr.Addr().Network())
			assert.Equal(t, tr.Addr(), tr.StreamLayer().Addr())
		})
	}
}

// Connections that do not speak either protocol are closed with a log
// line, and the listener keeps serving the ones that do.
func TestListenerDropsBadConnections(t *testing.T) {
	cases := []struct {
		name    string
		send    []byte
		wantLog string
	}{
		{"unknown first byte", []byte("GET / HTTP/1.1\r\n\r\n"), "unknown first byte"},
		{"silent past the header timeout", nil, "sent nothing in time"},
		{"unknown frame type", append([]byte{kindRPC}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), "unknown frame type"},
		{"oversized frame", append([]byte{kindRPC}, frameBytes(frameRequest, 1, nil, MaxFrameSize+1)...), "frame too large"},
		{"response sent by a client", append([]byte{kindRPC}, frameBytes(frameResponse, 1, []byte("x"), 1)...), "from a client"},
		{"cancel with a body", append([]byte{kindRPC}, frameBytes(frameCancel, 1, []byte("x"), 1)...), "cancel frame"},
		{"error frame without code", append([]byte{kindRPC}, frameBytes(frameError, 1, nil, 0)...), "without a code"},
		{"duplicate request ID", append(append([]byte{kindRPC},
			frameBytes(frameRequest, 7, []byte("block"), 5)...),
			frameBytes(frameRequest, 7, []byte("block"), 5)...), "already in flight"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireNoLeaks(t)
			var logs logBuffer
			headerTimeout := 10 * time.Second // never reached by a case that sends something
			if tc.send == nil {
				headerTimeout = 100 * time.Millisecond
			}
			server := listen(t, Config{HeaderTimeout: headerTimeout, Logger: logs.logger()})
			server.Handle(func(ctx context.Context, req []byte) ([]byte, error) {
				if string(req) == "block" {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return req, nil
			})
			client := listen(t, Config{})

			nc, err := net.Dial("tcp", server.Addr().String())
			require.NoError(t, err)
			t.Cleanup(func() { nc.Close() })
			if tc.send != nil {
				_, err = nc.Write(tc.send)
				require.NoError(t, err)
			}
			requireClosedByPeer(t, nc)
			assert.Eventually(t, func() bool { return strings.Contains(logs.String(), tc.wantLog) },
				time.Second, time.Millisecond, "log: %s", logs.String())

			resp, err := client.Call(testCtx(t), server.Addr().String(), []byte("still here"))
			require.NoError(t, err)
			assert.Equal(t, "still here", string(resp))
		})
	}
}

// requireClosedByPeer waits for the server to close nc: a read ends with
// EOF or a reset, not with our own deadline.
func requireClosedByPeer(t *testing.T, nc net.Conn) {
	t.Helper()
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := io.ReadAll(nc)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the server did not close the connection")
}

// A connection still in its header phase does not hold up Close.
func TestCloseWithSilentConnection(t *testing.T) {
	requireNoLeaks(t)
	server := listen(t, Config{HeaderTimeout: time.Hour})
	nc, err := net.Dial("tcp", server.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	require.Eventually(t, func() bool {
		server.mu.Lock()
		defer server.mu.Unlock()
		return len(server.headerConns) == 1
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, server.Close())
	requireClosedByPeer(t, nc)
}

func TestTLSRoundTrip(t *testing.T) {
	requireNoLeaks(t)
	serverTLS, clientTLS := selfSignedTLS(t)
	var logs logBuffer
	cfg := Config{ServerTLS: serverTLS, ClientTLS: clientTLS, HeaderTimeout: time.Second, Logger: logs.logger()}
	server := listen(t, cfg)
	client := listen(t, Config{ServerTLS: serverTLS, ClientTLS: clientTLS})
	server.Handle(echo)

	resp, err := client.Call(testCtx(t), server.Addr().String(), []byte("secret"))
	require.NoError(t, err)
	assert.Equal(t, "secret", string(resp))

	// A client speaking plaintext is dropped at the handshake.
	plain := listen(t, Config{})
	_, err = plain.Call(testCtx(t), server.Addr().String(), []byte("hello"))
	assert.Error(t, err)
	assert.Eventually(t, func() bool { return strings.Contains(logs.String(), "no valid first byte") }, 5*time.Second, time.Millisecond)

	// A client whose certificate the server does not trust is dropped too.
	strangerServer, strangerClient := selfSignedTLS(t)
	stranger := listen(t, Config{ServerTLS: strangerServer, ClientTLS: strangerClient})
	_, err = stranger.Call(testCtx(t), server.Addr().String(), []byte("hello"))
	assert.ErrorIs(t, err, ErrNotSent, "the handshake fails before anything is sent")

	resp, err = client.Call(testCtx(t), server.Addr().String(), []byte("still secret"))
	require.NoError(t, err)
	assert.Equal(t, "still secret", string(resp))
}
