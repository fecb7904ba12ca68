package clustertest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/cluster/clustertest"
	"github.com/raftlock/raftlock/lock"
)

func TestStartGivesAClusterThatServesLocksEverywhere(t *testing.T) {
	c := clustertest.Start(t, 3, nil)
	require.Len(t, c.Nodes, 3)
	leader, follower := c.Leader(t), c.Follower(t)
	assert.True(t, leader.IsLeader())
	assert.False(t, follower.IsLeader())

	l := lock.New(follower).Lock("k", lock.TTL(time.Minute))
	require.NoError(t, l.Acquire(t.Context()))
	for _, n := range c.Nodes {
		info, err := n.Inspect(t.Context(), "k")
		require.NoError(t, err)
		assert.True(t, info.Locked, "node %s sees the lock", n.ID())
		assert.Equal(t, l.Token(), info.Token)
	}
}

func TestStartAppliesTweak(t *testing.T) {
	c := clustertest.Start(t, 1, func(cfg *cluster.Config) { cfg.NodeID = "solo" })
	assert.Equal(t, "solo", c.Nodes[0].ID())
}
