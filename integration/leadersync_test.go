package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// notGrantedWindow is how long TestLeaderCountsItselfOnlyAfterItsSync waits
// for an answer that must not come: the follower's acknowledgement reaches
// the leader within milliseconds on loopback, and a leader that counted
// its own unsynced write would answer at once.
const notGrantedWindow = 500 * time.Millisecond

// TestLeaderCountsItselfOnlyAfterItsSync: three nodes whose leader writes
// in parallel (cluster.Config.LeaderWritesInParallel), on disks that lose
// every unsynced write when the power goes. One follower is cut off and the
// leader's sync of a new grant is held open, while the other follower
// stores the grant durably: the grant is on two of three nodes but durable
// on one, short of a quorum of two, so it must not be granted. Then every
// node loses power, and the leader and the follower that never had the
// grant (a quorum) start again: everything granted before is still held
// with its token, and no token is issued twice.
//
// A leader that counted itself in the quorum before its own sync would
// grant it (the first check), and the grant would be gone after the power
// loss (the second): this is the power-loss case that a random fault hits
// only rarely, made certain.
func TestLeaderCountsItselfOnlyAfterItsSync(t *testing.T) {
	c := startMemClusterSetup(t, 3, memSetup{parallel: allParallel(3), powerLoss: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := c.leader()
	require.NotNil(t, leader, "no leader")
	before, err := leader.current().Acquire(ctx, lock.AcquireRequest{Key: "before", Owner: lock.NewOwner(), TTL: time.Hour})
	require.NoError(t, err)

	var follower, cutOff *memNode
	for _, n := range c.others(leader) {
		if follower == nil {
			follower = n
		} else {
			cutOff = n
		}
	}
	c.partition([]*memNode{cutOff}, c.others(cutOff))

	// The acquire of "before" was answered once the followers had it, and
	// the leader's own sync of it may still be to come: held, it would hold
	// the write of x too (a write first syncs the one before it), and the
	// follower would never be sent x.
	require.Eventually(t, func() bool { return !leader.disk.Unsynced() }, time.Minute, time.Millisecond,
		"the leader never synced the grant of before")
	held, release := c.holdSyncs(leader)
	defer release()
	synced := follower.disk.Synced()
	type answer struct {
		lease lock.Lease
		err   error
	}
	answered := make(chan answer, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		lease, err := leader.current().Acquire(ctx, lock.AcquireRequest{Key: "x", Owner: lock.NewOwner(), TTL: time.Hour})
		answered <- answer{lease, err}
	}()
	defer wg.Wait()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the leader never synced the grant")
	}
	require.Eventually(t, func() bool { return follower.disk.Synced() > synced }, time.Minute, time.Millisecond,
		"the follower did not store the grant durably")
	select {
	case a := <-answered:
		t.Fatalf("answered (lease %+v, error %v) while the grant was durable on one node of three", a.lease, a.err)
	case <-time.After(notGrantedWindow):
	}

	undoneBefore := c.undone.Load()
	c.losePower()
	require.Greater(t, c.undone.Load(), undoneBefore, "the power loss undid nothing: the leader's write was durable already")
	c.partition(c.nodes[:1], c.nodes[1:2], c.nodes[2:])
	release()
	var stops sync.WaitGroup
	for _, n := range c.nodes {
		stops.Add(1)
		go func() { defer stops.Done(); n.stop() }()
	}
	stops.Wait()
	a := <-answered
	c.heal()

	// The follower that holds the grant durably stays down: the other two
	// are a quorum that never had it.
	require.NoError(t, leader.start())
	require.NoError(t, cutOff.start())
	require.NoError(t, c.waitReady(ctx))
	next := c.leader().current()
	info, err := next.Inspect(ctx, "before")
	require.NoError(t, err)
	require.True(t, info.Locked, "a grant acknowledged before the power loss was lost")
	require.Equal(t, before.Token, info.Token)
	highest := before.Token
	if a.err == nil {
		info, err := next.Inspect(ctx, "x")
		require.NoError(t, err)
		require.True(t, info.Locked, "the grant of x (token %d) was acknowledged and is lost", a.lease.Token)
		require.Equal(t, a.lease.Token, info.Token)
		highest = max(highest, a.lease.Token)
	} else {
		t.Logf("the acquire of x ended with %v", a.err)
	}
	after, err := next.Acquire(ctx, lock.AcquireRequest{Key: "after", Owner: lock.NewOwner(), TTL: time.Hour})
	require.NoError(t, err)
	require.Greater(t, after.Token, highest, "a fencing token was issued again")
}
