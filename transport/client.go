package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Client connections.
//
// A Transport keeps up to Config.MaxIdleConns connections per peer, dialled
// on demand and used round robin. A new connection starts with a hello, so
// that its first frame is never late: a cancel for an ID no call uses, whose
// bytes are newlines. A peer ignores it, while an HTTP server given the
// address by mistake takes it for the end of a request line and answers, so
// the call fails at once with ErrNotPeer ("answered HTTP") rather than when
// its ctx ends. A plain connection that a peer closes without a byte while
// calls wait is followed by one TLS handshake to the same address: a peer
// that answers it requires TLS, and the calls fail with ErrNotPeer saying so.
//
// A pooled connection that has carried no call for half of
// Config.IdleTimeout is closed by its dialler, and an accepted one with no
// request running for Config.IdleTimeout by the server: the dialler, which
// can close without racing a request of its own, always goes first. A call
// that finds its connection dead before its request was written moves to a
// fresh one by itself.

// maxCallAttempts bounds how often one Call moves on after finding its
// pooled connection dead before its request was written (a peer restart
// noticed just now). Only such certainly-unsent requests are retried.
const maxCallAttempts = 3

// Call sends req to the peer at addr and waits for its answer or ctx. Many
// calls to one peer share pooled connections and are in flight at once.
//
// Call returns no later than ctx allows. When ctx ends first, the peer is
// sent a cancel (its handler's ctx ends) and the error matches ctx.Err()
// (and ErrNotSent as well if the request had not been written yet). Other
// errors match ErrNotSent, ErrConnLost, ErrRemote, ErrTooLarge or ErrClosed;
// see their docs. req is copied: the caller may reuse it once Call returns.
func (t *Transport) Call(ctx context.Context, addr string, req []byte) ([]byte, error) {
	if len(req) > MaxFrameSize {
		return nil, fmt.Errorf("%w: request of %d bytes to %s (limit %d)", ErrTooLarge, len(req), addr, MaxFrameSize)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: call %s: %w", ErrNotSent, addr, err)
	}
	p, err := t.peer(addr)
	if err != nil {
		return nil, err
	}
	// The writer may still be writing req after an abandoned Call returned,
	// so it works on a copy. Lock commands are small; the copy is cheap.
	body := bytes.Clone(req)
	if body == nil {
		body = []byte{}
	}
	for attempt := 1; ; attempt++ {
		c, err := p.conn(ctx)
		if err != nil {
			return nil, err
		}
		res, stale := c.roundTrip(ctx, body)
		if stale && attempt < maxCallAttempts && ctx.Err() == nil {
			continue
		}
		return res.body, res.err
	}
}

// peer returns the connection pool for addr, creating it on first use.
func (t *Transport) peer(addr string) (*peerPool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("%w: call %s: %w", ErrNotSent, addr, ErrClosed)
	}
	p := t.peers[addr]
	if p == nil {
		p = &peerPool{t: t, addr: addr, slots: make([]poolSlot, t.cfg.MaxIdleConns)}
		t.peers[addr] = p
	}
	return p, nil
}

// peerPool holds up to MaxIdleConns connections to one peer. Calls go round
// robin over the slots; a slot dials on first use and again once its
// connection has died, so a restarted peer is reached anew without errors.
type peerPool struct {
	t     *Transport
	addr  string
	next  atomic.Uint32
	slots []poolSlot
}

type poolSlot struct {
	mu      sync.Mutex   // protects conn and dialing
	conn    *clientConn  // nil, live or dead
	dialing *dialAttempt // the dial in progress, if any
}

// dialAttempt is one dial shared by every call that needs the slot meanwhile.
type dialAttempt struct {
	done chan struct{} // closed when conn or err is set
	conn *clientConn
	err  error
}

