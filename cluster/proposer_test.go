package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
)

// The proposer holds back a queue of acquires that can only be queued, for
// at most maxDefer, so that the holder's release shares their entry; any
// other command sends everything at once.
func TestProposerHoldsBackCertainWaiters(t *testing.T) {
	sm := newStateMachine(hclog.NewNullLogger(), nil)
	holder, waiter, other := fsm.Owner{1}, fsm.Owner{2}, fsm.Owner{3}
	data, err := fsm.AppendBatch(nil, []fsm.Command{{Op: fsm.OpAcquire, Stamp: 1, Key: "k", Owner: holder, TTL: time.Hour}})
	require.NoError(t, err)
	sm.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: data}})
	term := newLeaderTerm(&Node{sm: sm})
	queue := func(cmd fsm.Command, age time.Duration) {
		term.queue = append(term.queue, &proposal{cmd: cmd, queued: time.Now().Add(-age)})
	}
	waitFor := func(key string, owner fsm.Owner) fsm.Command {
		return fsm.Command{Op: fsm.OpAcquire, Key: key, Owner: owner, TTL: time.Minute, Wait: time.Minute}
	}

	queue(waitFor("k", waiter), 0)
	batch, hold := term.take()
	assert.Empty(t, batch, "an acquire that can only wait is held back")
	assert.Positive(t, hold)
	assert.LessOrEqual(t, hold, maxDefer)

	queue(fsm.Command{Op: fsm.OpRelease, Key: "k", Owner: holder}, 0)
	batch, hold = term.take()
	assert.Len(t, batch, 2, "the release takes the waiter along, in order")
	assert.Zero(t, hold)

	queue(waitFor("k", other), maxDefer)
	batch, _ = term.take()
	assert.Len(t, batch, 1, "held back no longer than maxDefer")

	queue(waitFor("free", waiter), 0)
	batch, _ = term.take()
	assert.Len(t, batch, 1, "an acquire of a free key goes at once")

	queue(waitFor("k", holder), 0)
	batch, _ = term.take()
	assert.Len(t, batch, 1, "the holder's own acquire goes at once")

	try := waitFor("k", waiter)
	try.Wait = 0
	queue(try, 0)
	batch, _ = term.take()
	assert.Len(t, batch, 1, "a try-acquire goes at once: its caller waits for the answer")
}
