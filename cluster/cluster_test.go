package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

type outcome struct {
	lease lock.Lease
	err   error
	at    time.Time // when Acquire returned
}

func acquireAsync(ctx context.Context, s lock.Store, req lock.AcquireRequest) <-chan outcome {
	done := make(chan outcome, 1)
	go func() {
		lease, err := s.Acquire(ctx, req)
		done <- outcome{lease, err, time.Now()}
	}()
	return done
}

func await(t *testing.T, done <-chan outcome, what string) outcome {
	t.Helper()
	select {
	case o := <-done:
		return o
	case <-time.After(patience):
		t.Fatalf("%s did not return", what)
		return outcome{}
	}
}

// awaitWaiters waits until n callers queue for key, as s sees it.
func awaitWaiters(t *testing.T, s lock.Store, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := s.Inspect(testCtx(t), key)
		return err == nil && info.Waiters == n
	}, patience, 2*time.Millisecond, "waiting for %d waiters on %q", n, key)
}

func TestLockThroughFollowerSeenByEveryNode(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	_, lease := acquire(t, c.follower(), "k", time.Minute)

	for _, n := range c.nodes {
		info, err := n.Inspect(ctx, "k")
		require.NoError(t, err)
		assert.True(t, info.Locked, "node %s", n.ID())
		assert.Equal(t, lease.Token, info.Token, "node %s", n.ID())
		// And every node's own copy of the state catches up.
		require.Eventually(t, func() bool {
			info, err := n.InspectStale("k")
			return err == nil && info.Locked && info.Token == lease.Token
		}, patience, 2*time.Millisecond, "node %s", n.ID())
	}
}

// The leader dies; the new leader serves the locks already held, their
// leases intact: never ending before the holder's own conservative deadline.
func TestLeaderFailoverKeepsLeases(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	old := c.leader()
	f := c.follower()

	sent := time.Now()
	owner, lease := acquire(t, f, "held", 30*time.Second)
	deadline := sent.Add(lease.Remaining) // what the holder believes

	c.stop(c.index(old))
	c.waitLeader()
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		info, err := n.Inspect(ctx, "held")
		answered := time.Now()
		require.NoError(t, err)
		assert.True(t, info.Locked, "node %s", n.ID())
		assert.Equal(t, lease.Token, info.Token)
		// The leader's figure counts from before we got it: by it, the
		// lease ends no later than answered+Remaining.
		assert.False(t, answered.Add(info.Remaining).Before(deadline),
			"node %s reports the lease ending %v before the holder's deadline", n.ID(), deadline.Sub(answered.Add(info.Remaining)))
	}

	_, next := acquire(t, f, "other", time.Minute)
	assert.Greater(t, next.Token, lease.Token, "tokens keep increasing across leaders")

	extended, err := f.Extend(ctx, "held", owner, time.Minute)
	require.NoError(t, err, "the holder still holds it under the new leader")
	assert.Equal(t, lease.Token, extended.Token)
	ok, err := f.Release(ctx, "held", owner)
	require.NoError(t, err)
	assert.True(t, ok)
}

// A lease held across a leader change still runs out, and the new leader's
// expiry timer hands the key to the waiter — not before the holder's deadline.
func TestLeaseExpiresAcrossLeaderChange(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	old := c.leader()
	var followers []*Node
	for _, n := range c.nodes {
		if n != old {
			followers = append(followers, n)
		}
	}

	sent := time.Now()
	_, lease := acquire(t, followers[0], "k", 2*time.Second)
	deadline := sent.Add(lease.Remaining)
	done := acquireAsync(ctx, followers[1], lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: patience})
	awaitWaiters(t, followers[1], "k", 1)

	c.stop(c.index(old))
	got := await(t, done, "the waiter")
	require.NoError(t, got.err)
	assert.Greater(t, got.lease.Token, lease.Token)
	assert.False(t, got.at.Before(deadline), "the lease ended %v before its holder's deadline", deadline.Sub(got.at))
}

