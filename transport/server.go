package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"time"
)

// Robustness.
//
// A write that makes no progress for 10 seconds drops its connection, so a
// peer that stops reading cannot wedge the calls queued behind it.
//
// Peers are trusted cluster members (authenticate them with mutual TLS): a
// connection may run any number of handlers at once, and pools are kept
// for every address ever called. A frame's body is allocated as its bytes
// arrive, not as announced, so a bogus length costs no memory.

// serverConn is the accepting end of an RPC connection: one reader starts
// a handler goroutine per request and cancels it on a cancel frame; the
// handlers' answers go out through the shared writer.
type serverConn struct {
	framedConn
	t        *Transport
	ctx      context.Context // parent of the handlers' contexts; ends with the connection
	cancel   context.CancelFunc
	handlers map[uint64]context.CancelFunc // running requests by ID; protected by mu
}

// serveRPC runs an accepted RPC connection until it ends, on the accepting
// goroutine.
func (t *Transport) serveRPC(nc net.Conn) {
	ctx, cancel := context.WithCancel(t.ctx)
	s := &serverConn{
		framedConn: newFramedConn(nc, nc.RemoteAddr().String()),
		t:          t,
		ctx:        ctx,
		cancel:     cancel,
		handlers:   make(map[uint64]context.CancelFunc),
	}
	if !t.trackRPC(s) {
		cancel()
		nc.Close()
		return
	}
	t.wg.Go(func() { s.shutdown(s.writeLoop()) })
	s.shutdown(s.readLoop())
}

// readLoop reads frames until the connection ends. The first must come
// within the header deadline serveConn set; after that, the read deadline is
// IdleTimeout from the moment no request is running (armIdleLocked), and
// none while one is: a waiting acquire may run for minutes.
func (s *serverConn) readLoop() error {
	var hdr [frameHeaderSize]byte
	for first := true; ; first = false {
		f, err := readFrame(s.br, &hdr)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if first {
					return fmt.Errorf("%w: no frame within the header timeout (%v): %w", errSilent, s.t.cfg.HeaderTimeout, err)
				}
				return fmt.Errorf("%w: no request for %v: %w", errSilent, s.t.cfg.IdleTimeout, err)
			}
			return err
		}
		switch f.typ {
		case frameRequest:
			s.mu.Lock()
			if s.err != nil {
				s.mu.Unlock()
				return nil
			}
			if _, dup := s.handlers[f.id]; dup {
				s.mu.Unlock()
				return fmt.Errorf("%w: request ID %d already in flight", errProtocol, f.id)
			}
			ctx, cancel := context.WithCancel(s.ctx)
			s.handlers[f.id] = cancel
			s.armIdleLocked()
			s.mu.Unlock()
			s.t.wg.Go(func() { s.serve(ctx, f.id, f.body) })
		case frameCancel:
			// Also the dialler's hello (ID 0, never a request's), which
			// makes the first frame come at once.
			s.mu.Lock()
			cancel := s.handlers[f.id]
			s.armIdleLocked()
			s.mu.Unlock()
			if cancel != nil { // nil: the answer already went out
				cancel()
			}
		default:
			return fmt.Errorf("%w: frame type %d from a client", errProtocol, f.typ)
		}
	}
}

// serve runs the handler for one request and queues its answer, unless the
// caller gave up or the connection ended meanwhile (nobody would read it).
func (s *serverConn) serve(ctx context.Context, id uint64, req []byte) {
	if req == nil {
		req = []byte{}
	}
	resp, err := s.t.runHandler(ctx, req)
	f := frame{typ: frameResponse, id: id, body: resp}
	switch {
	case err != nil:
		f = errorFrame(id, errCodeHandler, err.Error())
	case len(resp) > MaxFrameSize:
		f = errorFrame(id, errCodeTooLarge, fmt.Sprintf("response of %d bytes (limit %d)", len(resp), MaxFrameSize))
	}
	s.mu.Lock()
	cancel := s.handlers[id]
	delete(s.handlers, id)
	s.armIdleLocked()
	send := s.err == nil && ctx.Err() == nil
	if send {
		s.enqueueLocked(f)
	}
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if send {
		s.wake()
	}
}

// armIdleLocked sets the read deadline for the requests running now: none
// while any runs, IdleTimeout from now when none does. Called with mu held
// whenever that count may have changed, so the calls are ordered.
func (s *serverConn) armIdleLocked() {
	if s.err != nil {
		return
	}
	if len(s.handlers) > 0 {
		_ = s.nc.SetReadDeadline(time.Time{})
	} else {
		_ = s.nc.SetReadDeadline(time.Now().Add(s.t.cfg.IdleTimeout))
	}
}

func errorFrame(id uint64, code byte, msg string) frame {
	if len(msg) > MaxFrameSize-1 {
		msg = msg[:MaxFrameSize-1]
	}
	body := make([]byte, 1+len(msg))
	body[0] = code
	copy(body[1:], msg)
	return frame{typ: frameError, id: id, body: body}
}

// runHandler calls the current handler, turning a missing handler and a
// panic into errors so that one bad request cannot take the node down.
func (t *Transport) runHandler(ctx context.Context, req []byte) (resp []byte, err error) {
	h := t.handler.Load()
	if h == nil {
		return nil, fmt.Errorf("transport: no handler registered")
	}
	defer func() {
		if r := recover(); r != nil {
			t.logger.Error("rpc handler panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("transport: handler panicked: %v", r)
		}
	}()
	return (*h)(ctx, req)
}

// shutdown ends the connection once and cancels every running handler.
func (s *serverConn) shutdown(cause error) {
	if cause == nil {
		return
	}
	if s.t.isClosed() && !errors.Is(cause, ErrClosed) {
		cause = fmt.Errorf("%w (%v)", ErrClosed, cause)
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = cause
	s.queue = nil
	s.mu.Unlock()
	s.cancel() // ends every handler's ctx
	s.nc.Close()
	close(s.done)
	s.t.untrackRPC(s)
	s.t.logConnEnd("server", s.peer, cause)
}
