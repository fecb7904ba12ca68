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

// keysOf is the keys of a listing, in its order.
func keysOf(locks []lock.LockInfo) []string {
	var out []string
	for _, l := range locks {
		out = append(out, l.Key)
	}
	return out
}

func TestListThroughLeaderAndFollower(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader, follower := c.leader(), c.follower()

	tokens := map[string]uint64{}
	for _, key := range []string{"jobs/b", "jobs/a", "other/x", "jobs/c"} {
		_, lease := acquire(t, follower, key, time.Minute)
		tokens[key] = lease.Token
	}
	// A lease that runs out is not listed, whether or not a tick removed it yet.
	_, short := acquire(t, leader, "jobs/short", lock.MinTTL)
	require.NotZero(t, short.Token)
	require.Eventually(t, func() bool {
		info, err := leader.Inspect(ctx, "jobs/short")
		return err == nil && !info.Locked
	}, patience, 2*time.Millisecond, "the short lease runs out")
	// A waiter shows in its key's count.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waiting := acquireAsync(waitCtx, follower, lock.AcquireRequest{Key: "jobs/b", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
	t.Cleanup(func() { stopWaiting(); <-waiting })
	awaitWaiters(t, leader, "jobs/b", 1)

	for _, n := range []*Node{leader, follower} {
		t.Run(n.ID(), func(t *testing.T) {
			all, err := n.List(ctx, lock.ListRequest{})
			require.NoError(t, err)
			assert.Equal(t, []string{"jobs/a", "jobs/b", "jobs/c", "other/x"}, keysOf(all), "held keys in byte order, the expired one left out")
			for _, l := range all {
				assert.True(t, l.Locked, l.Key)
				assert.Equal(t, tokens[l.Key], l.Token, l.Key)
				assert.Positive(t, l.Remaining, l.Key)
				assert.LessOrEqual(t, l.Remaining, time.Minute, l.Key)
				wantWaiters := 0
				if l.Key == "jobs/b" {
					wantWaiters = 1
				}
				assert.Equal(t, wantWaiters, l.Waiters, l.Key)
			}

			for _, tc := range []struct {
				req  lock.ListRequest
				want []string
			}{
				{lock.ListRequest{Prefix: "jobs/"}, []string{"jobs/a", "jobs/b", "jobs/c"}},
				{lock.ListRequest{Prefix: "jobs/", After: "jobs/a"}, []string{"jobs/b", "jobs/c"}},
				{lock.ListRequest{Prefix: "jobs/", After: "jobs/"}, []string{"jobs/a", "jobs/b", "jobs/c"}},
				{lock.ListRequest{Prefix: "jobs/", Limit: 2}, []string{"jobs/a", "jobs/b"}},
				{lock.ListRequest{Prefix: "jobs/", After: "jobs/a", Limit: 1}, []string{"jobs/b"}},
				{lock.ListRequest{After: "jobs/c"}, []string{"other/x"}},
				{lock.ListRequest{Prefix: "none/"}, nil},
				{lock.ListRequest{After: "other/x"}, nil},
			} {
				got, err := n.List(ctx, tc.req)
				require.NoError(t, err, "%+v", tc.req)
				assert.Equal(t, tc.want, keysOf(got), "%+v", tc.req)
			}

			_, err = n.List(ctx, lock.ListRequest{Limit: -1})
			assert.ErrorIs(t, err, lock.ErrInvalidList)
		})
	}

	// A stale listing is this node's own view: it catches up with the leader's.
	require.Eventually(t, func() bool {
		stale, err := follower.ListStale(lock.ListRequest{Prefix: "jobs/"})
		return err == nil && assert.ObjectsAreEqual([]string{"jobs/a", "jobs/b", "jobs/c"}, keysOf(stale))
	}, patience, 2*time.Millisecond)
}

// A listing longer than one forwarded page is read page by page.
func TestListPagesThroughFollower(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader, follower := c.leader(), c.follower()

	const n = nodewire.MaxListPage + 50
	holdKeys(t, leader, n)

	all, err := follower.List(ctx, lock.ListRequest{})
	require.NoError(t, err)
	require.Len(t, all, n, "every key, over two pages")
	for i, l := range all {
		assert.Equal(t, fmt.Sprintf("k%05d", i), l.Key)
	}

	some, err := follower.List(ctx, lock.ListRequest{After: "k00010", Limit: nodewire.MaxListPage + 5})
	require.NoError(t, err)
	require.Len(t, some, nodewire.MaxListPage+5, "a limit beyond one page")
	assert.Equal(t, "k00011", some[0].Key)
	assert.Equal(t, fmt.Sprintf("k%05d", 10+nodewire.MaxListPage+5), some[len(some)-1].Key)

	onLeader, err := leader.List(ctx, lock.ListRequest{Prefix: "k04"})
	require.NoError(t, err)
	assert.Len(t, onLeader, n-4000, "k04000 and on: one read on the leader, no paging")
}

func TestCheckPageRefusesWhatWasNotAsked(t *testing.T) {
	info := func(keys ...string) nodewire.ListPage {
		var p nodewire.ListPage
		for _, k := range keys {
			p.Locks = append(p.Locks, lock.LockInfo{Key: k, KeyInfo: lock.KeyInfo{Locked: true}})
		}
		return p
	}
	assert.NoError(t, checkPage(new(info("a/1", "a/2")), "a/", "", 2))
	assert.NoError(t, checkPage(new(info()), "a/", "a/9", 0))
	for name, tc := range map[string]struct {
		page          nodewire.ListPage
		prefix, after string
		limit         int
	}{
		"too many":       {info("a", "b", "c"), "", "", 2},
		"out of order":   {info("b", "a"), "", "", 0},
		"repeated":       {info("a", "a"), "", "", 0},
		"not after":      {info("a"), "", "a", 0},
		"outside prefix": {info("b/1"), "a/", "", 0},
	} {
		assert.ErrorIs(t, checkPage(&tc.page, tc.prefix, tc.after, tc.limit), ErrBadRequest, name)
	}
}

// holdKeys takes k00000, k00001, ... k<n-1> on s for a minute, from many
// goroutines so that they share raft entries.
func holdKeys(t testing.TB, s lock.Store, n int) {
	t.Helper()
	ctx := testCtx(t)
	keys := make(chan string)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 32 {
		wg.Go(func() {
			for key := range keys {
				if _, err := s.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: lock.NewOwner(), TTL: time.Minute}); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range n {
		keys <- fmt.Sprintf("k%05d", i)
	}
	close(keys)
	wg.Wait()
	select {
	case err := <-errs:
		require.NoError(t, err)
	default:
	}
}

// One op is one List over 10,000 held keys: a page of 100 (what a status
// page asks), or all of them (three forwarded pages through a follower).
func BenchmarkList(b *testing.B) {
	c := newCluster(b, 3, nil)
	leader, follower := c.leader(), c.follower()
	holdKeys(b, leader, 10_000)
	for _, bc := range []struct {
		name string
		node *Node
		req  lock.ListRequest
	}{
		{"leader/page100", leader, lock.ListRequest{After: "k05000", Limit: 100}},
		{"follower/page100", follower, lock.ListRequest{After: "k05000", Limit: 100}},
		{"leader/all", leader, lock.ListRequest{}},
		{"follower/all", follower, lock.ListRequest{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				if _, err := bc.node.List(ctx, bc.req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
