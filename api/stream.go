package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/internal/streamwire"
)

// The binary stream. A node that serves GET /v1/stream upgrades it to a
// connection on which the client sends any number of acquires (waiting
// ones too), releases and extends, each framed with an id and its JSON
// body as its own route takes it, and the node answers each as soon as it
// is done, in any order (package streamwire has the framing).
//
// What goes on it: the operations that would otherwise be an HTTP exchange
// of their own. A waiting acquire, which over HTTP/1.1 holds a connection
// (and a server goroutine) for its whole wait; and an operation that finds
// no exchange in flight to the endpoint (batch.go), such as a holder's
// release in a queue of waiters. Operations that come while one is in
// flight still queue and go together as one POST /v1/batch: measured with
// bench (3 nodes and their clients on 2 cores), sending those on the
// stream one by one cost about a third more CPU per operation than the
// batch, and as many operations per second fewer; sending the lone and
// waiting ones on it raised 16 clients' hand-offs on one key from about
// 70% to about 80% of the embedded figure.
//
// The client opens one stream per endpoint in the background, when the
// first such operation comes; until it is up, and whenever it is down,
// operations take the HTTP routes. A node without the route (an older
// agent: 404, 405, or any answer but the upgrade) is not asked again. A
// stream broken after an operation was written makes that operation's
// outcome unknown, as a connection that breaks after a request went out
// does; an operation the node said it never read (a go-away, as the node
// stops) is sent again like one that never left.

// streamIdle is how long a stream with nothing in flight stays open.
const streamIdle = 90 * time.Second

// streamRetry bounds the wait before trying again to open a stream to an
// endpoint that could not be reached.
const streamRetry = 30 * time.Second

// maxStreamAnswer bounds an answer frame, as maxResponseBytes bounds an
// HTTP answer.
const maxStreamAnswer = maxResponseBytes

// errStreamClosed ends a stream the client closes: idle, or Client.Close.
var errStreamClosed = errors.New("the stream was closed")

// errStreamAway is the error of operations the node did not read before it
// went away: they never reached it.
var errStreamAway = errors.New("the node stopped reading the stream before this operation")

// streamSlot is the stream of one endpoint, or why there is none.
type streamSlot struct {
	mu      sync.Mutex
	s       *clientStream // nil: none up
	dialing bool
	off     bool // the node has no stream: never again
	retryAt time.Time
	backoff time.Duration
}

// stream returns the endpoint's stream if one is up, else nil, and starts
// opening one when it is time.
func (c *Client) stream(base *url.URL) *clientStream {
	slot := perEndpoint[streamSlot](&c.streams, base)
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.s != nil || slot.off || slot.dialing || c.closed.Load() || time.Now().Before(slot.retryAt) {
		return slot.s
	}
	slot.dialing = true
	c.lifeMu.Lock()
	if c.closed.Load() {
		c.lifeMu.Unlock()
		slot.dialing = false
		return nil
	}
	c.background.Add(1)
	c.lifeMu.Unlock()
	go func() {
		defer c.background.Done()
		rwc, off := c.openStream(base)
		var opened *clientStream
		defer func() {
			if opened != nil && c.closed.Load() {
				opened.closeWhenIdle() // Close came while it opened
			}
		}()
		slot.mu.Lock()
		defer slot.mu.Unlock()
		slot.dialing = false
		switch {
		case rwc != nil:
			var s *clientStream
			s = newClientStream(rwc, func() {
				slot.mu.Lock()
				if slot.s == s {
					slot.s = nil
				}
				slot.mu.Unlock()
			})
			slot.s, slot.backoff, opened = s, 0, s
		case off:
			slot.off = true
		default: // the HTTP routes report the endpoint's trouble
			slot.backoff = min(max(2*slot.backoff, 100*time.Millisecond), streamRetry)
			slot.retryAt = time.Now().Add(slot.backoff)
		}
	}()
	return nil
}

