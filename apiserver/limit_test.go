package apiserver

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock/memstore"
)

// lockedBuffer is a log sink for tests that read it while the server writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveLimited serves the API of a memory store through NewServer and the
// handler's LimitListener of max connections, with a short
// ReadHeaderTimeout.
func serveLimited(t *testing.T, max int, headerTimeout time.Duration) (addr string, logs *lockedBuffer, h *Handler) {
	t.Helper()
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	logs = &lockedBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})
	h = NewHandler(store, Config{Logger: logger})
	srv := NewServer(ln.Addr().String(), h)
	srv.ReadHeaderTimeout = headerTimeout
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(h.LimitListener(ln, max)) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String(), logs, h
}

// gathered is the value of the counter name in h's registry, read without
// a connection (a scrape would take a place of the listener under test).
func gathered(t *testing.T, h *Handler, name string) float64 {
	t.Helper()
	families, err := h.Registry().Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1)
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// Connections that never send a request are closed after
// ReadHeaderTimeout, however many there are.
func TestServerClosesHalfOpenConnections(t *testing.T) {
	addr, _, _ := serveLimited(t, 0, 300*time.Millisecond)
	const n = 50
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	for i, c := range conns {
		// The server closes it: the read ends (EOF, or net/http's 408) well
		// before this generous deadline.
		require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
		_, err := io.ReadAll(c)
		assert.NoError(t, err, "connection %d was not closed by the server", i)
	}
}

// With max connections open, the next waits until one closes, and the
// server says so once and counts it.
func TestLimitListenerCapsConnections(t *testing.T) {
	const max = 3
	addr, logs, h := serveLimited(t, max, time.Minute)
	const reached = "raftlock_api_conn_limit_reached_total"
	require.Zero(t, gathered(t, h, reached))
	idle := make([]net.Conn, max)
	for i := range idle {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		idle[i] = c
	}
	// The kernel completes the handshake (backlog), but the server does not
	// take the connection: a request on it gets no answer meanwhile.
	extra, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { extra.Close() })
	_, err = extra.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return bytes.Contains([]byte(logs.String()), []byte("HTTP connection limit reached")) },
		10*time.Second, 10*time.Millisecond)
	require.NoError(t, extra.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	_, err = extra.Read(make([]byte, 1))
	var ne net.Error
	require.ErrorAs(t, err, &ne, "answered while %d connections were open", max)
	assert.True(t, ne.Timeout())

	idle[0].Close()
	require.NoError(t, extra.SetReadDeadline(time.Now().Add(20*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	require.NoError(t, err, "answered once a place is free")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 1, bytes.Count([]byte(logs.String()), []byte("HTTP connection limit reached")), "rate-limited: %s", logs.String())
	assert.Contains(t, logs.String(), "-max-http-conns")
	assert.Positive(t, gathered(t, h, reached), "reaching the limit is counted")
}
