package integration

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/lock"
)

// Bugs the scenarios found, pinned as deterministic tests.

// A node that restarts re-applies its log, and with it the events of old
// entries. A waiting acquire by an owner that was handed the key long ago
// (and has released it since) must not take that replayed hand-off for its
// own grant. Found by TestFencedProcesses (a full-cluster crash, holders
// that reuse their owner): a holder was told it held the lock with the
// token of its grant from six seconds earlier, while another owner held it.
func TestWaiterIsNotWokenByAReplayedGrant(t *testing.T) {
	dir := t.TempDir()
	cfg := cluster.DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "solo", filepath.Join(dir, "solo"), true
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	cfg.Logger = hclog.NewNullLogger()
	node, err := cluster.New(cfg)
	require.NoError(t, err)
	cfg.BindAddr = node.Addr() // a restart keeps the address raft knows it by
	t.Cleanup(func() { node.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Eventually(t, node.IsLeader, 10*time.Second, 5*time.Millisecond)

	const key, ttl = "k", time.Hour
	x, o := lock.NewOwner(), lock.NewOwner()

	// o queues behind x and is handed the key when x releases: the log now
	// holds a hand-off to o, and applying it emits a grant event for o.
	_, err = node.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: x, TTL: ttl})
	require.NoError(t, err)
	handedOff := make(chan lock.Lease, 1)
	go func() {
		lease, err := node.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: o, TTL: ttl, Wait: 10 * time.Second})
		assert.NoError(t, err)
		handedOff <- lease
	}()
	require.Eventually(t, func() bool {
		info, err := node.Inspect(ctx, key)
		return err == nil && info.Waiters == 1
	}, 10*time.Second, 5*time.Millisecond, "o queues")
	released, err := node.Release(ctx, key, x)
	require.NoError(t, err)
	require.True(t, released)
	old := <-handedOff

	// o lets go; x takes the key again, with a newer token.
	released, err = node.Release(ctx, key, o)
	require.NoError(t, err)
	require.True(t, released)
	current, err := node.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: x, TTL: ttl})
	require.NoError(t, err)
	require.Greater(t, current.Token, old.Token)

	// Restart. o queues for the key again at once, before the node has
	// re-applied its log (it has not even elected itself yet).
	require.NoError(t, node.Close())
	node, err = cluster.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { node.Close() })
	lease, err := node.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: o, TTL: ttl, Wait: 2 * time.Second})

	// x holds the key (token current.Token) and never released it, so o's
	// wait must run out.
	info, ierr := node.Inspect(ctx, key)
	require.NoError(t, ierr)
	require.True(t, info.Locked)
	require.Equal(t, current.Token, info.Token, "x still holds the key")
	if err == nil {
		t.Fatalf("o was told it holds %q with token %d (its grant from before the restart), while x holds it with token %d", key, lease.Token, info.Token)
	}
	assert.True(t, errors.Is(err, lock.ErrLocked), "o's wait runs out: %v", err)
}
