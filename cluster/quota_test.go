package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/errcode"
	"github.com/raftlock/raftlock/lock"
)

// A cluster at a quota refuses new state with lock.ErrQuotaExceeded, on
// the leader and through a follower alike, and never what frees or keeps
// state; once state is freed the same request succeeds.
func TestQuotas(t *testing.T) {
	const maxLocks, maxSessions, maxWaiters = 10, 2, 2
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.MaxLocks, cfg.MaxSessions, cfg.MaxTotalWaiters = maxLocks, maxSessions, maxWaiters
	})
	ctx := testCtx(t)
	leader, follower := c.leader(), c.follower()
	isQuota := func(t *testing.T, err error, field string, limit int) {
		t.Helper()
		require.ErrorIs(t, err, lock.ErrQuotaExceeded)
		assert.Equal(t, errcode.QuotaExceeded, errcode.Of(err))
		assert.Contains(t, err.Error(), field)
		assert.Contains(t, err.Error(), fmt.Sprintf("at most %d ", limit))
		assert.Equal(t, 1, strings.Count(err.Error(), lock.ErrQuotaExceeded.Error()), "said once: %v", err)
	}

	t.Run("locks", func(t *testing.T) {
		owners := make([]lock.Owner, maxLocks)
		for i := range owners {
			owners[i], _ = acquire(t, follower, fmt.Sprintf("q/%d", i), time.Minute)
		}
		for _, n := range []*Node{follower, leader} {
			_, err := n.Acquire(ctx, lock.AcquireRequest{Key: "q/new", Owner: lock.NewOwner(), TTL: time.Minute})
			isQuota(t, err, "MaxLocks", maxLocks)
			assert.Contains(t, err.Error(), "-max-locks")
			_, err = n.Acquire(ctx, lock.AcquireRequest{Key: "q/new", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
			isQuota(t, err, "MaxLocks", maxLocks)
			_, err = n.AcquireAll(ctx, lock.AcquireRequest{Key: "q/new", Keys: []string{"q/new", "q/new2"}, Owner: lock.NewOwner(), TTL: time.Minute})
			isQuota(t, err, "MaxLocks", maxLocks)
		}
		info, err := leader.Inspect(ctx, "q/new")
		require.NoError(t, err)
		assert.False(t, info.Locked, "a refused acquire changed nothing")

		// What keeps or frees state goes on.
		lease, err := follower.Acquire(ctx, lock.AcquireRequest{Key: "q/0", Owner: owners[0], TTL: time.Minute})
		require.NoError(t, err, "the holder's retry")
		_, err = follower.Extend(ctx, "q/0", owners[0], 2*time.Minute)
		require.NoError(t, err)
		_, err = follower.Acquire(ctx, lock.AcquireRequest{Key: "q/0", Owner: lock.NewOwner(), TTL: time.Minute})
		var held *lock.HeldError
		require.ErrorAs(t, err, &held, "another owner finds the key held, not a quota")
		assert.Equal(t, lease.Token, held.Token)
		_, err = leader.ForceRelease(ctx, "q/1")
		require.NoError(t, err)
		released, err := follower.Release(ctx, "q/2", owners[2])
		require.NoError(t, err)
		require.True(t, released)

		// Two keys freed: a new one fits, a multi-key acquire of two new keys not.
		_, err = follower.AcquireAll(ctx, lock.AcquireRequest{Key: "q/a", Keys: []string{"q/a", "q/b", "q/c"}, Owner: lock.NewOwner(), TTL: time.Minute})
		isQuota(t, err, "MaxLocks", maxLocks)
		newOwner, _ := acquire(t, follower, "q/new", time.Minute)

		st := leader.Stats().Quotas.Locks
		assert.Equal(t, maxLocks, st.Limit)
		assert.Equal(t, maxLocks-1, st.Used)
		assert.EqualValues(t, 7, st.Refused, "refusals counted by the leader, which refuses")
		assert.Eventually(t, func() bool { return follower.Stats().Quotas.Locks.Used == maxLocks-1 }, patience, 5*time.Millisecond,
			"a follower counts its own state")

		for i := 3; i < maxLocks; i++ {
			_, err := follower.Release(ctx, fmt.Sprintf("q/%d", i), owners[i])
			require.NoError(t, err)
		}
		_, err = follower.Release(ctx, "q/0", owners[0])
		require.NoError(t, err)
		_, err = follower.Release(ctx, "q/new", newOwner)
		require.NoError(t, err)
	})

	t.Run("semaphore holds", func(t *testing.T) {
		sem := func(owner lock.Owner) error {
			_, err := follower.Acquire(ctx, lock.AcquireRequest{Key: "sem", Owner: owner, TTL: time.Minute, Kind: lock.KindSemaphore, Limit: 2 * maxLocks})
			return err
		}
		owners := make([]lock.Owner, maxLocks)
		for i := range owners {
			owners[i] = lock.NewOwner()
			require.NoError(t, sem(owners[i]), "hold %d of a semaphore with room", i)
		}
		isQuota(t, sem(lock.NewOwner()), "MaxLocks", maxLocks)
		require.NoError(t, sem(owners[0]), "a holder's retry")
		assert.Equal(t, maxLocks, leader.Stats().Quotas.Locks.Used, "each hold is a lock")
		_, err := follower.Release(ctx, "sem", owners[0])
		require.NoError(t, err)
		owners[0] = lock.NewOwner()
		require.NoError(t, sem(owners[0]), "room again")
		for _, o := range owners {
			_, err := follower.Release(ctx, "sem", o)
			require.NoError(t, err)
		}
	})

	t.Run("sessions", func(t *testing.T) {
		var ids []lock.SessionID
		for range maxSessions {
			id := lock.NewSessionID()
			_, err := follower.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: time.Minute})
			require.NoError(t, err)
			ids = append(ids, id)
		}
		extra := lock.NewSessionID()
		for _, n := range []*Node{follower, leader} {
			_, err := n.CreateSession(ctx, lock.SessionRequest{ID: extra, TTL: time.Minute})
			isQuota(t, err, "MaxSessions", maxSessions)
			assert.Contains(t, err.Error(), "-max-sessions")
		}
		_, err := follower.CreateSession(ctx, lock.SessionRequest{ID: ids[0], TTL: time.Minute})
		require.NoError(t, err, "a repeated create of a session that exists")
		_, err = follower.RenewSession(ctx, ids[0])
		require.NoError(t, err)
		destroyed, err := follower.DestroySession(ctx, ids[1])
		require.NoError(t, err)
		require.True(t, destroyed)
		_, err = follower.CreateSession(ctx, lock.SessionRequest{ID: extra, TTL: time.Minute})
		require.NoError(t, err, "room again")
		assert.Equal(t, QuotaUsage{Limit: maxSessions, Used: maxSessions, Refused: 2}, leader.Stats().Quotas.Sessions)
		for _, id := range []lock.SessionID{ids[0], extra} {
			_, err := follower.DestroySession(ctx, id)
			require.NoError(t, err)
		}
	})

	t.Run("waiters", func(t *testing.T) {
		holder, _ := acquire(t, follower, "w", time.Minute)
		type result struct {
			owner lock.Owner
			err   error
		}
		results := make(chan result, maxWaiters+1)
		var wg sync.WaitGroup
		defer wg.Wait()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// wait queues a new owner for "w" through node i and waits until the
		// leader counts queued callers.
		wait := func(i, queued int) lock.Owner {
			o := lock.NewOwner()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.nodes[i%len(c.nodes)].Acquire(wctx, lock.AcquireRequest{Key: "w", Owner: o, TTL: time.Minute, Wait: time.Minute})
				results <- result{o, err}
			}()
			require.Eventually(t, func() bool {
				info, err := leader.Inspect(ctx, "w")
				return err == nil && info.Waiters == queued
			}, patience, 5*time.Millisecond)
			return o
		}
		waiters := []lock.Owner{wait(0, 1), wait(1, 2)}
		for _, n := range []*Node{follower, leader} {
			_, err := n.Acquire(ctx, lock.AcquireRequest{Key: "w", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
			isQuota(t, err, "MaxTotalWaiters", maxWaiters)
			assert.Contains(t, err.Error(), "-max-total-waiters")
		}
		_, err := follower.Acquire(ctx, lock.AcquireRequest{Key: "w", Owner: lock.NewOwner(), TTL: time.Minute})
		var held *lock.HeldError
		require.ErrorAs(t, err, &held, "an acquire that does not wait adds no waiter")

		// The queued waiters are served in turn; a hand-off makes room.
		prev := holder
		for i := range 3 {
			_, err = follower.Release(ctx, "w", prev)
			require.NoError(t, err)
			got := <-results
			require.NoError(t, got.err)
			assert.Equal(t, waiters[i], got.owner)
			if i == 0 {
				waiters = append(waiters, wait(2, 2))
			}
			prev = got.owner
		}
		_, err = follower.Release(ctx, "w", prev)
		require.NoError(t, err)
		assert.EqualValues(t, 2, leader.Stats().Quotas.Waiters.Refused)
	})
}

