package apiserver

import (
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultMaxConns is the agent's default bound on open HTTP connections
// (-max-http-conns): far more than lock traffic needs (a Go api.Client keeps at
// most 256 per node), far fewer than the file descriptors a node has.
const DefaultMaxConns = 4096

// limitLogEvery bounds how often a LimitListener says it is full.
const limitLogEvery = time.Minute

// LimitListener returns a listener that has at most max of ln's connections
// open at once: once max are open, Accept waits for one to close before
// taking the next from the kernel's backlog, so that idle or half-open
// connections (thousands of them, from a careless or hostile client) cannot
// use up the process's file descriptors and take raft down with the API.
// Whenever it has to wait it logs a warning, at most once a minute with the
// count of waits since. With NewServer's timeouts a connection that sends
// no request is closed after ServerReadHeaderTimeout and an idle one after
// ServerIdleTimeout, freeing its place. max <= 0 returns ln unchanged.
// logger may be nil.
func LimitListener(ln net.Listener, max int, logger hclog.Logger) net.Listener {
	if max <= 0 {
		return ln
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &limitListener{Listener: ln, max: max, slots: make(chan struct{}, max), done: make(chan struct{}), log: logger}
}

type limitListener struct {
	net.Listener
	max   int
	slots chan struct{} // one element per open connection
	done  chan struct{} // closed by Close: a waiting Accept gives up
	once  sync.Once
	log   hclog.Logger

	mu      sync.Mutex // protects the fields below
	lastLog time.Time
	waits   int // times Accept had to wait since the last log line
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		l.full()
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

// full logs that the limit is reached, rate-limited.
func (l *limitListener) full() {
	l.mu.Lock()
	l.waits++
	if time.Since(l.lastLog) < limitLogEvery {
		l.mu.Unlock()
		return
	}
	waits := l.waits
	l.waits = 0
	l.lastLog = time.Now()
	l.mu.Unlock()
	l.log.Warn("HTTP connection limit reached: new connections wait until one closes; "+
		"if this is real traffic raise -max-http-conns, else look for a client that opens connections and leaves them idle",
		"limit", l.max, "addr", l.Addr().String(), "times", waits, "since", limitLogEvery)
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its place back once, on its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
