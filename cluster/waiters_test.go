package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// followers returns the running nodes that do not lead.
func (c *testCluster) followers() []*Node {
	l := c.waitLeader()
	var out []*Node
	for _, n := range c.nodes {
		if n != nil && n != l {
			out = append(out, n)
		}
	}
	return out
}

// A waiter queued through a follower whose node then dies is withdrawn,
// not granted: the next waiter gets the lock as soon as the holder releases.
func TestWaiterWhoseFollowerDiesIsWithdrawn(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l := c.leader()
	fs := c.followers()
	f, other := fs[0], fs[1]
	holder, lease := acquire(t, l, "k", time.Minute)

	gone := acquireAsync(ctx, f, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: 5 * time.Minute, Wait: time.Minute})
	awaitWaiters(t, l, "k", 1)
	c.stop(c.index(f))
	assert.ErrorIs(t, await(t, gone, "the waiter of a closed node").err, lock.ErrClosed)
	awaitWaiters(t, l, "k", 0) // withdrawn by the leader

	next := acquireAsync(ctx, other, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
	awaitWaiters(t, l, "k", 1)
	ok, err := l.Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, ok)
	got := await(t, next, "the next waiter")
	require.NoError(t, got.err)
	assert.Equal(t, lease.Token+1, got.lease.Token)
}

// A waiter whose caller is on the leader, which then dies: the new leader
// does not hand the lock to it (nobody claims it again), so the holder's
// release frees the key for a fresh acquire at once.
func TestWaiterOnDeadLeaderIsNotGranted(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l := c.leader()
	f := c.follower()
	acquire(t, f, "d", time.Minute)
	holder, lease := acquire(t, f, "k", time.Minute)

	gone := acquireAsync(ctx, l, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: 5 * time.Minute, Wait: time.Minute})
	awaitWaiters(t, l, "k", 1)
	goneToo := acquireAsync(ctx, l, lock.AcquireRequest{Key: "d", Owner: lock.NewOwner(), TTL: 5 * time.Minute, Wait: time.Minute})
	awaitWaiters(t, l, "d", 1)
	c.stop(c.index(l))
	assert.ErrorIs(t, await(t, gone, "the waiter of a closed node").err, lock.ErrClosed)
	assert.ErrorIs(t, await(t, goneToo, "the waiter of a closed node").err, lock.ErrClosed)
	nl := c.waitLeader()
	// Nobody claims the waiter on d: the new leader drops it after the grace.
	awaitWaiters(t, nl, "d", 0)

	ok, err := f.Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, ok)
	info, err := nl.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, info.Locked, "the lock was handed to the dead waiter (token %d)", info.Token)
	owner := lock.NewOwner()
	got, err := nl.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, lease.Token+1, got.Token)
}

// A live waiter keeps its turn across a leader change: its call is sent
// again to the new leader and it gets the lock when the holder releases.
func TestLiveWaiterSurvivesLeaderChange(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l := c.leader()
	fs := c.followers()
	f, other := fs[0], fs[1]
	holder, lease := acquire(t, other, "k", time.Minute)

	waiting := acquireAsync(ctx, f, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: patience})
	awaitWaiters(t, l, "k", 1)
	c.stop(c.index(l))
	c.waitLeader()
	ok, err := other.Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, ok)
	got := await(t, waiting, "the waiter")
	require.NoError(t, got.err)
	assert.Equal(t, lease.Token+1, got.lease.Token)
}

// A waiting acquire through a follower is one request to the leader, and
// the follower keeps no waiter of its own.
func TestWaitingAcquireThroughFollowerIsOneRequest(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l, f := c.leader(), c.follower()
	holder, lease := acquire(t, l, "k", time.Minute)

	var requests atomic.Int64
	l.tr.Handle(func(ctx context.Context, body []byte) ([]byte, error) {
		if req, err := nodewire.DecodeRequest(body); err == nil && req.Kind() != nodewire.KindInfo {
			requests.Add(1)
		}
		return l.handleRPC(ctx, body)
	})
	waiting := acquireAsync(ctx, f, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: patience})
	awaitWaiters(t, l, "k", 1)
	assert.Zero(t, f.waiters.TestHooks().Parked(), "the follower keeps a waiter registry")
	ok, err := l.Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, ok)
	got := await(t, waiting, "the waiter")
	require.NoError(t, got.err)
	assert.Equal(t, lease.Token+1, got.lease.Token)
	assert.Equal(t, int64(1), requests.Load(), "requests the follower sent the leader")
}