func TestQuotaConfig(t *testing.T) {
	for _, field := range []string{"MaxLocks", "MaxSessions", "MaxTotalWaiters"} {
		for _, v := range []int{-2, maxQuota + 1} {
			cfg := testConfig(t, "n")
			cfg.Bootstrap = true
			switch field {
			case "MaxLocks":
				cfg.MaxLocks = v
			case "MaxSessions":
				cfg.MaxSessions = v
			default:
				cfg.MaxTotalWaiters = v
			}
			err := cfg.Validate()
			var ce *ConfigError
			require.ErrorAs(t, err, &ce, "%s %d", field, v)
			assert.Equal(t, field, ce.Field)
			assert.Contains(t, err.Error(), fmt.Sprint(v))
		}
	}
	cfg := testConfig(t, "n")
	cfg.Bootstrap = true
	cfg.MaxLocks, cfg.MaxSessions, cfg.MaxTotalWaiters = Unlimited, 0, maxQuota
	require.NoError(t, cfg.Validate())
	q := newQuotas(cfg)
	assert.False(t, q.locks.limited)
	assert.Equal(t, QuotaUsage{Used: 5}, q.locks.usage(5), "unlimited reads as limit 0")
	assert.Equal(t, DefaultMaxSessions, q.sessions.max)
	assert.Equal(t, maxQuota, q.waiters.max)
}

