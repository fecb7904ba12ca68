package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
)

func acquireEntry(t *testing.T, index uint64, key string) *raft.Log {
	t.Helper()
	b, err := fsm.AppendBatch(nil, []fsm.Command{{Op: fsm.OpAcquire, Key: key, Owner: fsm.Owner{1}, TTL: time.Hour, Stamp: time.Second}})
	require.NoError(t, err)
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: b}
}

// The adapter records each applied change with its raft index: a watch
// after an earlier index is answered at once, one after the latest blocks
// until the next change; a snapshot restore wakes every watcher, and an
// index from before it answers at once.
func TestStateMachineFeedsWatchesWithRaftIndexes(t *testing.T) {
	sm := newStateMachine(testLogger("fsm"), nil)
	ctx := testCtx(t)
	sm.ApplyBatch([]*raft.Log{acquireEntry(t, 5, "a"), {Index: 6, Term: 1, Type: raft.LogConfiguration}})
	assert.NoError(t, sm.hub.Wait(ctx, "a", false, 4, time.Hour), "the change at 5 is after 4: at once")

	woken := make(chan error, 1)
	go func() { woken <- sm.hub.Wait(ctx, "a", false, 6, time.Hour) }()
	require.Eventually(t, func() bool { return sm.hub.Watchers() == 1 }, patienceFor(t), time.Millisecond)
	sm.ApplyBatch([]*raft.Log{acquireEntry(t, 7, "b")})
	assert.Len(t, woken, 0, "a change to another key does not wake it")

	snap, err := sm.Snapshot()
	require.NoError(t, err)
	sink := &memSink{}
	require.NoError(t, snap.Persist(sink))
	snap.Release()
	require.NoError(t, sm.Restore(sink.reader()))
	select {
	case err := <-woken:
		assert.NoError(t, err, "a restore wakes every watcher")
	case <-time.After(patienceFor(t)):
		t.Fatal("the restore did not wake the watcher")
	}
	assert.NoError(t, sm.hub.Wait(ctx, "zzz", false, 6, time.Hour), "an index from before the restore answers at once")
}

func patienceFor(testing.TB) time.Duration { return 10 * time.Second }

// An index taken from one node holds on another: a follower asked with the
// leader's index answers a state at least as new (it catches up first),
// never an older one.
func TestWatchIndexHoldsAcrossNodes(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := c.leader()
	_, lease := acquire(t, leader, "k", time.Hour)
	info, index, err := leader.WatchKey(ctx, "k", lock.WatchQuery{})
	require.NoError(t, err)
	require.True(t, info.Locked)
	for _, f := range c.followers() {
		got, next, err := f.WatchKey(ctx, "k", lock.WatchQuery{Index: index, Wait: 50 * time.Millisecond})
		require.NoError(t, err)
		assert.True(t, got.Locked, "the follower caught up with the leader's index before answering")
		assert.Equal(t, lease.Token, got.Token)
		assert.GreaterOrEqual(t, next, index)
	}
}

// Watches end with their ctx, leaving nothing behind, and Close ends
// those still blocked with lock.ErrClosed.
func TestCloseEndsWatches(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.leader()
	ctx := testCtx(t)
	_, index, err := n.WatchKey(ctx, "k", lock.WatchQuery{})
	require.NoError(t, err)

	// Watchers whose ctx ends leave no registration behind.
	wctx, cancel := context.WithCancel(ctx)
	ended := make(chan error, 10)
	for i := range 10 {
		go func() {
			if i%2 == 0 {
				_, _, err := n.WatchKey(wctx, "k", lock.WatchQuery{Index: index, Wait: time.Hour})
				ended <- err
			} else {
				_, _, err := n.WatchList(wctx, lock.ListRequest{Prefix: "k"}, lock.WatchQuery{Index: index, Wait: time.Hour})
				ended <- err
			}
		}()
	}
	require.Eventually(t, func() bool { return n.sm.hub.Watchers() == 10 }, patienceFor(t), time.Millisecond)
	cancel()
	for range 10 {
		assert.ErrorIs(t, <-ended, context.Canceled)
	}
	assert.Zero(t, n.sm.hub.Watchers(), "no registration left")

	done := make(chan error, 1)
	go func() {
		_, _, err := n.WatchKey(ctx, "k", lock.WatchQuery{Index: index, Wait: time.Hour})
		done <- err
	}()
	require.Eventually(t, func() bool { return n.sm.hub.Watchers() == 1 }, patienceFor(t), time.Millisecond)
	require.NoError(t, n.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, lock.ErrClosed)
	case <-time.After(patienceFor(t)):
		t.Fatal("Close did not end the watch")
	}
	_, _, err = n.WatchKey(context.Background(), "k", lock.WatchQuery{Index: index})
	assert.ErrorIs(t, err, lock.ErrClosed)
}

func TestConfigMaxWatchersMustNotBeNegative(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "n", t.TempDir(), true
	cfg.MaxWatchers = -1
	err := cfg.Validate()
	assert.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "MaxWatchers")
}

// A consistent watch reads through the leader once woken: a grant the
// leader has committed is seen at once, and the index is the follower's
// own (read before), so the grant's arrival there wakes the next query
// rather than being missed.
func TestConsistentWatchReadsThroughTheLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	f := c.follower()
	_, lease := acquire(t, c.leader(), "k", time.Hour)
	info, index, err := f.WatchKey(ctx, "k", lock.WatchQuery{Consistent: true})
	require.NoError(t, err)
	assert.True(t, info.Locked, "linearizable: the leader's committed grant")
	assert.Equal(t, lease.Token, info.Token)
	locks, _, err := f.WatchList(ctx, lock.ListRequest{Prefix: "k"}, lock.WatchQuery{Consistent: true})
	require.NoError(t, err)
	require.Len(t, locks, 1)
	assert.Equal(t, lease.Token, locks[0].Token)
	_, next, err := f.WatchKey(ctx, "k", lock.WatchQuery{Index: index, Wait: 10 * time.Millisecond})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, next, index)
}
