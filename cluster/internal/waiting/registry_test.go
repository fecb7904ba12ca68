package waiting

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// The leader's cleanup of a parked call whose caller left (withdrawAtLeader)
// does not end a grant an immediate acquire of the same owner was answered
// meanwhile, and waits for such an acquire still being answered before it
// decides: that acquire, queued before the cancel-wait would be, may
// answer the grant the cancel-wait would then end.
func TestWithdrawalWaitsForAndKeepsAnsweredAcquire(t *testing.T) {
	r := newRegistry()
	owner := fsm.Owner(lock.NewOwner())
	w, err := r.park("k", owner, func() error { return nil })
	require.NoError(t, err)
	answered := r.queueAcquires([]fsm.Command{{Op: fsm.OpAcquire, Key: "k", Owner: owner}}, func() {})

	withdrew := make(chan bool, 1)
	queued := false
	go func() { withdrew <- r.withdraw("k", owner, w, func() { queued = true }) }()
	select {
	case <-withdrew:
		t.Fatal("the withdrawal decided while an acquire of the owner was being answered")
	case <-time.After(50 * time.Millisecond): // not a condition: nothing may happen
	}
	answered(0, fsm.Result{Status: fsm.StatusGranted, Token: 7}, nil) // the acquire was answered with the grant of token 7
	assert.False(t, <-withdrew, "the withdrawal queued a cancel-wait")
	assert.False(t, queued)
	busy, acked := r.unlessParked("k", owner, func() { t.Error("a caller's cancel-wait was queued") })
	assert.Nil(t, busy)
	assert.Equal(t, uint64(7), acked)

	// Once the owner releases (or parks again), a withdrawal is queued.
	r.forget("k", owner)
	busy, acked = r.unlessParked("k", owner, func() { queued = true })
	assert.Nil(t, busy)
	assert.Zero(t, acked)
	assert.True(t, queued)
}