// A node restarted on its data dir comes back with every holder, waiter and
// the token counter; but the waiters' callers went with the node, so a
// waiter is granted only if its caller claims it again (by sending its
// acquire again): the others are skipped, never handed the lock.
func TestRestartRecoversStateAndGrantsOnlyClaimedWaiters(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.nodes[0]
	ctx := testCtx(t)

	_, leaseA := acquire(t, n, "a", time.Hour)
	holder, leaseB := acquire(t, n, "b", time.Hour)
	gone, back := lock.NewOwner(), lock.NewOwner()
	doneGone := acquireAsync(ctx, n, lock.AcquireRequest{Key: "b", Owner: gone, TTL: time.Hour, Wait: time.Hour})
	awaitWaiters(t, n, "b", 1)
	doneBack := acquireAsync(ctx, n, lock.AcquireRequest{Key: "b", Owner: back, TTL: time.Hour, Wait: time.Hour})
	awaitWaiters(t, n, "b", 2)
	lastToken := n.Stats().LastToken

	c.stop(0)
	for _, done := range []<-chan outcome{doneGone, doneBack} {
		got := await(t, done, "a waiter of a closing node")
		assert.ErrorIs(t, got.err, lock.ErrClosed)
	}

	n = c.restart(0)
	c.waitLeader()
	assert.Equal(t, lastToken, n.Stats().LastToken)
	info, err := n.Inspect(ctx, "a")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, leaseA.Token, info.Token)
	info, err = n.Inspect(ctx, "b")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, leaseB.Token, info.Token)

	// One caller comes back and sends its acquire again: it claims its place.
	doneBack = acquireAsync(ctx, n, lock.AcquireRequest{Key: "b", Owner: back, TTL: time.Hour, Wait: time.Hour})
	require.Eventually(t, func() bool { return n.sm.unclaimed() <= 1 && n.waiters.TestHooks().Parked() == 1 },
		5*time.Second, time.Millisecond, "the returning caller parked at the leader")

	// The holder's release skips the waiter nobody claimed.
	ok, err := n.Release(ctx, "b", holder)
	require.NoError(t, err)
	require.True(t, ok)
	got := await(t, doneBack, "the waiter that came back")
	require.NoError(t, got.err)
	assert.Equal(t, lastToken+1, got.lease.Token)
	ok, err = n.Release(ctx, "b", gone)
	require.NoError(t, err)
	assert.False(t, ok, "the vanished waiter was handed b")
	ok, err = n.Release(ctx, "b", back)
	require.NoError(t, err)
	assert.True(t, ok)

	// And with nobody claimed, a release frees the key for anyone.
	holder, _ = acquire(t, n, "c", time.Hour)
	doneGone = acquireAsync(ctx, n, lock.AcquireRequest{Key: "c", Owner: gone, TTL: time.Hour, Wait: time.Hour})
	awaitWaiters(t, n, "c", 1)
	c.stop(0)
	assert.ErrorIs(t, await(t, doneGone, "the waiter of a closing node").err, lock.ErrClosed)
	n = c.restart(0)
	c.waitLeader()
	ok, err = n.Release(ctx, "c", holder)
	require.NoError(t, err)
	require.True(t, ok)
	fresh, lease := acquire(t, n, "c", time.Minute)
	assert.Equal(t, lastToken+3, lease.Token)
	ok, err = n.Release(ctx, "c", fresh)
	require.NoError(t, err)
	assert.True(t, ok)
}

