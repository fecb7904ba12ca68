package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// Requests that a follower forwarded to the leader just before the leader
// froze (SIGSTOP: a GC pause or a stalled VM) are sent to the next leader as
// soon as it is elected, with the same owner, and answered by it within
// about an election — not after the request timeout (10s), which the old
// forwarding waited out before answering "outcome unknown". When the old
// leader wakes up to the requests it was sent, nothing changes: each took
// effect once.
func TestForwardedRequestsSurviveAFrozenLeader(t *testing.T) {
	c := startProcCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := c.leader(ctx)
	require.NotNil(t, l)
	var f *procNode
	for _, n := range c.nodes {
		if n != l {
			f = n
			break
		}
	}
	ownerR := lock.NewOwner()
	_, err := f.client.Acquire(ctx, lock.AcquireRequest{Key: "release-me", Owner: ownerR, TTL: time.Minute})
	require.NoError(t, err)
	ownerE := lock.NewOwner()
	leaseE, err := f.client.Acquire(ctx, lock.AcquireRequest{Key: "extend-me", Owner: ownerE, TTL: time.Minute})
	require.NoError(t, err)

	require.True(t, l.pause())
	t.Cleanup(l.resume)
	// The follower notices nothing for a heartbeat timeout (500ms): these
	// go to the frozen leader.
	start := time.Now()
	ownerA := lock.NewOwner()
	var (
		wg       sync.WaitGroup
		lease    lock.Lease
		released bool
		extended lock.Lease
		info     lock.KeyInfo
		errs     [4]error
		took     [4]time.Duration
	)
	run := func(i int, call func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = call()
			took[i] = time.Since(start)
		}()
	}
	run(0, func() (err error) {
		lease, err = f.client.Acquire(ctx, lock.AcquireRequest{Key: "acquire-me", Owner: ownerA, TTL: time.Minute})
		return err
	})
	run(1, func() (err error) { released, err = f.client.Release(ctx, "release-me", ownerR); return err })
	run(2, func() (err error) {
		extended, err = f.client.Extend(ctx, "extend-me", ownerE, 2*time.Minute)
		return err
	})
	run(3, func() (err error) { info, err = f.client.Inspect(ctx, "extend-me"); return err })
	wg.Wait()

	for i, what := range []string{"acquire", "release", "extend", "inspect"} {
		require.NoError(t, errs[i], what)
		// Heartbeat timeout plus an election: about 1-2.5s with the agent's
		// 500ms timeouts; far from the 10s request timeout.
		assert.Less(t, took[i], 5*time.Second, "%s answered after %v", what, took[i])
		t.Logf("%s answered after %v", what, took[i])
	}
	assert.True(t, released)
	assert.Equal(t, leaseE.Token, extended.Token)
	assert.True(t, info.Locked)
	assert.Equal(t, leaseE.Token, info.Token)
	assert.Greater(t, lease.Token, leaseE.Token)

	// The old leader wakes up and reads what it was sent while frozen.
	l.resume()
	require.NoError(t, c.waitReady(ctx))
	again, err := f.client.Acquire(ctx, lock.AcquireRequest{Key: "acquire-me", Owner: ownerA, TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, lease.Token, again.Token, "granted once: the retry answered the same grant")
	for _, n := range c.nodes {
		info, err := n.client.Inspect(ctx, "release-me")
		require.NoError(t, err)
		assert.False(t, info.Locked, "%s: released once and for all", n.id)
		info, err = n.client.Inspect(ctx, "acquire-me")
		require.NoError(t, err)
		assert.Equal(t, lease.Token, info.Token, "%s", n.id)
	}
	_, err = f.client.Acquire(ctx, lock.AcquireRequest{Key: "acquire-me", Owner: lock.NewOwner(), TTL: time.Minute})
	var held *lock.HeldError
	assert.ErrorAs(t, err, &held, "another owner cannot take it")
}

// With no leader (two of three agents down), a call answers 503 unavailable
// saying there is no leader once an election has had -leader-wait (2s) to
// end, and an acquire that waits 3s once its wait is over: not after the
// request timeout (10s), as before.
func TestNoLeaderAnswersUnavailableFast(t *testing.T) {
	c := startProcCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := c.nodes[0]
	for _, n := range c.nodes[1:] {
		n.kill()
	}
	// Raft on s gives up on the others within a heartbeat timeout or two
	// (500ms each); the call waits 2s more for a leader.
	for _, tc := range []struct {
		wait, most time.Duration
	}{{0, 4 * time.Second}, {3 * time.Second, 5 * time.Second}} {
		start := time.Now()
		_, err := s.client.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: tc.wait})
		took := time.Since(start)
		assert.ErrorIs(t, err, lock.ErrUnavailable, "wait %v", tc.wait)
		assert.ErrorContains(t, err, "no leader", "wait %v", tc.wait)
		assert.GreaterOrEqual(t, took, tc.wait)
		assert.Less(t, took, tc.most, "wait %v", tc.wait)
		t.Logf("acquire with wait %v: %v after %v", tc.wait, err, took)
	}
}

// A lease keeps counting down while the cluster has no quorum: two of three
// agents paused (SIGSTOP) for half the lease, so the leader steps down and
// a new term begins once they return. The lease ends at about its holder's
// deadline, never before; before, the log clock stood still through the
// outage and the lease ended that much later.
func TestLeaseCountsDownWhileNoQuorum(t *testing.T) {
	c := startProcCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := c.leader(ctx)
	require.NotNil(t, l)

	const ttl = 10 * time.Second
	sent := time.Now()
	lease, err := l.client.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: ttl})
	require.NoError(t, err)
	deadline := sent.Add(lease.Remaining)
	// Each node counts the outage from when it applied the grant.
	st, err := l.client.Cluster(ctx)
	require.NoError(t, err)
	require.NoError(t, pollUntil(ctx, 10*time.Millisecond, "every node applies the grant", func(ctx context.Context) error {
		for _, n := range c.nodes {
			if ns, err := n.client.Cluster(ctx); err != nil || ns.AppliedIndex < st.AppliedIndex {
				return fmt.Errorf("%s has not applied index %d", n.id, st.AppliedIndex)
			}
		}
		return nil
	}))

	var paused []*procNode
	for _, n := range c.nodes {
		if n != l {
			require.True(t, n.pause())
			t.Cleanup(n.resume)
			paused = append(paused, n)
		}
	}
	select { // the outage: no quorum for half the lease
	case <-time.After(ttl / 2):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	for _, n := range paused {
		n.resume()
	}
	require.NoError(t, c.waitReady(ctx))
	require.True(t, time.Now().Before(deadline), "the test needs a leader before the lease ends")

	var ended time.Time
	require.NoError(t, pollUntil(ctx, 20*time.Millisecond, "the lease ends", func(ctx context.Context) error {
		info, err := l.client.Inspect(ctx, "k")
		answered := time.Now()
		if err != nil {
			return err
		}
		if info.Locked {
			assert.False(t, answered.Add(info.Remaining).Before(deadline), "the lease would end before its holder's deadline")
			return errors.New("still held")
		}
		ended = answered
		return nil
	}))
	assert.False(t, ended.Before(deadline), "the lease ended %v before its holder's deadline", deadline.Sub(ended))
	assert.Less(t, ended.Sub(deadline), 2*time.Second, "the lease ended %v after its holder's deadline: the outage was added", ended.Sub(deadline))
	t.Logf("the lease ended %v after its holder's deadline", ended.Sub(deadline))
}