// conn returns a live connection from the next slot, dialling if needed.
func (p *peerPool) conn(ctx context.Context) (*clientConn, error) {
	s := &p.slots[p.next.Add(1)%uint32(len(p.slots))]
	s.mu.Lock()
	if c := s.conn; c != nil && !c.dead() {
		s.mu.Unlock()
		return c, nil
	}
	s.conn = nil
	a := s.dialing
	if a == nil {
		a = &dialAttempt{done: make(chan struct{})}
		// The dial runs on its own goroutine so that a caller whose ctx
		// ends leaves it to finish for the next caller.
		if !p.t.spawn(func() { p.dial(s, a) }) {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: call %s: %w", ErrNotSent, p.addr, ErrClosed)
		}
		s.dialing = a
	}
	s.mu.Unlock()
	select {
	case <-a.done:
		return a.conn, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: call %s: dialling: %w", ErrNotSent, p.addr, ctx.Err())
	}
}

func (p *peerPool) dial(s *poolSlot, a *dialAttempt) {
	c, err := p.t.dialRPC(p.addr)
	s.mu.Lock()
	s.dialing = nil
	if err == nil && !c.dead() {
		s.conn = c
	}
	s.mu.Unlock()
	a.conn, a.err = c, err
	close(a.done)
}

// dialRPC opens and starts a client connection. It runs on a goroutine
// the transport tracks.
func (t *Transport) dialRPC(addr string) (*clientConn, error) {
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.DialTimeout)
	nc, err := t.dial(ctx, addr, kindRPC)
	cancel()
	if err != nil {
		if t.isClosed() {
			return nil, fmt.Errorf("%w: call %s: %w", ErrNotSent, addr, ErrClosed)
		}
		return nil, fmt.Errorf("%w: dial %s: %w", ErrNotSent, addr, err)
	}
	c := &clientConn{
		framedConn: newFramedConn(nc, addr),
		t:          t,
		calls:      make(map[uint64]*call),
		lastUsed:   time.Now(),
	}
	// A hello first: a cancel no call will ever match (a peer ignores it),
	// so the server sees a frame at once even when the call this dial was
	// for gave up meanwhile (it closes connections whose first frame is
	// late). Its ID holds newline bytes: an HTTP server given this address
	// by mistake sees the end of a (malformed) request line and answers at
	// once, which readLoop recognises, instead of waiting silently for the
	// rest of a request until the caller gives up.
	c.enqueueLocked(frame{typ: frameCancel, id: httpProbeID})
	c.mu.Lock() // the timer's func reads idleTimer under mu
	c.idleTimer = time.AfterFunc(t.clientIdleTimeout(), c.closeIfIdle)
	c.mu.Unlock()
	if !t.trackRPC(c) {
		c.idleTimer.Stop()
		nc.Close()
		return nil, fmt.Errorf("%w: call %s: %w", ErrNotSent, addr, ErrClosed)
	}
	c.wake()
	t.wg.Go(func() { c.shutdown(c.writeLoop()) })
	t.wg.Go(func() { c.shutdown(c.readLoop()) })
	return c, nil
}

// clientConn is the dialling end of an RPC connection: it writes requests
// and cancels, and one reader routes responses to their calls by ID.
type clientConn struct {
	framedConn
	t      *Transport
	nextID uint64           // protected by mu
	calls  map[uint64]*call // calls awaiting an answer; protected by mu
	heard  atomic.Bool      // the peer has sent at least one byte
	// lastUsed is when a call last started or was answered (protected by
	// mu); idleTimer closes the connection once no call has run for
	// clientIdleTimeout.
	lastUsed  time.Time
	idleTimer *time.Timer
}

// clientIdleTimeout is how long a pooled connection may go without a call
// before its dialler closes it: half the server's IdleTimeout, so that the
// dialler, which can do it without racing a request, always closes first.
func (t *Transport) clientIdleTimeout() time.Duration { return t.cfg.IdleTimeout / 2 }

// closeIfIdle closes the connection if no call has run on it for
// clientIdleTimeout, else looks again when that may be so. The check and
// the close are one step under mu, so a call either comes before (and the
// connection stays) or finds it closed before its request is written (and
// moves to a fresh one, as Call does with every stale connection).
func (c *clientConn) closeIfIdle() {
	limit := c.t.clientIdleTimeout()
	var wait time.Duration
	c.shutdownIf(func() (error, bool) {
		idle := time.Since(c.lastUsed)
		if len(c.calls) > 0 || len(c.queue) > 0 || idle < limit {
			wait = max(limit-idle, limit/10)
			return nil, false
		}
		return fmt.Errorf("%w: no call for %v", errSilent, idle.Round(time.Second)), true
	})
	if wait > 0 {
		c.idleTimer.Reset(wait)
	}
}

