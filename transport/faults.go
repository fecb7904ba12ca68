package transport

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Faults is a fault table for tests that run several transports in one
// process: it cuts or delays the traffic from one transport to another, which
// a single loopback interface cannot do otherwise (every peer is 127.0.0.1).
// Set the same *Faults as Config.Faults of every transport that takes part;
// leave it nil in production. Transports are named by their advertised
// address, Addr().String().
//
// A cut works on the byte streams, in one direction: after Cut(a, b) no byte
// that a sends reaches b, on any connection, raft's or the RPC's, whichever
// side dialled it. Cut closes the connections open between a and b at once
// (a partition cuts existing connections, not only new ones), a dial from a
// to b fails, and any later write by a to b, or read by b of a's bytes,
// closes its connection with an error. Bytes from b to a still flow: b can
// dial a and its requests arrive, but a's answers do not. The network fails
// fast, like a reset, rather than silently dropping packets until timeouts
// fire; both end a raft heartbeat or an RPC the same way, one sooner.
//
// A delay holds every write from a to b for the given time before it goes
// out, on connections open now and later, keeping the bytes in order.
//
// The accepting transport learns who dialled it from the table (the dialler
// records its connection's local address), so this works only between
// transports sharing one *Faults. All methods are safe for concurrent use.
type Faults struct {
	mu      sync.Mutex // protects the fields below
	cut     map[faultLink]bool
	delay   map[faultLink]time.Duration
	conns   map[*faultConn]struct{}
	dialers map[string]string // local address of a connection dialled through the table -> the dialler's address
}

// faultLink is one direction between two transports, by advertised address.
type faultLink struct{ from, to string }

// errCut is the error of I/O across a cut link.
var errCut = errors.New("transport: link cut by the fault table")

// NewFaults returns an empty fault table: nothing cut, nothing delayed.
func NewFaults() *Faults {
	return &Faults{
		cut:     make(map[faultLink]bool),
		delay:   make(map[faultLink]time.Duration),
		conns:   make(map[*faultConn]struct{}),
		dialers: make(map[string]string),
	}
}

// Cut stops the bytes from the transport at from reaching the one at to, and
// closes every connection between the two.
func (f *Faults) Cut(from, to string) {
	f.mu.Lock()
	f.cut[faultLink{from, to}] = true
	var doomed []*faultConn
	for c := range f.conns {
		if (c.local == from && c.remote == to) || (c.local == to && c.remote == from) {
			doomed = append(doomed, c)
		}
	}
	f.mu.Unlock()
	for _, c := range doomed {
		c.Close()
	}
}

// Delay holds each write from the transport at from to the one at to for d
// before it goes out; 0 removes the delay.
func (f *Faults) Delay(from, to string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d <= 0 {
		delete(f.delay, faultLink{from, to})
		return
	}
	f.delay[faultLink{from, to}] = d
}

// Heal lets the bytes from from reach to again and removes its delay.
// Connections closed by the cut stay closed; new ones are dialled as needed.
func (f *Faults) Heal(from, to string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.cut, faultLink{from, to})
	delete(f.delay, faultLink{from, to})
}

// HealAll removes every cut and every delay.
func (f *Faults) HealAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.cut)
	clear(f.delay)
}

func (f *Faults) isCut(from, to string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cut[faultLink{from, to}]
}

func (f *Faults) delayOf(from, to string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delay[faultLink{from, to}]
}

// checkDial fails a dial from self to addr across a cut link.
func (f *Faults) checkDial(self, addr string) error {
	if f.isCut(self, addr) {
		return fmt.Errorf("dial %s: %w", addr, errCut)
	}
	return nil
}

// dialled wraps a connection self dialled to addr and records its local
// address, so that the accepting side can tell who dialled it.
func (f *Faults) dialled(nc net.Conn, self, addr string) net.Conn {
	c := &faultConn{Conn: nc, f: f, local: self, remote: addr, dialledBy: nc.LocalAddr().String(), closed: make(chan struct{})}
	f.mu.Lock()
	f.conns[c] = struct{}{}
	f.dialers[c.dialledBy] = self
	f.mu.Unlock()
	return c
}

// accepted wraps a connection self accepted, when its dialler is a
// transport of this table. It reports false, having closed nc, when the
// dialler's bytes may not reach self.
func (f *Faults) accepted(nc net.Conn, self string) (net.Conn, bool) {
	f.mu.Lock()
	peer, known := f.dialers[nc.RemoteAddr().String()]
	if !known {
		f.mu.Unlock()
		return nc, true
	}
	if f.cut[faultLink{peer, self}] {
		f.mu.Unlock()
		nc.Close()
		return nil, false
	}
	c := &faultConn{Conn: nc, f: f, local: self, remote: peer, closed: make(chan struct{})}
	f.conns[c] = struct{}{}
	f.mu.Unlock()
	return c, true
}

// faultConn is a connection between two transports of a fault table; it
// consults the table on every read and write.
type faultConn struct {
	net.Conn
	f             *Faults
	local, remote string // advertised addresses of this end and the other
	dialledBy     string // this end's local address when this end dialled; "" when it accepted
	once          sync.Once
	closed        chan struct{}
}

func (c *faultConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.f.isCut(c.remote, c.local) {
		c.Close()
		return 0, fmt.Errorf("read from %s: %w", c.remote, errCut)
	}
	return n, err
}

func (c *faultConn) Write(p []byte) (int, error) {
	if d := c.f.delayOf(c.local, c.remote); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.closed:
			t.Stop()
			return 0, net.ErrClosed
		}
	}
	if c.f.isCut(c.local, c.remote) {
		c.Close()
		return 0, fmt.Errorf("write to %s: %w", c.remote, errCut)
	}
	return c.Conn.Write(p)
}

func (c *faultConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		close(c.closed)
		c.f.mu.Lock()
		delete(c.f.conns, c)
		if c.dialledBy != "" {
			delete(c.f.dialers, c.dialledBy)
		}
		c.f.mu.Unlock()
		err = c.Conn.Close()
	})
	return err
}
