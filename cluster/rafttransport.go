package cluster

import (
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	raft "github.com/raftlock/raftlock/internal/raft"
)

// raftTransport is raft's NetworkTransport as a node uses it, with two
// changes; embedding keeps every other method, so raft's type assertions
// on its transport (WithClose, WithPreVote in v1.7.3) still see what the
// NetworkTransport offers:
//   - its pipelines cannot hang (AppendEntriesPipeline; see
//     refusalSafePipeline);
//   - its Close lets the RPCs that other members sent end before the
//     NetworkTransport closes, so that a normal stop logs no error (see
//     Close);
//   - the leader's snapshots and appends pass a check (the log store's
//     CatchUp) before raft sees them, which answers those that would make
//     raft go back on the state it applied (see datadir.Store.CatchUp).
type raftTransport struct {
	*raft.NetworkTransport
	// inbound is the stream layer the NetworkTransport accepts from; nil
	// in tests that build a raftTransport over a plain NetworkTransport.
	inbound *inboundStream

	// catchUp sees every RPC before raft does; nil: none does, and raft
	// reads the NetworkTransport's Consumer itself.
	catchUp     func(in <-chan raft.RPC, out chan<- raft.RPC, stop <-chan struct{})
	consumer    chan raft.RPC // what raft reads when catchUp is set
	catchUpStop chan struct{}
	catchUpDone chan struct{}
	stopOnce    sync.Once
}

// newRaftTransport returns net as raft uses it, with catchUp (nil: none)
// between the NetworkTransport's consumer channel and raft: it hands raft
// what it lets through until its stop channel closes (see
// datadir.Store.ServeCatchUp).
func newRaftTransport(net *raft.NetworkTransport, inbound *inboundStream, catchUp func(in <-chan raft.RPC, out chan<- raft.RPC, stop <-chan struct{})) *raftTransport {
	t := &raftTransport{NetworkTransport: net, inbound: inbound, catchUp: catchUp}
	if catchUp != nil {
		t.consumer = make(chan raft.RPC)
		t.catchUpStop, t.catchUpDone = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(t.catchUpDone)
			catchUp(net.Consumer(), t.consumer, t.catchUpStop)
		}()
	}
	return t
}

// Consumer returns the RPCs for raft.
func (t *raftTransport) Consumer() <-chan raft.RPC {
	if t.catchUp == nil {
		return t.NetworkTransport.Consumer()
	}
	return t.consumer
}

// stopCatchUp ends catchUp and waits for it; RPCs then wait in the
// NetworkTransport's Consumer (answerLeftovers answers them at Close).
func (t *raftTransport) stopCatchUp() {
	if t.catchUp == nil {
		return
	}
	t.stopOnce.Do(func() { close(t.catchUpStop) })
	<-t.catchUpDone
}

// inboundWait bounds how long Close waits for raft's handlers of inbound
// connections to end (each ends as soon as it sees its connection closed).
const inboundWait = 5 * time.Second

// Close stops the transport. raft calls it from Shutdown once its own
// goroutines have ended, so nothing of raft reads what peers send any more.
//
// raft's NetworkTransport.Close alone logs an error for every RPC it is
// serving at that moment: a handler waiting to hand an RPC to raft, or for
// raft's answer (a heartbeat that raft ignored because it had shut down),
// ends with ErrTransportShutdown, which raft logs at ERROR ("failed to
// decode incoming command"), whereas it takes only io.EOF for a normal end.
// A member that stops while the leader replicates to it would log that
// now and then. So Close first ends every inbound RPC: it closes the
// inbound connections and refuses new ones, answers with ErrRaftShutdown
// what raft no longer takes or answers (answerLeftovers, and
// SetHeartbeatHandler's wrapper), and waits until raft's handlers of those
// connections have ended; only then does it close the NetworkTransport,
// with nothing left to fail. (A handler whose connection was closed under
// it logs a closed connection, which adjustRaftLine turns to debug.)
func (t *raftTransport) Close() error {
	if t.inbound == nil {
		return t.NetworkTransport.Close()
	}
	served := t.inbound.stopServing()
	// With the inbound connections closed, a snapshot catchUp is reading
	// ends, and catchUp with it.
	t.stopCatchUp()
	stop := make(chan struct{})
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		t.answerLeftovers(stop)
	}()
	deadline := time.NewTimer(inboundWait)
	defer deadline.Stop()
	for _, c := range served {
		select {
		case <-c.done:
		case <-deadline.C:
		}
	}
	close(stop)
	<-answered
	return t.NetworkTransport.Close()
}

// answerLeftovers answers every RPC handed to raft's consumer channel,
// which raft no longer reads, with ErrRaftShutdown, until stop is closed.
func (t *raftTransport) answerLeftovers(stop <-chan struct{}) {
	for {
		select {
		case rpc := <-t.NetworkTransport.Consumer():
			rpc.Respond(nil, raft.ErrRaftShutdown)
		case <-stop:
			return
		}
	}
}

// SetHeartbeatHandler installs raft's heartbeat handler, wrapped so that a
// heartbeat always gets an answer: raft's handler ignores one that arrives
// after raft shut down, and the NetworkTransport would wait for that answer
// until it closes (see Close). raft's handler answers before it returns,
// or not at all.
func (t *raftTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		answer := make(chan raft.RPCResponse, 1)
		own := rpc
		own.RespChan = answer
		cb(own)
		select {
		case resp := <-answer:
			rpc.RespChan <- resp
		default:
			rpc.Respond(nil, raft.ErrRaftShutdown)
		}
	})
}

// inboundStream is the stream layer raft's NetworkTransport accepts from,
// which keeps the inbound connections raft serves, so that
// raftTransport.Close can close them and wait for raft's handlers of them
// to end (raft closes a connection when its handler returns).
type inboundStream struct {
	raft.StreamLayer

	mu      sync.Mutex // protects the fields below
	serving map[*servedConn]struct{}
	stopped bool // stopServing was called: new connections are closed at once
}

func newInboundStream(s raft.StreamLayer) *inboundStream {
	return &inboundStream{StreamLayer: s, serving: map[*servedConn]struct{}{}}
}

// Accept returns the next inbound connection. Once serving stopped, it
// closes new connections and waits for the next (it must not fail before
// the NetworkTransport closes, which would log the failure as an error).
func (s *inboundStream) Accept() (net.Conn, error) {
	for {
		c, err := s.StreamLayer.Accept()
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			c.Close()
			continue
		}
		sc := &servedConn{Conn: c, s: s, done: make(chan struct{})}
		s.serving[sc] = struct{}{}
		s.mu.Unlock()
		return sc, nil
	}
}

// stopServing closes every inbound connection, refuses new ones, and
// returns those it closed: each one's done is closed when raft's handler
// of it has ended.
func (s *inboundStream) stopServing() []*servedConn {
	s.mu.Lock()
	s.stopped = true
	conns := slices.Collect(maps.Keys(s.serving))
	s.mu.Unlock()
	for _, c := range conns {
		c.Conn.Close() // not c.Close: that is raft's, when its handler ends
	}
	return conns
}

// servedConn is an inbound connection raft serves; raft closes it when its
// handler returns.
type servedConn struct {
	net.Conn
	s    *inboundStream
	once sync.Once
	done chan struct{} // closed by Close
}

func (c *servedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.serving, c)
		c.s.mu.Unlock()
		close(c.done)
	})
	return err
}
