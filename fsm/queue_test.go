package fsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestManyWaitersQueueAndHandOffInOrder fills one key's queue to MaxWaiters
// and checks what the owner index must keep right at that size: each
// newcomer's place, a retry's place, a cancel from the middle, and hand-offs
// in FIFO order. BenchmarkEnqueueWaiters measures the same enqueue.
func TestManyWaitersQueueAndHandOffInOrder(t *testing.T) {
	const k = "busy"
	m := newRecorder()
	require.Equal(t, StatusGranted, m.Apply(acquire(0, k, ownerA, time.Hour, 0)).Status)
	for i := range MaxWaiters {
		res := m.Apply(acquire(0, k, numberedOwner(i), time.Hour, time.Hour))
		if res.Status != StatusQueued || res.Waiters != i+1 {
			t.Fatalf("waiter %d: %+v, want queued at %d", i, res, i+1)
		}
	}
	require.Equal(t, MaxWaiters, m.Waiters())

	// Retries keep their place, at the head, in the middle and at the tail.
	for _, i := range []int{0, MaxWaiters / 2, MaxWaiters - 1} {
		res := m.Apply(acquire(1*ms, k, numberedOwner(i), time.Hour, time.Hour))
		assert.Equal(t, StatusQueued, res.Status, "retry of waiter %d", i)
		assert.Equal(t, i+1, res.Waiters, "retry of waiter %d", i)
	}

	// Waiters 1 and 3 leave; everyone behind them moves up two places.
	for _, i := range []int{1, 3} {
		assert.Equal(t, StatusCanceled, m.Apply(cancelWait(2*ms, k, numberedOwner(i))).Status)
	}
	res := m.Apply(acquire(2*ms, k, numberedOwner(MaxWaiters/2), time.Hour, time.Hour))
	assert.Equal(t, MaxWaiters/2+1-2, res.Waiters)
	require.NoError(t, checkInternals(m.Machine))

	// Releases hand the key on in arrival order, skipping those who left.
	holder := ownerA
	for _, next := range []int{0, 2, 4, 5} {
		res, events := m.apply(release(3*ms, k, holder))
		require.Equal(t, StatusReleased, res.Status)
		require.Len(t, events, 1)
		assert.Equal(t, EventGranted, events[0].Kind)
		assert.Equal(t, numberedOwner(next), events[0].Owner, "hand-off to waiter %d", next)
		holder = numberedOwner(next)
	}
	assert.Equal(t, MaxWaiters-2-4, m.Waiters())
	require.NoError(t, checkInternals(m.Machine))
}
