package waiting

import (
	"strconv"
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
	r := newRegistry(time.Minute, func() time.Duration { return 0 })
	owner := fsm.Owner(lock.NewOwner())
	w, err := r.park("k", owner, func() error { return nil })
	require.NoError(t, err)
	answered := r.queueAcquires([]fsm.Command{{Op: fsm.OpAcquire, Key: "k", Owner: owner}}, func() {})

	withdrew := make(chan bool, 1)
	queued := false
	go func() { withdrew <- r.withdraw("k", owner, w, noKeyState, func() { queued = true }) }()
	select {
	case <-withdrew:
		t.Fatal("the withdrawal decided while an acquire of the owner was being answered")
	case <-time.After(50 * time.Millisecond): // not a condition: nothing may happen
	}
	answered(0, fsm.Result{Status: fsm.StatusGranted, Token: 7}, nil) // the acquire was answered with the grant of token 7
	assert.False(t, <-withdrew, "the withdrawal queued a cancel-wait")
	assert.False(t, queued)
	busy, acked := r.unlessParked("k", owner, noKeyState, func() { t.Error("a caller's cancel-wait was queued") })
	assert.Nil(t, busy)
	assert.Equal(t, uint64(7), acked)

	// Once the owner releases (or parks again), a withdrawal is queued.
	r.forget("k", owner)
	busy, acked = r.unlessParked("k", owner, noKeyState, func() { queued = true })
	assert.Nil(t, busy)
	assert.Zero(t, acked)
	assert.True(t, queued)
}

// noKeyState reads a key nobody holds.
func noKeyState() fsm.KeyState { return fsm.KeyState{} }

// fakeClock is a monotonic clock a test moves by hand.
type fakeClock struct{ now time.Duration }

func (c *fakeClock) read() time.Duration { return c.now }

// An answer within its memory outlives more answers than the registry
// once kept before it forgot them all at once (65,536): a withdrawal of
// an owner answered a grant a moment ago is still not proposed.
func TestWithdrawalKeepsRecentAnswerAfterManyAnswers(t *testing.T) {
	clock := &fakeClock{}
	r := newRegistry(time.Minute, clock.read)
	owner := fsm.Owner(lock.NewOwner())
	r.ack("early", owner, 1)
	for i := range 1<<16 + 10 { // the old bound, 1<<16, and some
		clock.now += time.Microsecond
		r.ack("k/"+strconv.Itoa(i), fsm.Owner(lock.NewOwner()), uint64(i+2))
	}
	busy, acked := r.unlessParked("early", owner, noKeyState, func() { t.Error("a cancel-wait ended a grant answered a moment ago") })
	assert.Nil(t, busy)
	assert.Equal(t, uint64(1), acked)
}

// An answer is forgotten once its memory has passed, and then takes no
// room: a withdrawal is proposed as if nothing was answered.
func TestAnswerIsForgottenAfterItsMemory(t *testing.T) {
	clock := &fakeClock{}
	r := newRegistry(time.Minute, clock.read)
	owner := fsm.Owner(lock.NewOwner())
	r.ack("old", owner, 1)
	for i := range 2000 {
		r.ack("k/"+strconv.Itoa(i), fsm.Owner(lock.NewOwner()), uint64(i+2))
	}
	clock.now += time.Minute - 1
	busy, acked := r.unlessParked("old", owner, noKeyState, func() { t.Error("a cancel-wait ended a grant answered within its memory") })
	assert.Nil(t, busy)
	assert.Equal(t, uint64(1), acked)

	clock.now++
	r.ack("new", owner, 5000)
	r.mu.Lock()
	assert.Equal(t, 1, len(r.acked.m)+len(r.older.m), "answers older than the memory are kept")
	r.mu.Unlock()
	queued := false
	busy, acked = r.unlessParked("old", owner, noKeyState, func() { queued = true })
	assert.Nil(t, busy)
	assert.Zero(t, acked)
	assert.True(t, queued, "a withdrawal after the answer's memory was not proposed")
}

// Past its capacity the registry forgets the oldest answers, and a
// withdrawal that may concern one of them, still within its memory, is
// not proposed when the owner holds the key with a token no newer than
// the forgotten answers': the caller learns the outcome is unknown, the
// lease is not ended. A hold granted after them is ended as before.
func TestWithdrawalAfterAnswersForgottenForRoomIsUnknown(t *testing.T) {
	clock := &fakeClock{}
	r := newRegistry(time.Minute, clock.read)
	r.capacity = 64
	owner := fsm.Owner(lock.NewOwner())
	other := fsm.Owner(lock.NewOwner())
	r.ack("early", owner, 1)
	for i := range 64 {
		r.ack("k/"+strconv.Itoa(i), other, uint64(i+2))
	}
	r.mu.Lock()
	token, _ := r.answeredLocked(waiterKey{"early", owner})
	assert.Zero(t, token, "the oldest answer was not forgotten")
	assert.LessOrEqual(t, len(r.acked.m)+len(r.older.m), r.capacity)
	token, _ = r.answeredLocked(waiterKey{"k/63", other})
	assert.Equal(t, uint64(65), token, "the newest answer was forgotten")
	r.mu.Unlock()

	holds := func(token uint64) func() fsm.KeyState {
		return func() fsm.KeyState { return fsm.KeyState{Held: true, Owner: owner, Token: token} }
	}
	busy, acked := r.unlessParked("early", owner, holds(1), func() { t.Error("a cancel-wait may end a grant a caller was told it holds") })
	assert.Nil(t, busy)
	assert.Equal(t, uint64(1), acked)
	w, err := r.park("early", owner, func() error { return nil })
	require.NoError(t, err)
	assert.False(t, r.withdraw("early", owner, w, holds(1), func() { t.Error("a withdrawal may end a grant a caller was told it holds") }))

	// A semaphore's holders are not named: any slot as old may be the owner's.
	sem := func() fsm.KeyState {
		return fsm.KeyState{Kind: fsm.KindSemaphore, Held: true, Holds: []fsm.Hold{{Token: 1}, {Token: 500}}}
	}
	busy, acked = r.unlessParked("early", owner, sem, func() { t.Error("a cancel-wait may end a semaphore slot a caller was told it holds") })
	assert.Nil(t, busy)
	assert.Equal(t, uint64(1), acked)

	// Newer than every forgotten answer: not one of them.
	queued := false
	_, acked = r.unlessParked("early", owner, holds(500), func() { queued = true })
	assert.Zero(t, acked)
	assert.True(t, queued)

	// Once the forgotten answer's memory has passed, nothing holds it back.
	clock.now += time.Minute
	queued = false
	_, acked = r.unlessParked("early", owner, holds(1), func() { queued = true })
	assert.Zero(t, acked)
	assert.True(t, queued)
}