// A follower stopped while the others move on, far enough that the leader
// compacted the log it would need, catches up by installing a snapshot.
func TestFollowerCatchesUpBySnapshot(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 16
		cfg.TrailingLogs = 8
		cfg.WALSegmentSize = 4 << 10 // so that compaction drops the entries the follower lacks
		cfg.SnapshotInterval = 20 * time.Millisecond
	})
	ctx := testCtx(t)
	l := c.leader()
	lagging := c.index(c.follower())
	lastIndex := c.nodes[lagging].raft.LastIndex()
	c.stop(lagging)

	held := map[string]uint64{}
	for i := range 100 {
		key := fmt.Sprintf("k%d", i)
		owner, lease := acquire(t, l, key, time.Hour)
		if i%10 == 0 {
			held[key] = lease.Token
			continue
		}
		ok, err := l.Release(ctx, key, owner)
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.NoError(t, l.raft.Snapshot().Error())
	first, err := l.store.FirstIndex()
	require.NoError(t, err)
	require.Greater(t, first, lastIndex+1, "the leader no longer has the entries the follower needs")

	n := c.restart(lagging)
	restoresAtStart := n.Stats().Restores
	require.Eventually(t, func() bool { return n.Stats().Restores > restoresAtStart }, patience, 5*time.Millisecond,
		"the follower installed the leader's snapshot")
	require.Eventually(t, func() bool { return n.Stats().LastToken == l.Stats().LastToken }, patience, 5*time.Millisecond)
	for key, token := range held {
		info, err := n.InspectStale(key)
		require.NoError(t, err)
		assert.True(t, info.Locked, key)
		assert.Equal(t, token, info.Token, key)
	}
	assert.Equal(t, len(held), n.Stats().Keys)
}

// Waiters on two nodes are handed a lock released on a third, in the order
// they queued, each woken by the hand-off (the leases would last a minute).
func TestWaitersHandedOffInFIFOOrderAcrossNodes(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	holder, lease := acquire(t, c.nodes[0], "k", time.Minute)
	first, second := lock.NewOwner(), lock.NewOwner()
	firstDone := acquireAsync(ctx, c.nodes[1], lock.AcquireRequest{Key: "k", Owner: first, TTL: time.Minute, Wait: patience})
	awaitWaiters(t, c.nodes[0], "k", 1)
	secondDone := acquireAsync(ctx, c.nodes[2], lock.AcquireRequest{Key: "k", Owner: second, TTL: time.Minute, Wait: patience})
	awaitWaiters(t, c.nodes[0], "k", 2)

	ok, err := c.nodes[0].Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, ok)
	got := await(t, firstDone, "the first waiter")
	require.NoError(t, got.err)
	assert.Equal(t, lease.Token+1, got.lease.Token)
	assert.Greater(t, got.lease.Remaining, 50*time.Second)
	select {
	case o := <-secondDone:
		t.Fatalf("the second waiter returned before the first released: %+v", o)
	default:
	}
	awaitWaiters(t, c.nodes[2], "k", 1)

	ok, err = c.nodes[1].Release(ctx, "k", first)
	require.NoError(t, err)
	require.True(t, ok)
	got = await(t, secondDone, "the second waiter")
	require.NoError(t, got.err)
	assert.Equal(t, lease.Token+2, got.lease.Token)
}

// A waiter on a follower is told of its grant by the leader, where its
// request is parked (the follower keeps no waiters: the leader's answer is
// the only one it can get), and the lease it reports does not overstate the
// cluster's.
func TestWaiterOnFollowerToldByLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l, f := c.leader(), c.follower()
	holder, _ := acquire(t, l, "k", time.Minute)
	const ttl = 3 * time.Second
	sent := time.Now()
	done := acquireAsync(ctx, f, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: ttl, Wait: patience})
	awaitWaiters(t, l, "k", 1)

	ok, err := l.Release(ctx, "k", holder)
	granted := time.Now()
	require.NoError(t, err)
	require.True(t, ok)

	got := await(t, done, "the waiter")
	require.NoError(t, got.err)
	believed := sent.Add(got.lease.Remaining)
	assert.False(t, believed.After(granted.Add(ttl)),
		"the waiter believes its lease lasts %v past the cluster's expiry", believed.Sub(granted.Add(ttl)))
	info, err := l.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, info.Token, got.lease.Token)
}

// Without a quorum a caller gets an error within its context, not a hang.
func TestNoQuorumGivesErrorNotHang(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.RequestTimeout = time.Second
		cfg.LeaderWait = time.Minute // not this test's subject: TestNoLeaderFailsFast
	})
	l := c.leader()
	f := c.follower()
	held, _ := acquire(t, l, "held", time.Minute)
	for i, n := range c.nodes {
		if n != f {
			c.stop(i)
		}
	}

	t.Run("ctx deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := f.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorIs(t, err, lock.ErrUnavailable)
		assert.Less(t, time.Since(start), 2*time.Second)

		start = time.Now()
		_, err = f.Inspect(ctx, "held")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 2*time.Second)
	})
	t.Run("RequestTimeout", func(t *testing.T) {
		start := time.Now()
		_, err := f.Release(context.Background(), "held", held)
		assert.ErrorIs(t, err, lock.ErrUnavailable)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller's ctx did not end")
		assert.Less(t, time.Since(start), 3*time.Second)
	})
}