// call is one request awaiting its answer on a clientConn.
type call struct {
	id   uint64
	done chan callResult // size 1: the one result is sent without waiting for the caller
	// Protected by the conn's mu.
	written   bool // the writer took the request: the peer may have it
	abandoned bool // the caller gave up first: the writer must skip it
}

type callResult struct {
	body []byte
	err  error
}

// roundTrip sends body and waits for the answer or ctx. stale reports that
// the connection had died before the request was written, so the call can
// safely move to another connection.
func (c *clientConn) roundTrip(ctx context.Context, body []byte) (res callResult, stale bool) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		res.err = c.failure(err, false)
		return res, errors.Is(res.err, errStale)
	}
	c.nextID++
	c.lastUsed = time.Now()
	cl := &call{id: c.nextID, done: make(chan callResult, 1)}
	c.calls[cl.id] = cl
	c.enqueueLocked(frame{typ: frameRequest, id: cl.id, body: body, call: cl})
	c.mu.Unlock()
	c.wake()

	select {
	case res = <-cl.done:
		return res, errors.Is(res.err, errStale)
	case <-ctx.Done():
	}
	c.mu.Lock()
	if _, waiting := c.calls[cl.id]; !waiting {
		// The answer (or the connection's failure) won the race; take it.
		c.mu.Unlock()
		res = <-cl.done
		return res, errors.Is(res.err, errStale)
	}
	delete(c.calls, cl.id)
	written := cl.written
	if written {
		c.enqueueLocked(frame{typ: frameCancel, id: cl.id})
	} else {
		cl.abandoned = true
	}
	c.mu.Unlock()
	if written {
		c.wake()
		return callResult{err: fmt.Errorf("transport: call %s: %w", c.peer, ctx.Err())}, false
	}
	return callResult{err: fmt.Errorf("%w: call %s: %w", ErrNotSent, c.peer, ctx.Err())}, false
}

// errStale marks (inside ErrNotSent) a request that found its connection
// dead before it was written; Call tries another connection.
var errStale = errors.New("connection already closed")

// failure is the error a call gets when its connection ends with cause.
func (c *clientConn) failure(cause error, written bool) error {
	switch {
	case errors.Is(cause, ErrClosed) && written:
		return fmt.Errorf("%w: call %s: %w", ErrConnLost, c.peer, ErrClosed)
	case errors.Is(cause, ErrClosed):
		return fmt.Errorf("%w: call %s: %w", ErrNotSent, c.peer, ErrClosed)
	case errors.Is(cause, ErrNotPeer):
		return cause
	case written:
		return fmt.Errorf("%w: call %s: %v", ErrConnLost, c.peer, cause)
	default:
		return fmt.Errorf("%w: call %s: %w (%v)", ErrNotSent, c.peer, errStale, cause)
	}
}

// httpProbeID is the ID of the cancel each connection starts with (see
// dialRPC): every byte a newline, and never a call's ID, which count up from 1.
const httpProbeID uint64 = 0x0a0a0a0a0a0a0a0a

func (c *clientConn) readLoop() error {
	var hdr [frameHeaderSize]byte
	if err := c.sniffFirstReply(); err != nil {
		return err
	}
	for {
		f, err := readFrame(c.br, &hdr)
		if err != nil {
			return err
		}
		var res callResult
		switch f.typ {
		case frameResponse:
			res.body = f.body
			if res.body == nil {
				res.body = []byte{}
			}
		case frameError:
			res.err = remoteError(c.peer, f.body)
		default:
			return fmt.Errorf("%w: frame type %d from a server", errProtocol, f.typ)
		}
		c.mu.Lock()
		cl := c.calls[f.id]
		delete(c.calls, f.id)
		c.lastUsed = time.Now()
		c.mu.Unlock()
		if cl != nil { // nil: the caller gave up and sent a cancel
			cl.done <- res
		}
	}
}

