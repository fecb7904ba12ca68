// Package faultnet is a fault table for tests that run several raftlock
// nodes (or transports) in one process: it cuts, drops or delays the
// traffic from one to another, which a single loopback interface cannot do
// otherwise (every peer is 127.0.0.1). It plugs into the transport's dial and
// listen hooks (transport.Config.Dial and Listen, cluster.Config.TransportDial
// and TransportListen); production code never imports it.
package faultnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Faults is a fault table. Give each transport that takes part its own
// Endpoint of one shared table, as its dial and listen hooks. Transports are
// named by their listening address (which must be the address peers dial,
// as with a BindAddr of 127.0.0.1:port and no AdvertiseAddr).
//
// Cut and Drop work on the byte streams, in one direction: afterwards no
// byte that a sends reaches b, on any connection, raft's or the RPC's,
// whichever side dialled it. Bytes from b to a still flow: b can reach a
// and its requests arrive, but a's answers do not. They differ in how the
// loss shows:
//
//   - Cut fails fast, like a reset: it closes the connections open between
//     a and b at once (a partition cuts existing connections, not only new
//     ones), a dial from a to b fails, and any later write by a to b, or
//     read by b of a's bytes, closes its connection with an error.
//   - Drop is silent, like a switch that loses every packet: a's writes to
//     b succeed and vanish, a dial from a to b hangs until its deadline (or
//     until the link heals), and nothing is closed until the link heals.
//     Whoever waits for an answer waits for its own timeout, so calls end
//     with unknown outcomes. A connection that lost bytes is closed when
//     its link heals, since its stream has a hole.
//
// A delay holds every write from a to b for the given time before it goes
// out, on connections open now and later, keeping the bytes in order.
//
// The accepting side learns who dialled it from the table (the dialler
// records its connection's local address), so this works only between
// endpoints of one *Faults. All methods are safe for concurrent use.
type Faults struct {
	mu      sync.Mutex // protects the fields below
	links   map[faultLink]linkFault
	conns   map[*faultConn]struct{}
	dialers map[string]string // local address of a connection dialled through the table -> the dialler's address
}

// faultLink is one direction between two transports, by advertised address.
type faultLink struct{ from, to string }

// linkFault is what is wrong with one direction.
type linkFault struct {
	cut   bool
	drop  bool
	delay time.Duration
}

// ErrCut is the error of a dial, read or write across a cut link.
var ErrCut = errors.New("faultnet: link cut by the fault table")

// NewFaults returns an empty fault table: nothing cut, nothing delayed.
func NewFaults() *Faults {
	return &Faults{
		links:   make(map[faultLink]linkFault),
		conns:   make(map[*faultConn]struct{}),
		dialers: make(map[string]string),
	}
}

