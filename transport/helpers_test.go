package transport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/internal/testpki"
)

// logBuffer collects a transport's log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex // protects buf
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: b, Level: hclog.Debug})
}

// requireNoLeaks registers a cleanup, run after every transport of the test
// has been closed, that fails if any goroutine the package started is left.
// Call it first in a test so its cleanup runs last.
func requireNoLeaks(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		require.Eventually(t, func() bool { return len(transportGoroutines()) == 0 }, 2*time.Second, 5*time.Millisecond,
			"goroutines left behind:\n%s", strings.Join(transportGoroutines(), "\n\n"))
	})
}

// transportGoroutines lists the stacks of live goroutines started by this
// package's non-test code (the test's own goroutines are created by Test
// functions and do not match).
func transportGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var ours []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "created by github.com/raftlock/raftlock/transport.Listen") ||
			strings.Contains(g, "created by github.com/raftlock/raftlock/transport.(*") {
			ours = append(ours, g)
		}
	}
	return ours
}

// listen starts a transport on 127.0.0.1:0 that is closed when the test ends.
func listen(t testing.TB, cfg Config) *Transport {
	t.Helper()
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1:0"
	}
	tr, err := Listen(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	return tr
}

func echo(_ context.Context, req []byte) ([]byte, error) { return req, nil }

// testCtx is a context that ends well within the test's budget.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// selfSignedTLS returns mutual-TLS configs built on a throwaway CA and a
// certificate for 127.0.0.1 made on the spot.
func selfSignedTLS(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	ca := testpki.NewCA(t, "raftlock test CA")
	cert := ca.Issue(t, "raftlock test")
	server = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    ca.Pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
	client = &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      ca.Pool,
		MinVersion:   tls.VersionTLS13,
	}
	return server, client
}

// liveClientConns counts t's live client connections to addr.
func liveClientConns(t *Transport, addr string) int {
	t.mu.Lock()
	p := t.peers[addr]
	t.mu.Unlock()
	if p == nil {
		return 0
	}
	n := 0
	for i := range p.slots {
		s := &p.slots[i]
		s.mu.Lock()
		if s.conn != nil && !s.conn.dead() {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// serverConns counts t's accepted RPC connections.
func serverConns(t *Transport) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for c := range t.rpcConns {
		if _, ok := c.(*serverConn); ok {
			n++
		}
	}
	return n
}

// readClientFrame reads the next frame a client sent, past the HTTP probe
// every client connection starts with (see dialRPC).
func readClientFrame(br *bufio.Reader, hdr *[frameHeaderSize]byte) (frame, error) {
	for {
		f, err := readFrame(br, hdr)
		if err != nil || f.typ != frameCancel || f.id != httpProbeID {
			return f, err
		}
	}
}