// A client that sends the same waiting acquire again through another node
// (the same owner) while its first call is still parked keeps its place:
// the first call giving up later withdraws nothing of the second's.
func TestGivingUpOlderCallKeepsNewerClaim(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l := c.leader()
	fs := c.followers()
	holder, lease := acquire(t, l, "k", time.Minute)
	owner := lock.NewOwner()
	req := lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute, Wait: patience}

	firstCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	first := acquireAsync(firstCtx, fs[0], req)
	var firstCall any
	require.Eventually(t, func() bool { firstCall = l.parked("k", owner); return firstCall != nil },
		patience, time.Millisecond, "the first call parks")
	second := acquireAsync(ctx, fs[1], req)
	require.Eventually(t, func() bool { w := l.parked("k", owner); return w != nil && w != firstCall },
		patience, time.Millisecond, "the second call parks")
	giveUp()
	assert.ErrorIs(t, await(t, first, "the first call").err, context.Canceled)
	awaitWaiters(t, l, "k", 1)

	ok, err := l.Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, ok)
	got := await(t, second, "the second call")
	require.NoError(t, got.err)
	assert.Equal(t, lease.Token+1, got.lease.Token)
	info, err := l.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, got.lease.Token, info.Token, "the lock was taken from the newer call")
}

// parked is the waiter parked at n for (key, owner), nil if none.
func (n *Node) parked(key string, owner lock.Owner) any {
	return n.waiters.TestHooks().ParkedCall(key, fsm.Owner(owner))
}

// A waiting acquire by the owner that already holds the key is the
// idempotent repeat of the earlier grant: its lease left is what remains of
// that grant, not a fresh TTL counted from the repeat.
func TestWaitingRepeatByHolderDoesNotOverstate(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	for _, n := range []*Node{c.leader(), c.follower()} {
		owner := lock.NewOwner()
		key := "k-" + n.ID()
		const ttl = 2 * time.Second
		granted := time.Now()
		_, err := n.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: ttl})
		require.NoError(t, err)
		// Let some of the lease pass: not waiting for a condition, but
		// making the repeat come late.
		<-time.After(500 * time.Millisecond)
		sent := time.Now()
		lease, err := n.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: ttl, Wait: time.Minute})
		require.NoError(t, err)
		believed := sent.Add(lease.Remaining)
		assert.False(t, believed.After(granted.Add(ttl+50*time.Millisecond)),
			"node %s: the repeat believes the lease lasts %v past the grant's end", n.ID(), believed.Sub(granted.Add(ttl)))
	}
}

// A live waiter whose call is parked on its own node, the leader, keeps its
// turn when leadership moves away: it sends its acquire to the new leader.
func TestLiveWaiterOnLeaderSurvivesLeadershipTransfer(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l := c.leader()
	f := c.follower()
	holder, lease := acquire(t, f, "k", time.Minute)

	waiting := acquireAsync(ctx, l, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: patience})
	awaitWaiters(t, l, "k", 1)
	require.NoError(t, l.raft.LeadershipTransfer().Error())
	nl := c.waitLeader()
	require.NotSame(t, l, nl)
	// The waiter claims its place again at the new leader.
	require.Eventually(t, func() bool { return nl.sm.unclaimed() == 0 && nl.waiters.TestHooks().Parked() == 1 },
		patience, time.Millisecond, "the waiter parks at the new leader")

	ok, err := f.Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, ok)
	got := await(t, waiting, "the waiter")
	require.NoError(t, got.err)
	assert.Equal(t, lease.Token+1, got.lease.Token)
}

// A waiter through a follower is told of its grant late (the leader's
// answer is held up on the way, as when the follower is paused or the link
// is slow): the lease it reports, counted from when it called Acquire,
// still never ends after the cluster's, and is not robbed of more than the
// delay and the scheduling around it.
func TestWaiterAnsweredLateDoesNotOverstate(t *testing.T) {
	c, faults := newFaultyCluster(t, 3, func(cfg *Config) {
		// Slower than the delay below, so the held-up link starts no election.
		cfg.HeartbeatTimeout = 2 * time.Second
		cfg.ElectionTimeout = 2 * time.Second
		cfg.LeaderLeaseTimeout = time.Second
	})
	ctx := testCtx(t)
	l, f := c.leader(), c.follower()
	holder, _ := acquire(t, l, "k", time.Minute)
	const ttl = 3 * time.Second
	sent := time.Now()
	done := acquireAsync(ctx, f, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: ttl, Wait: patience})
	awaitWaiters(t, l, "k", 1)

	const delay = 700 * time.Millisecond
	faults.Delay(l.Addr(), f.Addr(), delay)
	ok, err := l.Release(ctx, "k", holder)
	granted := time.Now() // the grant was stamped before Release returned
	require.NoError(t, err)
	require.True(t, ok)

	got := await(t, done, "the waiter")
	faults.HealAll()
	require.NoError(t, got.err)
	assert.GreaterOrEqual(t, got.at.Sub(granted), delay/2, "the answer was not held up: the test shows nothing")
	believed := sent.Add(got.lease.Remaining)
	assert.False(t, believed.After(granted.Add(ttl)),
		"the waiter believes its lease lasts %v past the cluster's expiry", believed.Sub(granted.Add(ttl)))
	assert.False(t, believed.Before(granted.Add(ttl-delay-750*time.Millisecond)),
		"the waiter was robbed of %v of its lease", granted.Add(ttl).Sub(believed))
}

