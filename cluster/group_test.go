package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// seated reports how many members of g wait with a command.
func (g *CommandGroup) seated() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seats)
}

// groupRun runs size members of a group on n: member i runs op(ctx, i)
// with its member context. The last member starts only once every other
// member that sends a command waits with it (senders of them), so that
// nothing but the group can put them in one entry: alone, each would have
// been proposed and committed long before.
func groupRun(t *testing.T, n *Node, size, senders int, op func(ctx context.Context, i int)) {
	t.Helper()
	ctx := testCtx(t)
	g := n.NewCommandGroup(ctx, size)
	var wg sync.WaitGroup
	member := func(i int) {
		mctx, done := g.Member(ctx)
		defer done()
		op(mctx, i)
	}
	for i := range size - 1 {
		wg.Go(func() { member(i) })
	}
	require.Eventually(t, func() bool { return g.seated() == senders }, patience, time.Millisecond, "members waiting with their commands")
	member(size - 1)
	wg.Wait()
}

// The commands of a group's members, sent from a follower or on the
// leader, land in one raft entry, each answered as if sent alone: grants
// with their own fencing tokens, releases of what each held, a refusal of
// a key another holds. Members that send nothing (their input refused, or
// a read first) do not hold the group up.
func TestCommandGroupSharesOneEntry(t *testing.T) {
	c := newCluster(t, 3, nil)
	leader := c.leader()
	ctx := testCtx(t)
	taken, _ := acquire(t, leader, "grp/taken", time.Minute)

	for name, n := range map[string]*Node{"follower": c.follower(), "leader": leader} {
		t.Run(name, func(t *testing.T) {
			const size = 12
			prefix := "grp/" + name + "/"
			owners := make([]lock.Owner, size)
			leases := make([]lock.Lease, size)
			errs := make([]error, size)
			var refused error
			before := leader.raft.LastIndex()
			// Members 0..8 acquire keys of their own, 9 one held by
			// another, 10 reads first, 11 sends nothing.
			groupRun(t, n, size, 10, func(ctx context.Context, i int) {
				switch {
				case i < 9:
					owners[i] = lock.NewOwner()
					leases[i], errs[i] = n.Acquire(ctx, lock.AcquireRequest{Key: fmt.Sprintf("%s%d", prefix, i), Owner: owners[i], TTL: time.Minute})
				case i == 9:
					_, refused = n.Acquire(ctx, lock.AcquireRequest{Key: "grp/taken", Owner: lock.NewOwner(), TTL: time.Minute})
				case i == 10:
					_, errs[i] = n.Inspect(ctx, "grp/taken")
				}
			})
			for i := range 9 {
				require.NoError(t, errs[i], "member %d", i)
			}
			assert.NoError(t, errs[10])
			assert.ErrorIs(t, refused, lock.ErrLocked, "the key another holds is refused, as alone")
			tokens := map[uint64]bool{}
			for i := range 9 {
				assert.False(t, tokens[leases[i].Token], "token %d granted twice", leases[i].Token)
				tokens[leases[i].Token] = true
			}
			assert.Equal(t, 1, entriesWith(t, leader, before, prefix), "entries carrying the group's acquires")

			before = leader.raft.LastIndex()
			released := make([]bool, 9)
			groupRun(t, n, 9, 8, func(ctx context.Context, i int) {
				released[i], errs[i] = n.Release(ctx, fmt.Sprintf("%s%d", prefix, i), owners[i])
			})
			for i := range 9 {
				require.NoError(t, errs[i], "member %d", i)
				assert.True(t, released[i], "member %d released its key", i)
				info, err := n.Inspect(ctx, fmt.Sprintf("%s%d", prefix, i))
				require.NoError(t, err)
				assert.False(t, info.Locked)
			}
			assert.Equal(t, 1, entriesWith(t, leader, before, prefix), "entries carrying the group's releases")
		})
	}
	ok, err := leader.Release(ctx, "grp/taken", taken)
	require.NoError(t, err)
	assert.True(t, ok)
}

// A member whose context ends while it waits for the group withdraws its
// command (it was never sent: its error does not say the outcome is
// unknown), and the group goes without it.
func TestCommandGroupMemberWithdraws(t *testing.T) {
	c := newCluster(t, 3, nil)
	n := c.follower()
	ctx := testCtx(t)
	g := n.NewCommandGroup(ctx, 3)

	gone, cancel := context.WithCancel(ctx)
	quitter, quit := g.Member(gone)
	quitDone := make(chan error, 1)
	go func() {
		_, err := n.Acquire(quitter, lock.AcquireRequest{Key: "w/quitter", Owner: lock.NewOwner(), TTL: time.Minute})
		quit()
		quitDone <- err
	}()
	stayer, stay := g.Member(ctx)
	stayDone := make(chan error, 1)
	go func() {
		_, err := n.Acquire(stayer, lock.AcquireRequest{Key: "w/stayer", Owner: lock.NewOwner(), TTL: time.Minute})
		stay()
		stayDone <- err
	}()
	require.Eventually(t, func() bool { return g.seated() == 2 }, patience, time.Millisecond)
	cancel()
	err := <-quitDone
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, lock.ErrUnknownOutcome, "withdrawn before the group went: certainly not sent")

	last, done := g.Member(ctx)
	_, err = n.Extend(last, "w/nobody", lock.NewOwner(), time.Minute)
	done()
	assert.ErrorIs(t, err, lock.ErrNotHeld)
	require.NoError(t, <-stayDone, "the others went without the member that left")

	for key, want := range map[string]bool{"w/quitter": false, "w/stayer": true} {
		info, err := n.Inspect(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, want, info.Locked, key)
	}
}

// A leader that does not know groups (an older version, mid-upgrade)
// refuses the group message as a whole, before running anything; every
// member then sends its command alone, and each is applied once.
func TestCommandGroupOlderLeader(t *testing.T) {
	spec := servers[nodewire.KindGroup]
	delete(servers, nodewire.KindGroup) // as a leader from before groups refuses kind 13
	t.Cleanup(func() { servers[nodewire.KindGroup] = spec })
	c := newCluster(t, 3, nil)
	n := c.follower()
	leader := c.leader()

	before := leader.raft.LastIndex()
	const size = 6
	owners := make([]lock.Owner, size)
	leases := make([]lock.Lease, size)
	errs := make([]error, size)
	groupRun(t, n, size, size-1, func(ctx context.Context, i int) {
		owners[i] = lock.NewOwner()
		leases[i], errs[i] = n.Acquire(ctx, lock.AcquireRequest{Key: fmt.Sprintf("old/%d", i), Owner: owners[i], TTL: time.Minute})
	})
	for i := range size {
		require.NoError(t, errs[i], "member %d", i)
		assert.NotZero(t, leases[i].Token)
	}
	assert.Equal(t, size, commandsWith(t, leader, before, "old/"), "each went alone, once")
}
