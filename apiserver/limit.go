package apiserver

import (
	"net"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/internal/connlimit"
)

// DefaultMaxConns is the agent's default bound on open HTTP connections
// (-max-http-conns): far more than lock traffic needs (a Go api.Client keeps at
// most 256 per node), far fewer than the file descriptors a node has.
const DefaultMaxConns = 4096

// LimitListener returns a listener that has at most max of ln's connections
// open at once: once max are open, Accept waits for one to close before
// taking the next from the kernel's backlog, so that idle or half-open
// connections (thousands of them, from a careless or hostile client) cannot
// use up the process's file descriptors and take raft down with the API.
// Whenever it has to wait it logs a warning, at most once a minute with the
// count of waits since. With NewServer's timeouts a connection that sends
// no request is closed after ServerReadHeaderTimeout and an idle one after
// ServerIdleTimeout, freeing its place. max <= 0 returns ln unchanged.
// logger may be nil. Handler.LimitListener also counts the waits in the
// handler's metrics.
func LimitListener(ln net.Listener, max int, logger hclog.Logger) net.Listener {
	l, _ := newLimitListener(ln, max, logger)
	return l
}

// LimitListener is the package's LimitListener, logging to Config.Logger,
// with every time it reached its limit (and stopped accepting until a
// connection closed) counted in the handler's
// raftlock_api_conn_limit_reached_total.
func (h *Handler) LimitListener(ln net.Listener, max int) net.Listener {
	l, lim := newLimitListener(ln, max, h.log)
	if lim != nil {
		h.connLimits.mu.Lock()
		h.connLimits.list = append(h.connLimits.list, lim)
		h.connLimits.mu.Unlock()
	}
	return l
}

// connLimits are the limiters of a Handler's listeners (Handler.LimitListener).
type connLimits struct {
	mu   sync.Mutex // protects list
	list []*connlimit.Limiter
}

// waits is how many times a listener reached its limit, over every one.
func (c *connLimits) waits() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint64
	for _, l := range c.list {
		n += l.Waits()
	}
	return float64(n)
}

func newLimitListener(ln net.Listener, max int, logger hclog.Logger) (net.Listener, *connlimit.Limiter) {
	if max <= 0 {
		return ln, nil
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	warn := func(waits int) {
		logger.Warn("HTTP connection limit reached: new connections wait until one closes; "+
			"if this is real traffic raise -max-http-conns, else look for a client that opens connections and leaves them idle",
			"limit", max, "addr", ln.Addr().String(), "times", waits, "since", connlimit.WarnEvery)
	}
	lim := connlimit.New(max, warn)
	return &limitListener{Listener: ln, lim: lim, done: make(chan struct{})}, lim
}

type limitListener struct {
	net.Listener
	lim  *connlimit.Limiter
	done chan struct{} // closed by Close: a waiting Accept gives up
	once sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	if !l.lim.Take(l.done) {
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.lim.Give()
		return nil, err
	}
	return l.lim.Conn(c), nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}
