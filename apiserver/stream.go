package apiserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/streamwire"
	"github.com/raftlock/raftlock/lock"
)

// stream serves GET /v1/stream, upgraded to the binary stream the Go
// client uses (package streamwire says how it is framed): each operation
// on it (acquire, with or without wait, release, extend) is the one its
// route runs (from ops), as in a POST /v1/batch (same decoding, rights,
// metrics and answers, the caller being the upgrade request's token), but
// is answered as soon as it is done, whatever else is in flight. A cancel
// frame, or the connection's end, withdraws an operation as a closed
// connection withdraws its request.
//
// Over HTTP/1.1 an acquire that waits holds a connection and a goroutine
// of the server for its whole wait, and an operation alone pays a request's
// headers; on the stream, all of a client's share one connection.
//
// An acquire granted whose answer the stream cannot carry (the client
// went away before it was done, or writing to the connection failed) is
// released at once, as for a request whose connection closed: nobody will
// be told of the grant, so nobody would release it before its TTL.
//
// When the node stops serving (Server.Shutdown, Handler.CloseStreams) or
// the client breaks the framing, the node sends a go-away naming the last
// operation it read, answers those it has, and closes the stream: the
// client sends the others elsewhere.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request) {
	if !headerHasToken(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), streamwire.Protocol) {
		w.Header().Set("Upgrade", streamwire.Protocol)
		w.Header().Set("Connection", "Upgrade")
		writeError(w, newAPIError(http.StatusUpgradeRequired, api.CodeBadRequest,
			"api: %s is the Go client's binary stream: ask for it with the headers \"Connection: Upgrade\" and \"Upgrade: %s\"; JSON callers use /v1/acquire, /v1/release and /v1/extend",
			r.URL.Path, streamwire.Protocol))
		return
	}
	if r.ProtoMajor != 1 {
		writeError(w, newAPIError(http.StatusHTTPVersionNotSupported, api.CodeBadRequest,
			"api: %s is upgraded from HTTP/1.1, not %s: the Go client asks for it on a connection of its own", r.URL.Path, r.Proto))
		return
	}
	if !h.streams.open() {
		writeError(w, newAPIError(http.StatusServiceUnavailable, api.CodeClosed, "api: the node is shutting down"))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		h.streams.done()
		writeError(w, newAPIError(http.StatusInternalServerError, api.CodeInternal, "api: taking the connection over for the stream: %v", err))
		return
	}
	// The server's deadlines were for the upgrade request; the stream sets
	// its own.
	_ = conn.SetDeadline(time.Time{})
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + streamwire.Protocol + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		h.streams.done()
		return
	}
	s := newServerStream(h, r, conn, brw.Reader)
	h.streams.add(s)
	h.metrics.streams.Inc()
	s.serve()
	h.metrics.streams.Dec()
	h.streams.remove(s)
	h.streams.done()
}

func headerHasToken(header http.Header, name, token string) bool {
	for _, v := range header.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// serverStream is one stream at the node.
type serverStream struct {
	h       *Handler
	upgrade *http.Request // the upgrade request: its token
	conn    net.Conn
	rd      *streamwire.Reader

	root   context.Context // ends with the stream
	cancel context.CancelFunc
	auth   *authenticator // the one the caller was found with
	who    *caller        // the caller, as auth found it

	ops sync.WaitGroup // operations in flight

	mu       sync.Mutex
	inflight map[uint64]context.CancelFunc
	out      []byte   // answers not yet written
	grants   []func() // give back the acquires granted in out, should out be lost
	spare    []byte
	away     bool // reads no more (goAway asked, or the reader stopped)
	writing  bool // a goroutine is in flush's write
	broken   bool // a write failed: the client is gone
}

func newServerStream(h *Handler, r *http.Request, conn net.Conn, br *bufio.Reader) *serverStream {
	s := &serverStream{
		h: h, upgrade: r, conn: conn,
		rd:       streamwire.NewReader(br, int(h.cfg.MaxBodyBytes)+16),
		auth:     h.auth.Load(),
		inflight: make(map[uint64]context.CancelFunc),
	}
	s.root, s.cancel = context.WithCancel(context.WithoutCancel(r.Context()))
	s.who = callerOf(r)
	return s
}

// serve reads operations until the stream ends or goes away, then waits
// for the answers to be written and closes the connection.
func (s *serverStream) serve() {
	defer s.cancel()
	if d, ok := s.h.store.(interface{ Done() <-chan struct{} }); ok {
		// A node that closes (or halts) sends its streams' clients elsewhere.
		go func() {
			select {
			case <-d.Done():
				s.goAway()
			case <-s.root.Done():
			}
		}()
	}
	last, status, reason := s.read()
	s.mu.Lock()
	s.away = true
	s.mu.Unlock()
	if status == 0 {
		// The client is gone (or its connection broke): as for a request
		// whose connection closed, its operations are withdrawn.
		s.cancel()
	} else {
		body, _ := json.Marshal(api.ErrorBody{Error: reason.detail})
		s.queue(func(out []byte) []byte { return streamwire.AppendGoAway(out, last, status, body) })
	}
	// Each operation's goroutine flushes its answer before it is done:
	// once all are, everything is written.
	s.ops.Wait()
	s.flush()
	s.conn.Close()
}

// read runs the operations the client sends until it stops: status 0 when
// the client went away, else the go-away's status and reason. last is the
// id of the last request read.
func (s *serverStream) read() (last uint64, status int, reason *apiError) {
	for {
		p, err := s.rd.Next()
		if err != nil {
			if s.goingAway() {
				return last, http.StatusServiceUnavailable, newAPIError(http.StatusServiceUnavailable, api.CodeClosed, "api: the node is shutting down: send what was not read elsewhere")
			}
			if errors.Is(err, streamwire.ErrFrame) {
				return last, http.StatusBadRequest, newAPIError(http.StatusBadRequest, api.CodeBadRequest, "api: %s: %v", s.upgrade.URL.Path, err)
			}
			return last, 0, nil // io.EOF or the connection's error
		}
		req, err := streamwire.ParseRequest(p)
		if err != nil {
			return last, http.StatusBadRequest, newAPIError(http.StatusBadRequest, api.CodeBadRequest, "api: %s: %v", s.upgrade.URL.Path, err)
		}
		if req.Op != streamwire.OpCancel {
			last = req.ID
		}
		if e := s.reauthenticate(); e != nil {
			s.answerError(req.ID, e)
			return last, e.status, e
		}
		s.start(req)
	}
}

// goingAway reports whether the stream was asked to go away.
func (s *serverStream) goingAway() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.away
}