// openStream asks base for the stream: rwc when it is up, else off when
// the node has none (not worth asking again), or neither when it may pass
// later.
func (c *Client) openStream(base *url.URL) (rwc io.ReadWriteCloser, off bool) {
	ctx, cancel := context.WithCancel(c.bgCtx)
	// Cancelling the request's context once it is upgraded would not touch
	// the connection; it only bounds the upgrade.
	timer := time.AfterFunc(DefaultDialTimeout+5*time.Second, cancel)
	defer timer.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base.JoinPath("/v1/stream").String(), nil)
	if err != nil {
		return nil, true
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", streamwire.Protocol)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// A caller's HTTPClient.Timeout would bound the stream's whole life (and
	// net/http then hides the connection behind the body); the timer above
	// bounds the upgrade.
	hc := *c.hc
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return nil, false
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests,
			http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
			return nil, false // may pass later
		default:
			return nil, true // an agent without the stream, or a proxy that does not pass it
		}
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok { // a RoundTripper of the caller's that does not hand the connection over
		resp.Body.Close()
		return nil, true
	}
	return rwc, false
}

// clientStream is one open stream.
type clientStream struct {
	rwc   io.ReadWriteCloser
	slots chan struct{} // operations in flight, at most streamwire.MaxInflight
	gone  func()        // takes the stream out of its slot

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]*streamOp
	queue    []*streamOp // not yet written
	cancels  []uint64    // cancel frames to write
	broken   bool        // no new operations: the stream failed, went away or closes
	closing  bool        // close once nothing is in flight
	writing  bool        // a goroutine is in flush's write
	idle     *time.Timer
	lastUsed time.Time
	spare    []byte
}

// streamOp is one operation on a stream and, once done, its outcome.
type streamOp struct {
	id    uint64
	op    byte
	body  []byte
	state atomic.Int32 // itemQueued, itemTaken or itemAbandoned
	done  chan struct{}

	status  int
	payload []byte
	sent    bool
	err     error
}

// newClientStream runs a stream on rwc; gone is called (maybe more than
// once) when it takes no more operations.
func newClientStream(rwc io.ReadWriteCloser, gone func()) *clientStream {
	s := &clientStream{
		rwc:      rwc,
		gone:     gone,
		slots:    make(chan struct{}, streamwire.MaxInflight),
		pending:  make(map[uint64]*streamOp),
		lastUsed: time.Now(),
	}
	s.idle = time.AfterFunc(streamIdle, s.closeIfIdle)
	go s.reader()
	return s
}

// do sends one operation and waits for its answer. ok is false when the
// stream took nothing (it is going or gone): send it another way.
func (s *clientStream) do(ctx context.Context, op byte, body []byte) (status int, payload []byte, sent bool, err error, ok bool) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, nil, false, ctx.Err(), true
	}
	o := &streamOp{op: op, body: body, done: make(chan struct{})}
	s.mu.Lock()
	if s.broken {
		s.mu.Unlock()
		<-s.slots
		return 0, nil, false, nil, false
	}
	s.nextID++
	o.id = s.nextID
	s.pending[o.id] = o
	s.queue = append(s.queue, o)
	s.lastUsed = time.Now()
	s.mu.Unlock()
	s.flush()
	select {
	case <-o.done:
		return o.status, o.payload, o.sent, o.err, true
	case <-ctx.Done():
	}
	if o.state.CompareAndSwap(itemQueued, itemAbandoned) {
		s.finish(o.id) // never written: the writer skips it
		return 0, nil, false, ctx.Err(), true
	}
	// Written: the node may act on it. Withdraw it there, as a closed
	// connection would; its answer, when it comes, frees its slot.
	s.mu.Lock()
	if !s.broken {
		s.cancels = append(s.cancels, o.id)
	}
	s.mu.Unlock()
	s.flush()
	return 0, nil, true, ctx.Err(), true
}

// finish takes operation id out of those in flight and returns it (nil if
// it was not).
func (s *clientStream) finish(id uint64) *streamOp {
	s.mu.Lock()
	o := s.pending[id]
	delete(s.pending, id)
	idle := s.closing && len(s.pending) == 0
	s.mu.Unlock()
	if o != nil {
		<-s.slots
	}
	if idle {
		s.fail(errStreamClosed)
	}
	return o
}

