package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

func TestStatsDescribeMembersAndLockActivity(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := c.leader()

	for _, n := range c.nodes {
		require.Eventually(t, func() bool { return len(n.Stats().Members) == 3 }, patience, 2*time.Millisecond,
			"node %s learns the configuration", n.ID())
		st := n.Stats()
		for i, m := range st.Members {
			assert.Equal(t, c.nodes[i].ID(), m.ID, "sorted by ID")
			assert.Equal(t, c.nodes[i].Addr(), m.Address)
			assert.Equal(t, SuffrageVoter, m.Suffrage)
			assert.Equal(t, m.ID == leader.ID(), m.Leader, "node %s on %s", n.ID(), m.ID)
		}
		assert.Positive(t, st.LeaderChanges, "node %s saw a leader elected", n.ID())
		// A follower applies the leader's first entry (new-term) once it
		// hears of its commit, on the next append.
		require.Eventually(t, func() bool { return n.Stats().Apply.Count > 0 }, patience, 2*time.Millisecond,
			"node %s applies entries", n.ID())
	}

	base := map[string]Stats{}
	for _, n := range c.nodes {
		base[n.ID()] = n.Stats()
	}

	// A hand-off: a waiter queued on a follower is granted on release.
	holder, _ := acquire(t, leader, "k", time.Minute)
	waiter := lock.NewOwner()
	granted := acquireAsync(ctx, c.follower(), lock.AcquireRequest{Key: "k", Owner: waiter, TTL: time.Minute, Wait: patience})
	awaitWaiters(t, leader, "k", 1)
	assert.Equal(t, 1, leader.Stats().Waiters, "one caller queued over all keys")
	ok, err := leader.Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, await(t, granted, "the waiter").err)

	// An expiry.
	acquire(t, leader, "short", lock.MinTTL)

	for _, n := range c.nodes {
		was := base[n.ID()]
		require.Eventually(t, func() bool {
			st := n.Stats()
			return st.Handoffs == was.Handoffs+1 && st.Expired == was.Expired+1
		}, patience, 2*time.Millisecond, "node %s applies the hand-off and the expiry", n.ID())
		st := n.Stats()
		assert.Zero(t, st.Waiters, "node %s: nobody waits any more", n.ID())
		assert.Equal(t, 1, st.Keys, "node %s: the waiter holds k", n.ID())
		assert.Greater(t, st.Apply.Count, was.Apply.Count)
		assert.Greater(t, st.Apply.Total, was.Apply.Total)
	}
	st := leader.Stats()
	was := base[leader.ID()]
	assert.Greater(t, st.Commit.Count, was.Commit.Count, "the leader timed its proposals")
	assert.Greater(t, st.Commit.Total, was.Commit.Total)
	assert.Equal(t, was.LeaderChanges, st.LeaderChanges, "no election meanwhile")

	// A snapshot times its freeze.
	require.NoError(t, leader.raft.Snapshot().Error())
	st = leader.Stats()
	assert.Equal(t, was.Freeze.Count+1, st.Freeze.Count)
	assert.Greater(t, st.Freeze.Total, was.Freeze.Total)
}

// A leader change is counted by the nodes that see it.
func TestStatsCountLeaderChanges(t *testing.T) {
	c := newCluster(t, 3, nil)
	old := c.leader()
	survivor := c.follower()
	before := survivor.Stats().LeaderChanges

	c.stop(c.index(old))
	require.NotEqual(t, old, c.waitLeader())
	assert.Greater(t, survivor.Stats().LeaderChanges, before)
}

// Members beyond Config.Voters show as non-voters.
func TestStatsShowNonvoters(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.Voters = 1 })
	want := []Member{
		{ID: "n0", Address: c.nodes[0].Addr(), Suffrage: SuffrageVoter, Leader: true},
		{ID: "n1", Address: c.nodes[1].Addr(), Suffrage: SuffrageNonvoter},
		{ID: "n2", Address: c.nodes[2].Addr(), Suffrage: SuffrageNonvoter},
	}
	for i := range want { // each told the others in the info exchange
		want[i].Version, want[i].Level = raftlockVersion, fsm.MaxCommandLevel
	}
	// Status and Health are the leader's judgement, which the followers
	// show as the leader reports it.
	raftView := func(ms []Member) []Member {
		out := slices.Clone(ms)
		for i := range out {
			out[i].Status, out[i].Health = "", ""
		}
		return out
	}
	for _, n := range c.nodes {
		require.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, raftView(n.Stats().Members)) }, patience, 2*time.Millisecond,
			"node %s sees n0 voting and the others not: %+v", n.ID(), n.Stats().Members)
		require.Eventually(t, func() bool {
			for _, m := range n.Stats().Members {
				if m.Status != "alive" || m.Health != HealthHealthy {
					return false
				}
			}
			return true
		}, patience, 2*time.Millisecond, "node %s shows every member alive and healthy, as the leader judges them: %+v", n.ID(), n.Stats().Members)
	}
}