// A client refused in a loop makes one warning per quotaLogEvery, which
// counts the refusals it stands for.
func TestQuotaWarningIsRateLimited(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	n := &Node{log: hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{w: &out, mu: &mu}, Level: hclog.Warn})}
	q := newQuotas(Config{MaxLocks: 1})
	cmd := fsm.Command{Op: fsm.OpAcquire, Key: "k"}
	for range 100 {
		q.locks.warn(n, errors.New("refused"), cmd)
	}
	mu.Lock()
	assert.Equal(t, 1, strings.Count(out.String(), "quota is reached"), out.String())
	mu.Unlock()
	q.locks.mu.Lock()
	q.locks.lastLog = q.locks.lastLog.Add(-quotaLogEvery)
	q.locks.mu.Unlock()
	q.locks.warn(n, errors.New("refused"), cmd)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 2, strings.Count(out.String(), "quota is reached"), out.String())
	assert.Contains(t, out.String(), "refused=100", "the second line counts the refusals since the first")
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Waiters queued up to the quota keep their places across a leader
// change: each sends its acquire again to the new leader, which claims
// the place rather than refusing it, and serves them in order; a new
// waiter is still refused there.
func TestQuotaKeepsQueuedWaitersAcrossLeaderChange(t *testing.T) {
	const maxWaiters = 2
	c := newCluster(t, 3, func(cfg *Config) { cfg.MaxTotalWaiters = maxWaiters })
	ctx := testCtx(t)
	old := c.leader()
	var others []*Node
	for _, n := range c.nodes {
		if n != old {
			others = append(others, n)
		}
	}
	holder, _ := acquire(t, others[0], "k", time.Minute)
	type result struct {
		owner lock.Owner
		err   error
	}
	results := make(chan result, maxWaiters)
	var wg sync.WaitGroup
	defer wg.Wait()
	var waiters []lock.Owner
	for i := range maxWaiters {
		o := lock.NewOwner()
		waiters = append(waiters, o)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := others[i].Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: o, TTL: time.Minute, Wait: time.Minute})
			results <- result{o, err}
		}()
		require.Eventually(t, func() bool {
			info, err := others[0].Inspect(ctx, "k")
			return err == nil && info.Waiters == i+1
		}, patience, 5*time.Millisecond)
	}

	c.stop(c.index(old))
	leader := c.waitLeader()
	require.NotSame(t, old, leader)
	// The waiters claim their places again at the new leader (a parked
	// call re-sent), and a newcomer is refused there.
	_, err := leader.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
	require.ErrorIs(t, err, lock.ErrQuotaExceeded)
	require.Eventually(t, func() bool { return leader.sm.unclaimed() == 0 }, patience, 5*time.Millisecond,
		"both waiters claimed their places at the new leader")

	prev := holder
	for i := range maxWaiters {
		_, err := leader.Release(ctx, "k", prev)
		require.NoError(t, err)
		got := <-results
		require.NoError(t, got.err)
		assert.Equal(t, waiters[i], got.owner, "served in order")
		prev = got.owner
	}
	_, err = leader.Release(ctx, "k", prev)
	require.NoError(t, err)
}
