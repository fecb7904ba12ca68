package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With the leader writing in parallel (Config.LeaderWritesInParallel), every
// lock granted survives the leader's stop and restart: each was durable on
// a quorum that counted the leader only once its own write was synced, and
// the restarted leader catches up from the new one.
func TestLeaderWritesInParallelKeepsGrantsAcrossLeaderRestart(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.LeaderWritesInParallel = true })
	leader := c.leader()
	tokens := map[string]uint64{}
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		_, lease := acquire(t, leader, key, time.Hour)
		tokens[key] = lease.Token
	}
	i := c.index(leader)
	c.stop(i)

	next := c.waitLeader()
	for key, token := range tokens {
		info, err := next.Inspect(testCtx(t), key)
		require.NoError(t, err)
		require.True(t, info.Locked, key)
		require.Equal(t, token, info.Token, key)
	}
	_, lease := acquire(t, next, "after", time.Hour)
	require.Greater(t, lease.Token, tokens["k19"])

	back := c.restart(i)
	require.Eventually(t, func() bool { return c.holdsAllCommitted(back) }, patience, 5*time.Millisecond,
		"the restarted leader did not catch up")
}