// A waiting acquire whose answer is lost (the leader grants it, but the
// grant never reaches the caller's node) and whose withdrawal then cannot
// be confirmed (the cancel-wait gets no answer) reports an unknown outcome,
// never "held": the owner holds the lock, and a caller told "held" would
// neither release it nor expect its next acquire to get that old grant
// back, with a token older than grants it has seen since.
func TestWaitRunOutWithUnconfirmedWithdrawalIsUnknown(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l, f := c.leader(), c.follower()
	holder, lease := acquire(t, l, "k", time.Minute)

	// The leader serves the follower's waiting acquire but its answer is
	// lost, and the follower's cancel-wait is never answered: a link that
	// delivers only one way.
	l.tr.Handle(func(rctx context.Context, body []byte) ([]byte, error) {
		req, err := nodewire.DecodeRequest(body)
		if err == nil {
			cmd, isCmd := req.(*nodewire.Command)
			switch {
			case req.Kind() == nodewire.KindWaitAcquire:
				go l.handleRPC(context.WithoutCancel(rctx), body)
				<-rctx.Done()
				return nil, rctx.Err()
			case isCmd && cmd.Cmd.Op == fsm.OpCancelWait:
				<-rctx.Done()
				return nil, rctx.Err()
			}
		}
		return l.handleRPC(rctx, body)
	})
	owner := lock.NewOwner()
	waiting := acquireAsync(ctx, f, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute, Wait: time.Second})
	awaitWaiters(t, l, "k", 1)
	ok, err := l.Release(ctx, "k", holder) // the waiter is granted
	require.NoError(t, err)
	require.True(t, ok)

	got := await(t, waiting, "the waiter")
	require.ErrorIs(t, got.err, lock.ErrUnknownOutcome, "the owner was granted token %d", lease.Token+1)
	assert.NotErrorIs(t, got.err, lock.ErrLocked)
	// It does hold the lock: its next acquire gets that grant back.
	again, err := l.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, lease.Token+1, again.Token)
}

// A caller's withdrawal that reaches the leader late (its link is slow),
// after the same owner's next acquire, through another node, was answered
// with the grant the first call left behind, does not end that lease: the
// newer call was told it holds the lock.
func TestLateWithdrawalKeepsGrantAnsweredToNewerCall(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l := c.leader()
	fs := c.followers()
	holder, lease := acquire(t, l, "k", time.Minute)

	// The leader serves the first follower's waiting acquire but its answer
	// is lost, and that follower's cancel-wait is held back, to be
	// delivered when the test says.
	late := make(chan []byte, 1)
	l.tr.Handle(func(rctx context.Context, body []byte) ([]byte, error) {
		req, err := nodewire.DecodeRequest(body)
		if err == nil {
			cmd, isCmd := req.(*nodewire.Command)
			switch {
			case req.Kind() == nodewire.KindWaitAcquire:
				go l.handleRPC(context.WithoutCancel(rctx), body)
				<-rctx.Done()
				return nil, rctx.Err()
			case isCmd && cmd.Cmd.Op == fsm.OpCancelWait:
				select {
				case late <- body:
				default:
				}
				<-rctx.Done()
				return nil, rctx.Err()
			}
		}
		return l.handleRPC(rctx, body)
	})
	owner := lock.NewOwner()
	first := acquireAsync(ctx, fs[0], lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute, Wait: time.Second})
	awaitWaiters(t, l, "k", 1)
	ok, err := l.Release(ctx, "k", holder) // the waiter is granted
	require.NoError(t, err)
	require.True(t, ok)
	require.ErrorIs(t, await(t, first, "the first call").err, lock.ErrUnknownOutcome)

	// The client repeats its acquire through the other follower: it holds.
	again, err := fs[1].Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, lease.Token+1, again.Token)
	var withdrawal []byte
	select {
	case withdrawal = <-late:
	case <-ctx.Done():
		t.Fatal("the first call sent no cancel-wait")
	}
	_, err = l.handleRPC(ctx, withdrawal) // it arrives now
	require.NoError(t, err)
	info, err := l.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked, "the late withdrawal ended the lease answered to the newer call")
	assert.Equal(t, again.Token, info.Token)

	// A withdrawal that does reach the leader in time is not confirmed
	// either: the grant was answered, and the caller learns as much.
	l.tr.Handle(l.handleRPC)
	assert.ErrorIs(t, fs[0].waiters.TestHooks().Withdraw(ctx, "k", fsm.Owner(owner)), lock.ErrUnknownOutcome)
	info, err = l.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked && info.Token == again.Token, "a withdrawal ended the lease answered to the newer call")
}