// flush writes the queued operations and cancels, unless another
// goroutine is at it. The goroutine that writes goes on while operations
// come meanwhile: a lone caller's operation goes at once from its own
// goroutine, and those of callers that come together (the answers of one
// raft entry wake them together) mostly share a system call.
func (s *clientStream) flush() {
	s.mu.Lock()
	if s.writing {
		s.mu.Unlock()
		return // the goroutine at it takes what was queued
	}
	s.writing = true
	for (len(s.queue) > 0 || len(s.cancels) > 0) && (!s.broken || len(s.pending) > 0) {
		buf := s.spare[:0]
		for _, o := range s.queue {
			if o.state.CompareAndSwap(itemQueued, itemTaken) {
				buf = streamwire.AppendRequest(buf, o.id, o.op, o.body)
			}
		}
		clear(s.queue)
		s.queue = s.queue[:0]
		for _, id := range s.cancels {
			buf = streamwire.AppendRequest(buf, id, streamwire.OpCancel, nil)
		}
		s.cancels = s.cancels[:0]
		s.spare = nil
		s.mu.Unlock()
		var err error
		if len(buf) > 0 {
			_, err = s.rwc.Write(buf)
		}
		s.mu.Lock()
		s.spare = buf[:0]
		if err != nil {
			s.writing = false
			s.mu.Unlock()
			s.fail(fmt.Errorf("writing to the stream: %w", err))
			return
		}
	}
	s.writing = false
	s.mu.Unlock()
}

// reader hands each answer to its operation.
func (s *clientStream) reader() {
	rd := streamwire.NewReader(bufio.NewReaderSize(s.rwc, 32<<10), maxStreamAnswer)
	for {
		p, err := rd.Next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			s.fail(fmt.Errorf("reading the stream: %w", err))
			return
		}
		a, err := streamwire.ParseAnswer(p)
		if err != nil {
			s.fail(fmt.Errorf("%w: %v", ErrUnexpectedResponse, err))
			return
		}
		if a.ID == 0 {
			var why ErrorBody
			_ = json.Unmarshal(a.Body, &why)
			s.goneAway(a.Last, fmt.Errorf("%w: %s", errStreamAway, why.Error.Message))
			continue
		}
		if o := s.finish(a.ID); o != nil {
			o.status, o.payload, o.sent = a.Status, append([]byte(nil), a.Body...), true
			close(o.done)
		}
	}
}

// goneAway takes the operations the node did not read (numbered after
// last) back: they never reached it.
func (s *clientStream) goneAway(last uint64, why error) {
	s.mu.Lock()
	s.broken = true
	var unread []*streamOp
	for id, o := range s.pending {
		if id > last {
			o.state.CompareAndSwap(itemQueued, itemAbandoned) // not to be written now
			unread = append(unread, o)
		}
	}
	s.mu.Unlock()
	s.gone()
	for _, o := range unread {
		if s.finish(o.id) != nil {
			o.err = why
			close(o.done)
		}
	}
}

// fail ends the stream: every operation in flight fails with err, as sent
// if it was written, else as never sent.
func (s *clientStream) fail(err error) {
	s.mu.Lock()
	s.broken = true
	ops := s.pending
	s.pending = map[uint64]*streamOp{}
	s.mu.Unlock()
	s.gone()
	s.idle.Stop()
	s.rwc.Close()
	for _, o := range ops {
		<-s.slots
		o.sent = !o.state.CompareAndSwap(itemQueued, itemAbandoned)
		o.err = err
		close(o.done)
	}
}

// closeWhenIdle closes the stream once nothing is in flight, and takes no
// new operation (Client.Close).
func (s *clientStream) closeWhenIdle() {
	s.mu.Lock()
	s.broken, s.closing = true, true
	idle := len(s.pending) == 0
	s.mu.Unlock()
	if idle {
		s.fail(errStreamClosed)
	}
}

// closeIfIdle closes the stream when it has carried nothing for streamIdle.
func (s *clientStream) closeIfIdle() {
	s.mu.Lock()
	if s.broken {
		s.mu.Unlock()
		return
	}
	if len(s.pending) > 0 || time.Since(s.lastUsed) < streamIdle {
		s.idle.Reset(streamIdle - min(time.Since(s.lastUsed), streamIdle) + time.Second)
		s.mu.Unlock()
		return
	}
	s.broken = true
	s.mu.Unlock()
	s.fail(errStreamClosed)
}