// Cut stops the bytes from the transport at from reaching the one at to, and
// closes every connection between the two.
func (f *Faults) Cut(from, to string) {
	f.mu.Lock()
	l := f.links[faultLink{from, to}]
	l.cut = true
	f.links[faultLink{from, to}] = l
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

// Drop silently loses the bytes from the transport at from to the one at to.
func (f *Faults) Drop(from, to string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.links[faultLink{from, to}]
	l.drop = true
	f.links[faultLink{from, to}] = l
}

// Delay holds each write from the transport at from to the one at to for d
// before it goes out; 0 removes the delay.
func (f *Faults) Delay(from, to string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.links[faultLink{from, to}]
	l.delay = max(d, 0)
	f.setLocked(faultLink{from, to}, l)
}

func (f *Faults) setLocked(k faultLink, l linkFault) {
	if l == (linkFault{}) {
		delete(f.links, k)
		return
	}
	f.links[k] = l
}

// Heal lets the bytes from from reach to again and removes its delay.
// Connections closed by a cut stay closed, and those that lost bytes to a
// drop are closed now; new ones are dialled as needed.
func (f *Faults) Heal(from, to string) {
	f.mu.Lock()
	delete(f.links, faultLink{from, to})
	doomed := f.holedLocked(func(c *faultConn) bool {
		return (c.local == from && c.remote == to) || (c.local == to && c.remote == from)
	})
	f.mu.Unlock()
	for _, c := range doomed {
		c.Close()
	}
}

// HealAll removes every cut, drop and delay.
func (f *Faults) HealAll() {
	f.mu.Lock()
	clear(f.links)
	doomed := f.holedLocked(func(*faultConn) bool { return true })
	f.mu.Unlock()
	for _, c := range doomed {
		c.Close()
	}
}

// holedLocked lists the connections that lost bytes to a drop, among those
// that match.
func (f *Faults) holedLocked(match func(*faultConn) bool) []*faultConn {
	var out []*faultConn
	for c := range f.conns {
		if c.holed && match(c) {
			out = append(out, c)
		}
	}
	return out
}

func (f *Faults) link(from, to string) linkFault {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.links[faultLink{from, to}]
}

// checkDial fails a dial from self to addr across a cut link, and holds one
// across a dropped link until ctx ends or the link heals.
func (f *Faults) checkDial(ctx context.Context, self, addr string) error {
	for {
		l := f.link(self, addr)
		switch {
		case l.cut:
			return fmt.Errorf("dial %s: %w", addr, ErrCut)
		case !l.drop:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dial %s: link dropped by the fault table: %w", addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
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

// accepted wraps a connection self accepted, when its dialler is an
// endpoint of this table. It reports false, having closed nc, when the
// dialler's bytes may not reach self. Call it once the dialler has written
// (its first byte has been read): by then the dialler has told the table who
// it is.
func (f *Faults) accepted(nc net.Conn, self string) (net.Conn, bool) {
	f.mu.Lock()
	peer, known := f.dialers[nc.RemoteAddr().String()]
	if !known {
		f.mu.Unlock()
		return nc, true
	}
	if l := f.links[faultLink{peer, self}]; l.cut || l.drop {
		f.mu.Unlock()
		nc.Close()
		return nil, false
	}
	c := &faultConn{Conn: nc, f: f, local: self, remote: peer, closed: make(chan struct{})}
	f.conns[c] = struct{}{}
	f.mu.Unlock()
	return c, true
}

// Endpoint is one transport's place in a table: its Dial and Listen are the
// transport's hooks. Make one per transport with Faults.Endpoint.
type Endpoint struct {
	f    *Faults
	self atomic.Pointer[string] // the listening address, once Listen ran
}

// Endpoint returns a new endpoint of the table, named by the address its
// Listen binds.
func (f *Faults) Endpoint() *Endpoint { return &Endpoint{f: f} }

// Listen listens as net.Listen does; the connections it accepts consult the
// table.
func (e *Endpoint) Listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return e.Adopt(ln), nil
}

// Adopt is Listen for a listener already bound (by a caller that had to
// know the address before the node using the endpoint starts): it names the
// endpoint, and the connections the listener it returns accepts consult the
// table.
func (e *Endpoint) Adopt(ln net.Listener) net.Listener {
	self := ln.Addr().String()
	e.self.Store(&self)
	return &listener{Listener: ln, f: e.f, self: self}
}

// Dial dials as net.Dialer.DialContext does, unless the link from this
// endpoint to addr is cut (it fails) or dropped (it waits until ctx ends or
// the link heals); the connection it returns consults the table. Call it
// after Listen, which names the endpoint.
func (e *Endpoint) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	selfp := e.self.Load()
	if selfp == nil {
		return nil, errors.New("faultnet: Endpoint.Dial called before Listen named the endpoint")
	}
	self := *selfp
	if err := e.f.checkDial(ctx, self, addr); err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return e.f.dialled(nc, self, addr), nil
}

type listener struct {
	net.Listener
	f    *Faults
	self string
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &acceptedConn{Conn: nc, f: l.f, self: l.self}, nil
}

// acceptedConn is an accepted connection until its first read, which tells
// who dialled it (see accepted); from then on it is a faultConn, or the
// plain connection when the dialler is not on the table.
type acceptedConn struct {
	net.Conn
	f    *Faults
	self string

	once  sync.Once
	inner atomic.Pointer[net.Conn] // set by the first read
}

func (c *acceptedConn) conn() net.Conn {
	if p := c.inner.Load(); p != nil {
		return *p
	}
	return c.Conn
}

func (c *acceptedConn) Read(p []byte) (int, error) {
	if inner := c.inner.Load(); inner != nil {
		return (*inner).Read(p)
	}
	n, err := c.Conn.Read(p)
	if n == 0 {
		return n, err
	}
	refused := false
	c.once.Do(func() {
		nc, ok := c.f.accepted(c.Conn, c.self)
		if !ok {
			refused = true
			return
		}
		c.inner.Store(&nc)
	})
	if refused {
		return 0, fmt.Errorf("accept from %s: %w", c.Conn.RemoteAddr(), ErrCut)
	}
	return n, err
}

func (c *acceptedConn) Write(p []byte) (int, error) { return c.conn().Write(p) }
func (c *acceptedConn) Close() error                { return c.conn().Close() }

// faultConn is a connection between two transports of a fault table; it
// consults the table on every read and write.
type faultConn struct {
	net.Conn
	f             *Faults
	local, remote string // advertised addresses of this end and the other
	dialledBy     string // this end's local address when this end dialled; "" when it accepted
	holed         bool   // a write was dropped: the stream has a hole (protected by f.mu)
	once          sync.Once
	closed        chan struct{}
}

func (c *faultConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.f.link(c.remote, c.local).cut {
		c.Close()
		return 0, fmt.Errorf("read from %s: %w", c.remote, ErrCut)
	}
	return n, err
}

func (c *faultConn) Write(p []byte) (int, error) {
	if d := c.f.link(c.local, c.remote).delay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.closed:
			t.Stop()
			return 0, net.ErrClosed
		}
	}
	c.f.mu.Lock()
	l := c.f.links[faultLink{c.local, c.remote}]
	if l.drop && !l.cut {
		c.holed = true
	}
	c.f.mu.Unlock()
	switch {
	case l.cut:
		c.Close()
		return 0, fmt.Errorf("write to %s: %w", c.remote, ErrCut)
	case l.drop:
		select {
		case <-c.closed:
			return 0, net.ErrClosed
		default:
			return len(p), nil // lost on the way
		}
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
