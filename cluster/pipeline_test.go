package cluster

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	raft "github.com/raftlock/raftlock/internal/raft"
)

// pipelinePair is a leader-side raftTransport and a follower transport
// whose answers the test chooses: refuse(i) reports whether the follower
// refuses the i-th append (counting from 0), as a follower whose log write
// failed does.
func pipelinePair(t *testing.T, refuse func(i int) bool) (*raftTransport, *raft.NetworkTransport) {
	t.Helper()
	newTransport := func() *raft.NetworkTransport {
		tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 10*time.Second, io.Discard)
		require.NoError(t, err)
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	leader, follower := newTransport(), newTransport()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case rpc := <-follower.Consumer():
				req := rpc.Command.(*raft.AppendEntriesRequest)
				if refuse(i) {
					rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term}, errors.New("log write failed: no space left on device"))
				} else {
					rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, Success: true, LastLog: req.PrevLogEntry + uint64(len(req.Entries))}, nil)
				}
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return &raftTransport{NetworkTransport: leader}, follower
}

func appendRequest(index uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{
		RPCHeader:    raft.RPCHeader{ID: []byte("leader"), Addr: []byte("leader")},
		Term:         1,
		PrevLogEntry: index - 1,
		PrevLogTerm:  1,
		Entries:      []*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: []byte("x")}},
	}
}

// appendAsync calls AppendEntries on another goroutine; the channel gets its
// error when it returns.
func appendAsync(p raft.AppendPipeline, index uint64) <-chan error {
	out := make(chan error, 1)
	go func() {
		_, err := p.AppendEntries(appendRequest(index), new(raft.AppendEntriesResponse))
		out <- err
	}()
	return out
}

func TestPipelinePassesAnswersInOrder(t *testing.T) {
	leader, follower := pipelinePair(t, func(int) bool { return false })
	p, err := leader.AppendEntriesPipeline("follower", follower.LocalAddr())
	require.NoError(t, err)
	defer p.Close()

	for index := uint64(1); index <= 2*pipelineInFlight+2; index++ {
		sent := appendAsync(p, index)
		select {
		case err := <-sent:
			require.NoError(t, err)
		case answer := <-p.Consumer():
			// The window is full: an answer must be read before the send completes.
			require.NoError(t, answer.Error())
			require.NoError(t, <-sent)
			assert.True(t, answer.Response().Success)
		}
	}
	// Answers come in the order of the requests, each with its own request.
	var last uint64
	for {
		select {
		case answer := <-p.Consumer():
			require.NoError(t, answer.Error())
			assert.True(t, answer.Response().Success)
			index := answer.Request().Entries[0].Index
			assert.Greater(t, index, last)
			last = index
			if last == 2*pipelineInFlight+2 {
				return
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the answer to append %d never came (last came: %d)", 2*pipelineInFlight+2, last)
		}
	}
}

// TestPipelineSendsDoNotHangAfterARefusal is raft v1.7.3's pipeline hang:
// raft reads answers until the first refusal and then no more, while its
// sender goes on sending. With raft's own pipeline the third send below
// waits forever for a reader (and so did the leader's Shutdown).
func TestPipelineSendsDoNotHangAfterARefusal(t *testing.T) {
	leader, follower := pipelinePair(t, func(i int) bool { return i == 0 })
	p, err := leader.AppendEntriesPipeline("follower", follower.LocalAddr())
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			p.Close()
		}
	}()

	// Two requests in flight, and a third send that has to wait until an
	// answer is read: raft's decoder reads exactly one answer, the refusal.
	require.NoError(t, <-appendAsync(p, 1))
	require.NoError(t, <-appendAsync(p, 2))
	third := appendAsync(p, 3)

	var answer raft.AppendFuture
	select {
	case answer = <-p.Consumer():
	case <-time.After(30 * time.Second):
		t.Fatal("no answer to the first append")
	}
	assert.Error(t, answer.Error(), "the follower refused the first append")
	assert.False(t, answer.Response().Success)
	assert.Equal(t, uint64(1), answer.Request().Entries[0].Index)

	// Nobody reads answers any more, as in raft after a refusal.
	select {
	case <-third:
		// Sent before or after the refusal: either way it returned.
	case <-time.After(30 * time.Second):
		t.Fatal("a send after the follower's refusal never returned: the pipeline hangs")
	}
	_, err = p.AppendEntries(appendRequest(4), new(raft.AppendEntriesResponse))
	assert.ErrorIs(t, err, errPipelineRefused, "no request is sent on a pipeline whose answers nobody reads")

	closeDone := make(chan error, 1)
	go func() { closeDone <- p.Close() }()
	select {
	case err := <-closeDone:
		closed = true
		assert.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Close of a pipeline after a refusal never returned")
	}
	relayDone := p.(*refusalSafePipeline).relayDone
	select {
	case <-relayDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay goroutine outlived Close")
	}
}

// raft logs, at error level, the send that errPipelineRefused ends: that is
// the pipeline's normal way out after a refusal, not a member down.
func TestPipelineRefusalIsNotLoggedAsAnError(t *testing.T) {
	var buf bytes.Buffer
	q := newQuieter()
	t.Cleanup(q.Close)
	log := q.Wrap(hclog.New(&hclog.LoggerOptions{Name: "raftlock", Level: hclog.Info, Output: &buf})).Named("raft")

	log.Error("failed to pipeline appendEntries", "peer", "{Voter b 10.0.0.2:7071}", "error", errPipelineRefused)
	assert.Empty(t, buf.String(), "shown at info level")

	log.Error("failed to pipeline appendEntries", "peer", "{Voter b 10.0.0.2:7071}", "error", errors.New("connection reset by peer"))
	assert.Contains(t, buf.String(), "[ERROR]", "other send failures stay errors")
	assert.Contains(t, buf.String(), hintPeerDown)
}
