package cluster

import (
	"errors"
	"sync"

	raft "github.com/raftlock/raftlock/internal/raft"
)

// pipelineInFlight is how many append requests raft's pipelined replication
// keeps on the wire to one follower (raft's default). One more answer may
// wait in a pipeline's relay (see refusalSafePipeline).
const pipelineInFlight = raft.DefaultMaxRPCsInFlight

// errPipelineRefused is what a pipeline's AppendEntries returns once the
// follower has refused an append on it: raft then leaves pipelined
// replication for that follower and retries one request at a time, with a
// backoff, until the follower accepts again.
var errPipelineRefused = errors.New("cluster: the follower refused an append on this pipeline; replicating to it one request at a time")

// AppendEntriesPipeline opens raft's pipeline to the follower and wraps it
// in a refusalSafePipeline.
func (t *raftTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	inner, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newRefusalSafePipeline(inner), nil
}

// refusalSafePipeline wraps raft's netPipeline so that raft's pipelined
// replication (v1.7.3) cannot block forever after a follower refuses an
// append (its log write failed: a full disk).
//
// Why raft hangs without it: raft runs two goroutines per follower on a
// pipeline. pipelineDecode reads the answers from Consumer() and returns at
// the first one with Success false or a newer term (an answer that failed
// to arrive reads as Success false). pipelineSend calls AppendEntries, which
// writes the request and then hands it to the netPipeline's own decoder on
// an unbuffered channel (buffer MaxRPCsInFlight-2). That decoder reads the
// follower's next answer and hands it to Consumer(), also unbuffered. Once
// pipelineDecode has returned, nobody reads Consumer(): the netPipeline's
// decoder waits there forever, so the next AppendEntries waits forever for
// it, and raft's send loop, stuck inside AppendEntries, never notices that
// the decoder has finished, so never closes the pipeline (Close is what
// would free both). Heartbeats go on on another connection, so no election
// heals it: the follower never gets another entry and the leader's
// Shutdown waits for the send loop forever.
//
// The fix: a relay goroutine is the only reader of the netPipeline's
// answers. It hands each answer to raft on Consumer(). An answer after
// which pipelineDecode returns (Success false, a newer term, or an error:
// the wrapper stops on a superset of raft's conditions, which is what makes
// it safe) is handed over like any other, and from then on:
//   - the relay reads and drops every later answer, so the netPipeline's
//     decoder never waits on its hand-off, so a send already inside
//     AppendEntries finishes (at worst after the transport's timeout, when
//     an answer does not come);
//   - AppendEntries returns errPipelineRefused without sending, so raft's
//     send loop stops at its next send, closes the pipeline, and replicates
//     to the follower one request at a time again, with its backoff.
//
// Before a refusal the relay waits for raft to read each answer (or for
// Close), so it adds no reader raft does not have: answers are not lost
// and their order is kept. While raft is still reading it adds one answer
// of buffering, so up to pipelineInFlight+1 requests may be unanswered.
type refusalSafePipeline struct {
	inner   raft.AppendPipeline
	answers chan raft.AppendFuture
	// refused is closed after the relay handed raft an answer that ends
	// raft's reading.
	refused   chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	relayDone chan struct{}
}

func newRefusalSafePipeline(inner raft.AppendPipeline) *refusalSafePipeline {
	p := &refusalSafePipeline{
		inner:     inner,
		answers:   make(chan raft.AppendFuture),
		refused:   make(chan struct{}),
		closed:    make(chan struct{}),
		relayDone: make(chan struct{}),
	}
	go p.relay()
	return p
}

// endsRaftReading reports whether raft's pipelineDecode stops reading
// answers after this one. It must be true at least whenever raft stops
// (Success false or a newer term); it is also true for a transport error.
func endsRaftReading(f raft.AppendFuture) bool {
	if f.Error() != nil {
		return true
	}
	resp, req := f.Response(), f.Request()
	return resp == nil || req == nil || !resp.Success || resp.Term > req.Term
}

func (p *refusalSafePipeline) relay() {
	defer close(p.relayDone)
	in := p.inner.Consumer()
	for {
		var answer raft.AppendFuture
		select {
		case answer = <-in:
		case <-p.closed:
			return
		}
		last := endsRaftReading(answer)
		select {
		case p.answers <- answer:
		case <-p.closed:
			return
		}
		if last {
			close(p.refused)
			p.drain(in)
			return
		}
	}
}

// drain reads and drops answers until the pipeline is closed.
func (p *refusalSafePipeline) drain(in <-chan raft.AppendFuture) {
	for {
		select {
		case <-in:
		case <-p.closed:
			return
		}
	}
}

// AppendEntries sends the request on the pipeline, or returns
// errPipelineRefused without sending once the follower has refused one.
func (p *refusalSafePipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	select {
	case <-p.refused:
		return nil, errPipelineRefused
	default:
	}
	return p.inner.AppendEntries(args, resp)
}

// Consumer returns the answers, in the order the requests were sent.
func (p *refusalSafePipeline) Consumer() <-chan raft.AppendFuture {
	return p.answers
}

// Close closes raft's pipeline and stops the relay. It may be called more
// than once.
func (p *refusalSafePipeline) Close() error {
	var err error
	p.closeOnce.Do(func() {
		close(p.closed)
		err = p.inner.Close()
	})
	return err
}
