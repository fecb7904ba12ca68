package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// acquireAllAsync starts a waiting multi-key acquire on n.
func acquireAllAsync(ctx context.Context, n *Node, req lock.AcquireRequest) <-chan outcome {
	done := make(chan outcome, 1)
	go func() {
		lease, err := n.AcquireAll(ctx, req)
		done <- outcome{lease, err, time.Now()}
	}()
	return done
}

// A waiting set keeps its places (and its reserved key) across a leader
// change: its call is sent again to the new leader, which claims the set
// on every key, and it gets both keys when the holder releases.
func TestLiveMultiKeyWaiterSurvivesLeaderChange(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l := c.leader()
	fs := c.followers()
	f, other := fs[0], fs[1]
	holder, lease := acquire(t, other, "b", time.Minute)

	set := lock.AcquireRequest{Key: "a", Keys: []string{"a", "b"}, Owner: lock.NewOwner(), TTL: time.Minute, Wait: patience}
	waiting := acquireAllAsync(ctx, f, set)
	awaitWaiters(t, l, "a", 1)
	awaitWaiters(t, l, "b", 1)
	c.stop(c.index(l))
	nl := c.waitLeader()
	// The new leader drops the waiters nobody claims after a grace; the
	// set's caller claims it again, so a stays reserved for it throughout.
	_, err := nl.Acquire(ctx, lock.AcquireRequest{Key: "a", Owner: lock.NewOwner(), TTL: time.Minute})
	assert.ErrorIs(t, err, lock.ErrLocked, "a is reserved for the set")

	ok, err := other.Release(ctx, "b", holder)
	require.NoError(t, err)
	require.True(t, ok)
	got := await(t, waiting, "the set")
	require.NoError(t, got.err)
	assert.Greater(t, got.lease.Token, lease.Token)
	for _, k := range []string{"a", "b"} {
		info, err := nl.Inspect(ctx, k)
		require.NoError(t, err)
		assert.True(t, info.Locked, k)
		assert.Equal(t, got.lease.Token, info.Token, k)
	}
	ok, err = f.Release(ctx, "b", set.Owner)
	require.NoError(t, err)
	assert.True(t, ok)
	info, err := nl.Inspect(ctx, "a")
	require.NoError(t, err)
	assert.False(t, info.Locked, "releasing b released the whole set")
}

// A waiting set whose caller gives up is withdrawn by the leader from
// every queue, and the key it reserved goes to the waiter behind it.
func TestMultiKeyWaiterWhoGivesUpIsWithdrawn(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l := c.leader()
	f := c.follower()
	holder, _ := acquire(t, l, "b", time.Minute)

	setCtx, cancel := context.WithCancel(ctx)
	set := lock.AcquireRequest{Key: "a", Keys: []string{"a", "b"}, Owner: lock.NewOwner(), TTL: time.Minute, Wait: patience}
	waiting := acquireAllAsync(setCtx, f, set)
	awaitWaiters(t, l, "a", 1)
	behind := acquireAsync(ctx, l, lock.AcquireRequest{Key: "a", Owner: lock.NewOwner(), TTL: time.Minute, Wait: patience})
	awaitWaiters(t, l, "a", 2)
	cancel()
	assert.ErrorIs(t, await(t, waiting, "the set that gave up").err, context.Canceled)
	got := await(t, behind, "the waiter behind the set")
	require.NoError(t, got.err)
	awaitWaiters(t, l, "b", 0)
	ok, err := l.Release(ctx, "b", holder)
	require.NoError(t, err)
	assert.True(t, ok)
}