// sniffFirstReply looks at what the peer sends first, before any frame is
// read, and returns an ErrNotPeer error when it is an HTTP answer
// ("HTTP/"). nil means carry on reading frames.
func (c *clientConn) sniffFirstReply() error {
	first, err := c.br.Peek(5)
	if len(first) > 0 {
		c.heard.Store(true)
	}
	if err == nil && string(first) == "HTTP/" {
		return notPeerError(c.peer + " answered HTTP: it is an HTTP server (a raftlock agent's API port, -http?), " +
			"not a raftlock node's raft address (the agent's -bind or -advertise, Config.BindAddr)")
	}
	return nil
}

// explainSilentHangUp runs when a connection ends, after it is marked dead
// (so no call picks it up meanwhile) and before its waiting calls are
// failed: a transport without ClientTLS whose connection the peer closed
// without sending a byte, while calls waited, asks (probeTLS) whether the
// peer requires TLS, and if so returns the error that says so.
func (c *clientConn) explainSilentHangUp(cause error, waiting int) error {
	if waiting == 0 || c.heard.Load() || c.t.cfg.ClientTLS != nil || c.t.isClosed() ||
		errors.Is(cause, ErrClosed) || errors.Is(cause, ErrNotPeer) {
		return cause
	}
	if c.t.probeTLS(c.peer) {
		return notPeerError(c.peer + " speaks TLS and this node does not: the cluster uses peer TLS; give this node " +
			"peer certificates (the agent's -peer-cert-file, -peer-key-file and -peer-ca-file; Config.ServerTLS " +
			"and ClientTLS)")
	}
	return cause
}

// notPeerError is an ErrNotPeer error; it matches ErrNotSent too, since
// nothing there acted on the request.
type notPeerError string

func (e notPeerError) Error() string { return "transport: " + string(e) }

func (e notPeerError) Is(target error) bool { return target == ErrNotPeer || target == ErrNotSent }

// probeTLS reports whether addr completes (or refuses with an alert) a TLS
// handshake: a peer that closed a plain connection without a word may be
// one that requires TLS. It only runs once such a connection has failed.
func (t *Transport) probeTLS(addr string) bool {
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer nc.Close()
	// Only "does it speak TLS" is asked: nothing is sent after the handshake.
	tc := tls.Client(nc, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	err = tc.HandshakeContext(ctx)
	var alert *net.OpError
	return err == nil || errors.As(err, &alert) && alert.Op == "remote error"
}

// remoteError decodes an error frame's body (a code byte, then the message).
func remoteError(peer string, body []byte) error {
	msg := string(body[1:])
	if body[0] == errCodeTooLarge {
		return fmt.Errorf("%w: %s: %w: %s", ErrRemote, peer, ErrTooLarge, msg)
	}
	return fmt.Errorf("%w: %s: %s", ErrRemote, peer, msg)
}

// shutdown ends the connection once, failing every call still waiting:
// with ErrConnLost if its request was written, else with ErrNotSent.
func (c *clientConn) shutdown(cause error) {
	if cause == nil {
		return // the writer saw done closed: someone else shut down
	}
	c.shutdownIf(func() (error, bool) { return cause, true })
}

// shutdownIf is shutdown with the cause decided under mu: decide returns
// it and whether to shut down at all.
func (c *clientConn) shutdownIf(decide func() (error, bool)) {
	closed := c.t.isClosed()
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	cause, ok := decide()
	if !ok {
		c.mu.Unlock()
		return
	}
	if closed && !errors.Is(cause, ErrClosed) {
		cause = fmt.Errorf("%w (%v)", ErrClosed, cause)
	}
	c.err = cause
	// Dead from the moment err is set, in the same step: a call that finds
	// err set (stale) goes back to the pool, which must then see the
	// connection dead and dial anew. Were done closed only after the close
	// below, such a call could be handed this connection again on every
	// retry and give up with ErrNotSent without ever trying a fresh one.
	close(c.done)
	calls := c.calls
	c.calls = nil
	c.queue = nil
	c.mu.Unlock()
	c.idleTimer.Stop()
	c.nc.Close()
	c.t.untrackRPC(c)
	c.t.logConnEnd("client", c.peer, cause)
	cause = c.explainSilentHangUp(cause, len(calls))
	for _, cl := range calls {
		cl.done <- callResult{err: c.failure(cause, cl.written)}
	}
}
