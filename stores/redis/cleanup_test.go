package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	redisstore "github.com/raftlock/raftlock/stores/redis"
)

// After locks of every kind, waits, sessions and sets come and go, every
// key the store leaves in Redis expires by itself, but for the token
// counter, the change index, the change log and the index of keys with
// state; and a key Redis expired leaves that index when a listing meets it.
func TestNothingOutlivesItsUse(t *testing.T) {
	srv := startServer(t)
	rdb := srv.client(t)
	st := redisstore.New(rdb, redisstore.Options{})
	t.Cleanup(func() { _ = st.Close() })
	ctx := t.Context()
	c := lock.New(st)

	sess, err := c.NewSession(ctx, lock.SessionTTL(time.Minute))
	require.NoError(t, err)
	bound := c.WithSession(sess).Lock("bound")
	require.NoError(t, bound.Acquire(ctx))
	set := c.LockAll([]string{"a", "b"}, lock.TTL(time.Minute))
	require.NoError(t, set.Acquire(ctx))
	sem := c.Semaphore("sem", 2, lock.TTL(time.Minute))
	require.NoError(t, sem.Acquire(ctx))
	holder := c.Lock("k", lock.TTL(time.Minute))
	require.NoError(t, holder.Acquire(ctx))
	waitCtx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { waited <- c.Lock("k").Acquire(waitCtx, lock.Wait(time.Hour)) }()
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, "k")
		return err == nil && info.Waiters == 1
	}, patience, time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-waited, context.Canceled)

	for _, l := range []*lock.Lock{set, sem, holder} {
		ok, err := l.Release(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.NoError(t, sess.Close(ctx))
	// A session left to expire, with a lock and a wait bound to it.
	left, err := c.NewSession(ctx, lock.SessionTTL(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = left.Close(context.Background()) })
	leftLock := c.WithSession(left).Lock("left")
	require.NoError(t, leftLock.Acquire(ctx))
	_, err = st.RenewSession(ctx, left.ID())
	require.NoError(t, err)

	keys, err := rdb.Keys(ctx, redisstore.DefaultPrefix+"*").Result()
	require.NoError(t, err)
	lasting := map[string]bool{}
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		if ttl < 0 {
			lasting[k] = true
		}
	}
	assert.Equal(t, map[string]bool{
		redisstore.DefaultPrefix + "token": true,
		redisstore.DefaultPrefix + "ver":   true,
		redisstore.DefaultPrefix + "log":   true,
		redisstore.DefaultPrefix + "idx":   true, // names "left", held
	}, lasting, "keys without an expiry")

	// A held key Redis expired (as it does a minute after every deadline
	// in it has passed) leaves the index at the next listing.
	_, err = st.Acquire(ctx, lock.AcquireRequest{Key: "gone", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, redisstore.DefaultPrefix+"k:gone").Err())
	locks, err := st.List(ctx, lock.ListRequest{Prefix: "gone"})
	require.NoError(t, err)
	assert.Empty(t, locks)
	indexed, err := rdb.ZRange(ctx, redisstore.DefaultPrefix+"idx", 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"left"}, indexed, "the expired key left the index")
}
