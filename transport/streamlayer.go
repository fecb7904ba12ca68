package transport

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is the raft side of a Transport: raft.StreamLayer over the
// shared listener. Its Close closes the raft side only (see closeRaft).
type streamLayer struct{ t *Transport }

var _ raft.StreamLayer = streamLayer{}

// Accept waits for the next incoming raft connection.
func (s streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.t.raftAccept:
		return c, nil
	case <-s.t.raftDone:
		return nil, fmt.Errorf("transport: raft stream layer: %w", ErrClosed)
	}
}

// Close closes the raft side. raft's NetworkTransport calls it from its own
// Close; see closeRaft for what that does and does not close.
func (s streamLayer) Close() error {
	s.t.closeRaft()
	return nil
}

// Addr is the advertised address, which raft uses as this node's address.
func (s streamLayer) Addr() net.Addr { return s.t.addr }

// Dial opens a raft connection to address within timeout.
func (s streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	t := s.t
	if timeout <= 0 {
		timeout = t.cfg.DialTimeout
	}
	if t.raftIsClosed() {
		return nil, fmt.Errorf("transport: raft dial %s: %w", address, ErrClosed)
	}
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()
	nc, err := t.dial(ctx, string(address), kindRaft)
	if err != nil {
		if t.raftIsClosed() {
			return nil, fmt.Errorf("transport: raft dial %s: %w", address, ErrClosed)
		}
		return nil, fmt.Errorf("transport: raft dial %s: %w", address, err)
	}
	rc := t.trackRaft(nc)
	if rc == nil {
		return nil, fmt.Errorf("transport: raft dial %s: %w", address, ErrClosed)
	}
	return rc, nil
}

// raftConn is a raft connection the transport tracks so that closing the
// raft side closes it, which ends raft's per-connection goroutines too.
type raftConn struct {
	net.Conn
	t    *Transport
	once sync.Once
	err  error
}

func (c *raftConn) Close() error {
	c.once.Do(func() {
		c.err = c.Conn.Close()
		c.t.mu.Lock()
		delete(c.t.raftConns, c)
		c.t.mu.Unlock()
	})
	return c.err
}

// trackRaft wraps and registers nc; when the raft side is closed it closes
// nc and returns nil.
func (t *Transport) trackRaft(nc net.Conn) *raftConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.raftClosed {
		nc.Close()
		return nil
	}
	rc := &raftConn{Conn: nc, t: t}
	t.raftConns[rc] = struct{}{}
	return rc
}

// handOffRaft gives an accepted raft connection to raft's Accept, waiting
// for raft to take it.
func (t *Transport) handOffRaft(nc net.Conn) {
	rc := t.trackRaft(nc)
	if rc == nil {
		return
	}
	select {
	case t.raftAccept <- rc:
	case <-t.raftDone:
		rc.Close()
	}
}

func (t *Transport) raftIsClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.raftClosed
}

// closeRaft closes the raft side for good: Accept and Dial fail with
// ErrClosed, raft connections open now are closed (so raft's connection
// goroutines end), and raft connections arriving later are closed at once.
// The listener and the RPC stay up: raft's NetworkTransport.Close calls this
// when raft shuts down, and the node may still be answering or forwarding
// RPCs while it leaves; Transport.Close closes everything.
func (t *Transport) closeRaft() {
	t.mu.Lock()
	if t.raftClosed {
		t.mu.Unlock()
		return
	}
	t.raftClosed = true
	close(t.raftDone)
	conns := slices.Collect(maps.Keys(t.raftConns))
	t.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