// goAway stops the reading at once (what it has not read it leaves
// unread): the reader then sends the go-away.
func (s *serverStream) goAway() {
	s.mu.Lock()
	s.away = true
	s.mu.Unlock()
	_ = s.conn.SetReadDeadline(time.Now())
}

// reauthenticate finds the caller again when the tokens changed (SIGHUP):
// a stream keeps the rights its token has now, as requests do. A token no
// longer known ends the stream.
func (s *serverStream) reauthenticate() *apiError {
	a := s.h.auth.Load()
	if a == s.auth {
		return nil
	}
	c, e := a.authenticate(s.upgrade)
	if e != nil {
		return e
	}
	s.auth, s.who = a, c
	return nil
}

// start runs one request on a worker.
func (s *serverStream) start(req streamwire.Request) {
	if req.Op == streamwire.OpCancel {
		s.mu.Lock()
		cancel := s.inflight[req.ID]
		s.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		return
	}
	op := streamOps[req.Op]
	if op == nil {
		s.answerError(req.ID, newAPIError(http.StatusBadRequest, api.CodeBadRequest,
			"api: stream operation %d is not one the node knows (acquire %d, release %d, extend %d, cancel %d)",
			req.Op, streamwire.OpAcquire, streamwire.OpRelease, streamwire.OpExtend, streamwire.OpCancel))
		return
	}
	ctx, cancel := context.WithCancel(s.root)
	s.mu.Lock()
	switch {
	case s.inflight[req.ID] != nil:
		s.mu.Unlock()
		cancel()
		s.answerError(req.ID, newAPIError(http.StatusBadRequest, api.CodeBadRequest, "api: stream operation %d is already in flight: number each operation anew", req.ID))
		return
	case len(s.inflight) >= streamwire.MaxInflight:
		s.mu.Unlock()
		cancel()
		s.answerError(req.ID, newAPIError(http.StatusTooManyRequests, api.CodeTooManyInFlight, "api: a stream carries at most %d operations in flight: wait for answers before sending more", streamwire.MaxInflight))
		return
	}
	s.inflight[req.ID] = cancel
	s.mu.Unlock()
	who := s.who
	body := append([]byte(nil), req.Body...) // the reader reuses its buffer
	s.ops.Add(1)
	s.h.batchWorkers.run(func() {
		defer s.ops.Done()
		c := &streamedCall{
			call: opCall{op: op.name, remote: s.upgrade.RemoteAddr},
			in:   opInput{body: body},
		}
		status, answer := s.h.runOp(ctx, op, who, &c.call, &c.in)
		var giveBack func() // set when an acquire was granted
		if lease, ok := answer.(api.LeaseResponse); ok && op.streamOp == streamwire.OpAcquire {
			giveBack = s.giveBack(lease)
		}
		status, raw := encodeAnswer(status, answer)
		s.mu.Lock()
		delete(s.inflight, req.ID)
		s.mu.Unlock()
		cancel()
		s.queueAnswer(func(out []byte) []byte { return streamwire.AppendAnswer(out, req.ID, status, raw) }, giveBack)
	})
}

// streamedCall is one operation of a stream: its call and its input, in
// one allocation.
type streamedCall struct {
	call opCall
	in   opInput
}

