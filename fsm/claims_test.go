package fsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// After a new term, a waiter is granted only once its owner has claimed its
// place again; a hand-off skips (and drops) the unclaimed ones ahead.
func TestHandOffSkipsUnclaimedWaiters(t *testing.T) {
	m := newRecorder()
	m.apply(acquire(1*ms, "k", ownerA, time.Second, 0))
	m.apply(acquire(2*ms, "k", ownerB, time.Second, time.Minute))
	m.apply(acquire(3*ms, "k", ownerC, time.Second, time.Minute))
	require.Equal(t, 0, m.Unclaimed())

	res, _ := m.apply(newTerm(4 * ms))
	assert.Equal(t, Result{Status: StatusTicked, Now: 4 * ms, Waiters: 2}, res)
	assert.Equal(t, uint64(1), m.Epoch())
	assert.Equal(t, 2, m.Unclaimed())

	// C claims its place again: it keeps position 2 and its deadline.
	res, _ = m.apply(acquire(5*ms, "k", ownerC, 7*time.Second, 10*time.Minute))
	assert.Equal(t, StatusQueued, res.Status)
	assert.Equal(t, 2, res.Waiters)
	assert.Equal(t, 1, m.Unclaimed())
	require.NoError(t, checkInternals(m.Machine))

	res, events := m.apply(release(6*ms, "k", ownerA))
	assert.Equal(t, StatusReleased, res.Status)
	assert.Equal(t, []Event{
		{Kind: EventUnclaimed, Key: "k", Owner: ownerB, At: 6 * ms},
		{Kind: EventGranted, Key: "k", Owner: ownerC, Token: 2, ExpiresAt: 6*ms + time.Second, At: 6 * ms},
	}, events)
	assert.Equal(t, 0, m.Unclaimed())
	require.NoError(t, checkInternals(m.Machine))
	// C's deadline stayed the first one: its queued TTL was kept too.
	st := m.Lookup("k", 0)
	assert.Equal(t, ownerC, st.Owner)
}

// With only unclaimed waiters, the key is freed rather than handed to nobody.
func TestHandOffWithOnlyUnclaimedWaitersFreesTheKey(t *testing.T) {
	m := newRecorder()
	m.apply(acquire(1*ms, "k", ownerA, time.Second, 0))
	m.apply(acquire(2*ms, "k", ownerB, time.Second, time.Minute))
	m.apply(newTerm(3 * ms))
	_, events := m.apply(tick(1*ms + time.Second))
	assert.Equal(t, []Event{
		{Kind: EventExpired, Key: "k", Owner: ownerA, Token: 1, ExpiresAt: 1*ms + time.Second, At: 1*ms + time.Second},
		{Kind: EventUnclaimed, Key: "k", Owner: ownerB, At: 1*ms + time.Second},
	}, events)
	assert.Equal(t, 0, m.Len())
	assert.Equal(t, 0, m.Waiters())
	res, _ := m.apply(acquire(2*time.Second, "k", ownerD, time.Second, 0))
	assert.Equal(t, StatusGranted, res.Status)
	require.NoError(t, checkInternals(m.Machine))
}

// Drop-unclaimed removes every waiter not claimed since the new term, in
// key order, and keeps the claimed ones in their places.
func TestDropUnclaimed(t *testing.T) {
	m := newRecorder()
	for _, k := range []string{"b", "a"} {
		m.apply(acquire(1*ms, k, ownerA, time.Minute, 0))
		m.apply(acquire(1*ms, k, ownerB, time.Minute, time.Minute))
		m.apply(acquire(1*ms, k, ownerC, time.Minute, time.Minute))
	}
	m.apply(newTerm(2 * ms))
	m.apply(acquire(3*ms, "b", ownerC, time.Minute, time.Minute)) // claimed
	res, events := m.apply(dropUnclaimed(4 * ms))
	assert.Equal(t, Result{Status: StatusTicked, Now: 4 * ms, Waiters: 3}, res)
	assert.Equal(t, []Event{
		{Kind: EventUnclaimed, Key: "a", Owner: ownerB, At: 4 * ms},
		{Kind: EventUnclaimed, Key: "a", Owner: ownerC, At: 4 * ms},
		{Kind: EventUnclaimed, Key: "b", Owner: ownerB, At: 4 * ms},
	}, events)
	assert.Equal(t, 1, m.Waiters())
	assert.Equal(t, 0, m.Unclaimed())
	require.NoError(t, checkInternals(m.Machine))

	// Nothing left to drop: no events, no change.
	res, events = m.apply(dropUnclaimed(5 * ms))
	assert.Equal(t, 0, res.Waiters)
	assert.Empty(t, events)

	// A new term makes the claimed waiter unclaimed again; a cancel-wait
	// of an unclaimed waiter keeps the count right.
	m.apply(newTerm(6 * ms))
	assert.Equal(t, 1, m.Unclaimed())
	res, _ = m.apply(cancelWait(7*ms, "b", ownerC))
	assert.Equal(t, StatusCanceled, res.Status)
	assert.Equal(t, 0, m.Unclaimed())
	require.NoError(t, checkInternals(m.Machine))
}

// Epochs survive a snapshot; a version 1 snapshot restores as epoch 0 with
// every waiter claimed, and the memory store (which never starts a term)
// behaves as before.
func TestClaimsInSnapshots(t *testing.T) {
	m := New(nil)
	m.Apply(acquire(1*ms, "k", ownerA, time.Minute, 0))
	m.Apply(acquire(1*ms, "k", ownerB, time.Minute, time.Minute))
	m.Apply(newTerm(2 * ms))
	m.Apply(acquire(1*ms, "k", ownerC, time.Minute, time.Minute))
	r := New(nil)
	require.NoError(t, r.Restore(m.Snapshot()))
	assert.Equal(t, m.Snapshot(), r.Snapshot())
	assert.Equal(t, uint64(1), r.Epoch())
	assert.Equal(t, 1, r.Unclaimed())
	require.NoError(t, checkInternals(r))

	v1 := snapshotBuilder{snapshotVersionV1}.uv(100).uv(10).uv(1).
		key("k").owner(ownerA).uv(1).uv(200).uv(1).owner(ownerB).uv(uint64(ms)).uv(150)
	old := newRecorder()
	require.NoError(t, old.Restore(v1))
	assert.Equal(t, uint64(0), old.Epoch())
	assert.Equal(t, 0, old.Unclaimed())
	_, events := old.apply(release(120, "k", ownerA))
	require.Len(t, events, 1)
	assert.Equal(t, EventGranted, events[0].Kind)
	assert.Equal(t, ownerB, events[0].Owner)
}
