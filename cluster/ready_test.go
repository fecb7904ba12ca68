package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// Ready, called right after New, returns once the node can serve a
// linearizable request: on the bootstrapping node (its own term ready) and
// on a node that just joined (the leader's).
func TestReadyReturnsOnceTheNodeCanServe(t *testing.T) {
	cfg := testConfig(t, "n0")
	cfg.Bootstrap = true
	n0 := startNode(t, cfg)
	require.NoError(t, n0.Ready(testCtx(t)))
	assert.True(t, n0.leaderReady(), "a lone node is ready when its own term is")

	cfg1 := testConfig(t, "n1")
	cfg1.Join = []string{n0.Addr()}
	n1 := startNode(t, cfg1)
	require.NoError(t, n1.Ready(testCtx(t)))
	id, addr := n1.Leader()
	assert.Equal(t, "n0", id)
	assert.Equal(t, n0.Addr(), addr)

	// Ready means a request need not wait for an election.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := n1.Inspect(ctx, "k")
	assert.NoError(t, err)
}

// Without a quorum Ready waits until its context ends and says so; a closed
// node is never ready.
func TestReadyWithoutQuorumEndsWithItsContext(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.LeaderWait = time.Minute })
	f := c.follower()
	acquire(t, f, "held", time.Minute)
	require.Eventually(t, func() bool {
		info, err := f.InspectStale("held")
		return err == nil && info.Locked
	}, patience, time.Millisecond, "the follower applied the grant")
	for i, n := range c.nodes {
		if n != f {
			c.stop(i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := f.Ready(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, `node "`+f.ID()+`" not ready`)

	// A stale read through package lock still answers, from the node's own state.
	info, err := lock.New(f).Inspect(testCtx(t), "held", lock.Stale())
	require.NoError(t, err)
	assert.True(t, info.Locked)

	require.NoError(t, f.Close())
	assert.ErrorIs(t, f.Ready(testCtx(t)), lock.ErrClosed)
}

// A follower's watch reports the leader, fires when the leader goes, and
// the next watch reports the new one; a closed node's watch says so.
func TestWatchLeaderSeesAFailover(t *testing.T) {
	c := newCluster(t, 3, nil)
	old := c.leader()
	f := c.follower()
	id, addr, changed, err := f.WatchLeader()
	require.NoError(t, err)
	assert.Equal(t, old.ID(), id)
	assert.Equal(t, old.Addr(), addr)

	c.stop(c.index(old))
	select {
	case <-changed:
	case <-time.After(patience):
		t.Fatal("the watch did not fire when the leader went away")
	}
	newLeader := c.waitLeader()
	require.Eventually(t, func() bool {
		id, addr, _, err = f.WatchLeader()
		require.NoError(t, err)
		return id != ""
	}, patience, 5*time.Millisecond)
	assert.Equal(t, newLeader.ID(), id)
	assert.Equal(t, newLeader.Addr(), addr)

	_, _, changed, err = f.WatchLeader()
	require.NoError(t, err)
	require.NoError(t, f.Close())
	select {
	case <-changed:
	case <-time.After(patience):
		t.Fatal("the watch did not fire when the node closed")
	}
	_, _, _, err = f.WatchLeader()
	assert.ErrorIs(t, err, lock.ErrClosed)
}