// A leader that loses its quorum steps down; a command it had proposed has
// an unknown outcome, and the caller is told so, within its context.
func TestLeaderWithoutQuorumReportsUnknownOutcome(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.LeaderWait = time.Minute }) // the ctx ends first
	l := c.leader()
	for i, n := range c.nodes {
		if n != l {
			c.stop(i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := l.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute})
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, lock.ErrUnknownOutcome, "the acquire was proposed before the leader stepped down")
	assert.Less(t, time.Since(start), 3*time.Second)
}

func TestJoinAndLeave(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	owner, lease := acquire(t, c.leader(), "k", time.Minute)

	// A fourth node joins through a follower, which points it at the leader.
	cfg := testConfig(t, "n3")
	cfg.Join = []string{c.follower().Addr()}
	joined := startNode(t, cfg)
	requireServers(t, c.leader(), "n0", "n1", "n2", "n3")
	servers, err := c.leader().Servers()
	require.NoError(t, err)
	assert.Equal(t, joined.Addr(), servers["n3"])
	info, err := joined.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, lease.Token, info.Token)
	require.Eventually(t, func() bool {
		info, err := joined.InspectStale("k")
		return err == nil && info.Locked
	}, patience, 5*time.Millisecond, "the new node replicates the lock table")

	// A follower leaves.
	f := c.follower()
	require.NoError(t, f.Leave(ctx))
	c.nodes[c.index(f)] = nil
	remaining := []string{"n3"}
	for _, n := range c.nodes {
		if n != nil {
			remaining = append(remaining, n.ID())
		}
	}
	requireServers(t, joined, remaining...)

	// The leader leaves: it hands leadership over first.
	l := c.leader()
	require.NoError(t, l.Leave(ctx))
	c.nodes[c.index(l)] = nil
	c.nodes = append(c.nodes, joined)
	c.waitLeader()
	remaining = remaining[:0]
	for _, n := range c.nodes {
		if n != nil {
			remaining = append(remaining, n.ID())
		}
	}
	requireServers(t, joined, remaining...)

	ok, err := joined.Release(ctx, "k", owner)
	require.NoError(t, err)
	assert.True(t, ok, "the lock survived both departures")
}

func TestCloseWakesWaitersWithErrClosed(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	f := c.follower()
	acquire(t, f, "k", time.Minute)
	done := acquireAsync(ctx, f, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Hour})
	awaitWaiters(t, f, "k", 1)
	require.NoError(t, f.Close())
	got := await(t, done, "the waiter")
	assert.ErrorIs(t, got.err, lock.ErrClosed)

	_, err := f.Acquire(ctx, lock.AcquireRequest{Key: "x", Owner: lock.NewOwner(), TTL: time.Minute})
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = f.Acquire(ctx, lock.AcquireRequest{Key: "x", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = f.Inspect(ctx, "x")
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = f.Release(ctx, "x", lock.NewOwner())
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = f.Extend(ctx, "x", lock.NewOwner(), time.Minute)
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = f.ForceRelease(ctx, "x")
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = f.List(ctx, lock.ListRequest{})
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = f.InspectStale("x")
	assert.ErrorIs(t, err, lock.ErrClosed)
	assert.NoError(t, f.Close(), "Close is idempotent")
}

// requireServers waits until n's configuration lists exactly ids.
func requireServers(t *testing.T, n *Node, ids ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	require.Eventually(t, func() bool {
		servers, err := n.Servers()
		if err != nil || len(servers) != len(want) {
			return false
		}
		for id := range servers {
			if !want[id] {
				return false
			}
		}
		return true
	}, patience, 5*time.Millisecond, "servers of %s: want %v", n.ID(), ids)
}
