package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A node that left gracefully is out of the configuration. Restarted on its
// data dir with Join set, it asks to be added again and serves locks.
func TestLeftNodeRejoinsOnRestart(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	_, lease := acquire(t, c.leader(), "k", time.Minute)

	f := c.follower()
	cfg := f.cfg
	require.NoError(t, f.Leave(ctx))
	c.nodes[c.index(f)] = nil
	var others []string
	for _, n := range c.nodes {
		if n != nil {
			others = append(others, n.ID())
		}
	}
	requireServers(t, c.leader(), others...)

	cfg.Join = []string{c.leader().Addr()}
	back := startNode(t, cfg)
	requireServers(t, c.leader(), append(others, cfg.NodeID)...)
	info, err := back.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, lease.Token, info.Token)
}
