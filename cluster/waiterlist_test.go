package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

func TestWaitersStaleListsTheQueueInOrderOnEveryNode(t *testing.T) {
	c := newCluster(t, 3, nil)
	leader := c.leader()
	ctx := testCtx(t)
	holder, _ := acquire(t, leader, "k", time.Minute)
	// Two callers queue, one after the other.
	for _, ttl := range []time.Duration{10 * time.Second, 20 * time.Second} {
		go func() {
			_, _ = leader.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: ttl, Wait: time.Minute})
		}()
		want := 1
		if ttl == 20*time.Second {
			want = 2
		}
		require.Eventually(t, func() bool {
			q, err := leader.WaitersStale("k")
			return err == nil && len(q) == want
		}, 10*time.Second, 5*time.Millisecond)
	}
	for _, n := range c.nodes {
		require.Eventually(t, func() bool {
			q, _ := n.WaitersStale("k")
			return len(q) == 2
		}, 10*time.Second, 5*time.Millisecond, "node %s sees the queue once it applied it", n.ID())
		q, err := n.WaitersStale("k")
		require.NoError(t, err)
		assert.Equal(t, 10*time.Second, q[0].TTL, "first come, first listed")
		assert.Equal(t, 20*time.Second, q[1].TTL)
		for _, w := range q {
			assert.Greater(t, w.WaitLeft, time.Duration(0))
			assert.LessOrEqual(t, w.WaitLeft, time.Minute)
		}
	}
	q, err := leader.WaitersStale("free")
	require.NoError(t, err)
	assert.Empty(t, q)
	_, err = leader.WaitersStale("")
	assert.ErrorIs(t, err, lock.ErrInvalidKey)

	released, err := leader.Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, released)
	require.Eventually(t, func() bool {
		q, _ := leader.WaitersStale("k")
		return len(q) == 1 && q[0].TTL == 20*time.Second
	}, 10*time.Second, 5*time.Millisecond, "the head was handed the lock and left the queue")
}
