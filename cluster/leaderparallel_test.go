package cluster

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft-wal/types"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/internal/diskfault"
	"github.com/raftlock/raftlock/lock"
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

// A leader whose disk fails the sync of a batch it wrote while replicating
// it steps down and stops (Err matches ErrLogSyncFailed, calls fail with
// lock.ErrClosed): it cannot be sure the batch is on disk, and a later
// sync that "succeeds" may not have written it. The others elect a leader
// and every grant acknowledged before is still held.
func TestLeaderWhoseDiskFailsASyncStops(t *testing.T) {
	disks := map[string]*diskfault.PowerLoss{}
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.LeaderWritesInParallel = true
		disk := &diskfault.PowerLoss{}
		t.Cleanup(diskfault.Install(cfg.DataDir, func(v types.VFS) types.VFS { disk.VFS = v; return disk }))
		disks[cfg.NodeID] = disk
	})
	leader := c.leader()
	tokens := map[string]uint64{}
	for i := range 5 {
		key := fmt.Sprintf("k%d", i)
		_, lease := acquire(t, leader, key, time.Hour)
		tokens[key] = lease.Token
	}

	disks[leader.ID()].FailSyncs(1, syscall.EIO)
	owner := lock.NewOwner()
	lease, err := leader.Acquire(testCtx(t), lock.AcquireRequest{Key: "during", Owner: owner, TTL: time.Hour})
	if err == nil {
		tokens["during"] = lease.Token // the followers committed it by themselves
	}
	select {
	case <-leader.Done():
	case <-time.After(patience):
		t.Fatal("the leader whose disk failed a sync did not stop")
	}
	require.ErrorIs(t, leader.Err(), ErrLogSyncFailed)
	_, err = leader.Inspect(testCtx(t), "k0")
	require.ErrorIs(t, err, lock.ErrClosed)
	c.nodes[c.index(leader)] = nil

	next := c.waitLeader()
	for key, token := range tokens {
		info, err := next.Inspect(testCtx(t), key)
		require.NoError(t, err)
		require.True(t, info.Locked, key)
		require.Equal(t, token, info.Token, key)
	}
}
