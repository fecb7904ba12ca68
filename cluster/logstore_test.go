package cluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each format keeps every lock across a restart, and a restart with
// LogStore unset finds the format the directory was created with.
func TestLogStoresKeepLocksAcrossRestart(t *testing.T) {
	for _, kind := range []LogStore{LogStoreWAL, LogStoreBoltDB} {
		t.Run(string(kind), func(t *testing.T) {
			c := newCluster(t, 1, func(cfg *Config) { cfg.LogStore = kind })
			require.Equal(t, kind, c.nodes[0].Stats().LogStore)
			_, lease := acquire(t, c.nodes[0], "k", time.Hour)
			c.stop(0)

			cfg := c.cfgs[0]
			cfg.LogStore = ""
			n := startNode(t, cfg)
			c.nodes[0] = n
			c.waitLeader()
			assert.Equal(t, kind, n.Stats().LogStore)
			info, err := n.Inspect(testCtx(t), "k")
			require.NoError(t, err)
			assert.Equal(t, lease.Token, info.Token)
		})
	}
}

func TestFreshDataDirDefaultsToWAL(t *testing.T) {
	c := newCluster(t, 1, nil)
	assert.Equal(t, LogStoreWAL, c.nodes[0].Stats().LogStore)
	entries, err := os.ReadDir(filepath.Join(c.cfgs[0].DataDir, walDirName))
	require.NoError(t, err)
	assert.NotEmpty(t, entries)
}

// Opening a directory with the other format would start from an empty log:
// the node would forget every lock it had acknowledged. It must refuse, and
// leave the directory as it was.
func TestLogStoreThatDisagreesWithTheDataDirIsRefused(t *testing.T) {
	for _, tc := range []struct{ created, asked LogStore }{
		{LogStoreBoltDB, LogStoreWAL},
		{LogStoreWAL, LogStoreBoltDB},
	} {
		t.Run(string(tc.created)+" opened as "+string(tc.asked), func(t *testing.T) {
			c := newCluster(t, 1, func(cfg *Config) { cfg.LogStore = tc.created })
			_, lease := acquire(t, c.nodes[0], "k", time.Hour)
			c.stop(0)

			cfg := c.cfgs[0]
			cfg.LogStore = tc.asked
			_, err := New(cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.ErrorContains(t, err, "would start empty")

			cfg.LogStore = tc.created
			n := startNode(t, cfg)
			c.nodes[0] = n
			c.waitLeader()
			info, err := n.Inspect(testCtx(t), "k")
			require.NoError(t, err)
			assert.Equal(t, lease.Token, info.Token)
		})
	}
}

func TestDataDirWithBothLogFormatsIsRefused(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.LogStore = LogStoreWAL })
	c.stop(0)
	cfg := c.cfgs[0]
	require.NoError(t, os.WriteFile(filepath.Join(cfg.DataDir, boltDBFileName), nil, 0o600))
	_, err := New(cfg)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.ErrorContains(t, err, "holds both")
}

// A second node on a running node's data dir would append to the same log
// as if it were alone: it is refused at once, and the first keeps serving.
func TestSecondNodeOnTheSameDataDirIsRefused(t *testing.T) {
	c := newCluster(t, 1, nil)
	cfg := c.cfgs[0]
	cfg.NodeID, cfg.BindAddr = "intruder", "127.0.0.1:0"
	_, err := New(cfg)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.ErrorContains(t, err, "is in use by another node")
	acquire(t, c.nodes[0], "k", time.Minute)
}

// The documented way to move a member to the other format: leave, empty
// the data dir, join again with the new LogStore.
func TestMemberMovesToTheOtherLogFormat(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.LogStore = LogStoreBoltDB })
	_, lease := acquire(t, c.leader(), "kept", time.Hour)

	moving := c.index(c.follower())
	require.NoError(t, c.nodes[moving].Leave(testCtx(t)))
	c.nodes[moving] = nil
	cfg := c.cfgs[moving]
	require.NoError(t, os.RemoveAll(cfg.DataDir))
	cfg.LogStore = LogStoreWAL
	cfg.Join = []string{c.leader().Addr()}
	n := startNode(t, cfg)
	c.nodes[moving] = n

	assert.Equal(t, LogStoreWAL, n.Stats().LogStore)
	require.Eventually(t, func() bool {
		info, err := n.InspectStale("kept")
		return err == nil && info.Locked && info.Token == lease.Token
	}, patience, 10*time.Millisecond, "the moved member has the lock state")
	_, again := acquire(t, n, "after", time.Minute)
	assert.Greater(t, again.Token, lease.Token)
}