// giveBack returns what releases the lock of a granted acquire's answer
// (a multi-key set's first key releases the whole set).
func (s *serverStream) giveBack(lease api.LeaseResponse) func() {
	key, err := lease.DecodeKey()
	if err != nil {
		return nil // the handler encoded it: cannot happen
	}
	owner, err := lock.ParseOwner(lease.Owner)
	if err != nil {
		return nil
	}
	return func() { s.h.releaseAbandoned(key, owner) }
}

func (s *serverStream) answerError(id uint64, e *apiError) {
	raw, _ := json.Marshal(api.ErrorBody{Error: e.detail})
	s.queue(func(out []byte) []byte { return streamwire.AppendAnswer(out, id, e.status, raw) })
}

// queue appends a frame to what is written next, and writes it unless
// another goroutine is writing (which writes it next).
func (s *serverStream) queue(frame func([]byte) []byte) {
	s.queueAnswer(frame, nil)
}

// queueAnswer is queue for an answer that, when giveBack is not nil,
// grants a lock: if the stream cannot write it (it is broken, or the write
// fails), giveBack releases the lock.
func (s *serverStream) queueAnswer(frame func([]byte) []byte, giveBack func()) {
	s.mu.Lock()
	if s.broken {
		s.mu.Unlock()
		if giveBack != nil {
			giveBack()
		}
		return
	}
	s.out = frame(s.out)
	if giveBack != nil {
		s.grants = append(s.grants, giveBack)
	}
	s.mu.Unlock()
	s.flush()
}

// flush writes the queued frames, unless another goroutine is at it. The
// goroutine that writes goes on while frames come meanwhile, so that the
// answers of one raft entry, which come together, mostly share a system
// call, and a lone answer goes at once, from its own goroutine. A client
// that does not read its answers for Config.OpTimeout loses the stream.
func (s *serverStream) flush() {
	s.mu.Lock()
	if s.writing {
		s.mu.Unlock()
		return // the goroutine at it takes what was queued
	}
	s.writing = true
	var lost []func() // grants whose answers were not written
	for len(s.out) > 0 && !s.broken {
		buf, grants := s.out, s.grants
		s.out, s.grants = s.spare[:0], nil
		s.mu.Unlock()
		_ = s.conn.SetWriteDeadline(time.Now().Add(s.h.cfg.OpTimeout))
		_, err := s.conn.Write(buf)
		s.mu.Lock()
		s.spare = buf[:0]
		if err != nil {
			s.broken = true
			lost = append(grants, s.grants...)
			s.out, s.grants = nil, nil
			s.mu.Unlock()
			s.cancel()
			s.conn.Close() // the reader stops too
			s.mu.Lock()
		}
	}
	s.writing = false
	s.mu.Unlock()
	for _, giveBack := range lost {
		giveBack()
	}
}

// streams are the binary streams open at a handler.
type streams struct {
	mu      sync.Mutex
	all     map[*serverStream]struct{}
	closing bool
	wg      sync.WaitGroup
}

// open counts a stream about to start, unless the handler is closing them.
func (ss *streams) open() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closing {
		return false
	}
	ss.wg.Add(1)
	return true
}

func (ss *streams) done() { ss.wg.Done() }

func (ss *streams) add(s *serverStream) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.all == nil {
		ss.all = make(map[*serverStream]struct{})
	}
	ss.all[s] = struct{}{}
	if ss.closing {
		s.goAway()
	}
}

func (ss *streams) remove(s *serverStream) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.all, s)
}

func (ss *streams) each(fn func(*serverStream)) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for s := range ss.all {
		fn(s)
	}
}

// streamCancelGrace is how long CloseStreams, out of time, lets the
// withdrawn operations' answers go out before it closes the connections.
const streamCancelGrace = time.Second

// goAway tells every stream to go away, and refuses new ones.
func (ss *streams) goAway() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closing = true
	for s := range ss.all {
		s.goAway()
	}
}

// CloseStreams ends the binary streams of the Go clients (GET /v1/stream):
// each is told to go away, so that its client sends what the node has not
// read to another node, the operations it has read are answered, and it
// closes; no new stream is taken. It returns when all are closed, or when
// ctx ends (then the operations still running are withdrawn, as when their
// client goes away). Server.Shutdown (of a server made by NewServer) begins
// the same but does not wait for it, since net/http does not count
// connections taken over: call CloseStreams after Shutdown, and before
// closing the store. After Server.Close, call it with a context already
// ended.
func (h *Handler) CloseStreams(ctx context.Context) error {
	h.streams.goAway()
	done := make(chan struct{})
	go func() {
		h.streams.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	// Out of time: withdraw what still runs (it is answered, canceled), and
	// give the answers a moment to go out before cutting the connections.
	h.streams.each(func(s *serverStream) { s.cancel() })
	select {
	case <-done:
		return ctx.Err()
	case <-time.After(streamCancelGrace):
	}
	h.streams.each(func(s *serverStream) { s.conn.Close() })
	<-done
	return ctx.Err()
}
