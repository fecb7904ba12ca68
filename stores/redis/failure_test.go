package redis_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	redisstore "github.com/raftlock/raftlock/stores/redis"
)

// A server nobody listens on: every call fails with ErrUnavailable that
// names the address, and nothing panics.
func TestUnreachableServer(t *testing.T) {
	addr := "127.0.0.1:" + itoa(freePort(t))
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	st := redisstore.New(rdb, redisstore.Options{})
	t.Cleanup(func() { _ = st.Close() })
	ctx := t.Context()
	o := lock.NewOwner()
	for name, call := range map[string]func() error{
		"acquire": func() error {
			_, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: o, TTL: time.Second, Wait: time.Second})
			return err
		},
		"release": func() error { _, err := st.Release(ctx, "k", o); return err },
		"extend":  func() error { _, err := st.Extend(ctx, "k", o, time.Second); return err },
		"inspect": func() error { _, err := st.Inspect(ctx, "k"); return err },
		"session": func() error {
			_, err := st.CreateSession(ctx, lock.SessionRequest{ID: lock.NewSessionID(), TTL: time.Second})
			return err
		},
	} {
		err := call()
		require.Error(t, err, name)
		assert.ErrorIs(t, err, lock.ErrUnavailable, name)
		assert.NotErrorIs(t, err, lock.ErrUnknownOutcome, "%s: nothing was sent", name)
		assert.Contains(t, err.Error(), addr, name)
	}
}

// A wrong password: ErrUnavailable that says the credentials were refused.
func TestWrongPassword(t *testing.T) {
	srv := startServer(t, "--requirepass", "right")
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.addr(), Password: "wrong"})
	t.Cleanup(func() { _ = rdb.Close() })
	st := redisstore.New(rdb, redisstore.Options{})
	t.Cleanup(func() { _ = st.Close() })
	_, err := st.Acquire(t.Context(), lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Second})
	require.Error(t, err)
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.Contains(t, err.Error(), "refused the credentials")
	assert.Contains(t, err.Error(), "Password")
}

// The server loses every key (FLUSHALL, as an eviction or a restart
// without persistence would): the holder learns at its next extend that
// its lock is gone, a waiter is served, and the next token is still higher
// than every token issued before (the counter is floored at the server's
// clock).
func TestServerLosesKeys(t *testing.T) {
	srv := startServer(t)
	rdb := srv.client(t)
	st := redisstore.New(rdb, redisstore.Options{})
	t.Cleanup(func() { _ = st.Close() })
	ctx := t.Context()
	c := lock.New(st)
	l := c.Lock("k", lock.TTL(time.Minute))
	require.NoError(t, l.Acquire(ctx))
	before := l.Token()
	waiter := make(chan error, 1)
	go func() { waiter <- c.Lock("k", lock.TTL(time.Minute)).Acquire(ctx, lock.Wait(patience)) }()
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, "k")
		return err == nil && info.Waiters == 1
	}, patience, time.Millisecond)

	require.NoError(t, rdb.FlushAll(ctx).Err())
	assert.ErrorIs(t, l.Extend(ctx), lock.ErrNotHeld, "the holder's lock is reported lost")
	select {
	case err := <-waiter:
		require.NoError(t, err, "the waiter queues again and takes the free key")
	case <-time.After(patience):
		require.FailNow(t, "the waiter was not served after the flush")
	}
	info, err := st.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Greater(t, info.Token, before, "no token is issued twice")
}

// A server restarted with its append-only file keeps its locks, and its
// tokens go on increasing.
func TestRestartKeepsTokensIncreasing(t *testing.T) {
	srv := startServer(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := srv.client(t)
	st := redisstore.New(rdb, redisstore.Options{})
	t.Cleanup(func() { _ = st.Close() })
	ctx := t.Context()
	o := lock.NewOwner()
	held, err := st.Acquire(ctx, lock.AcquireRequest{Key: "held", Owner: o, TTL: time.Minute})
	require.NoError(t, err)
	var last uint64
	for range 3 {
		o := lock.NewOwner()
		lease, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: o, TTL: time.Minute})
		require.NoError(t, err)
		last = lease.Token
		_, err = st.Release(ctx, "k", o)
		require.NoError(t, err)
	}

	srv.restart()
	require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, patience, 5*time.Millisecond)
	lease, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	assert.Greater(t, lease.Token, last)
	extended, err := st.Extend(ctx, "held", o, time.Minute)
	require.NoError(t, err, "the lock survived the restart")
	assert.Equal(t, held.Token, extended.Token)
}

// A waiting acquire whose process stops looking (it died) is dropped from
// the queue after three heartbeats, so that the key is never handed to it.
func TestDeadWaiterIsDropped(t *testing.T) {
	srv := startServer(t)
	rdb := srv.client(t)
	const heartbeat = 50 * time.Millisecond
	st := redisstore.New(rdb, redisstore.Options{Heartbeat: heartbeat})
	t.Cleanup(func() { _ = st.Close() })
	ctx := t.Context()
	holder := lock.NewOwner()
	_, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)

	// A waiter whose connection is cut while it blocks, and that never
	// looks again: as a process that died.
	dying := goredis.NewClient(&goredis.Options{Addr: srv.addr(), MaxRetries: -1})
	dead := redisstore.New(dying, redisstore.Options{Heartbeat: heartbeat})
	done := make(chan error, 1)
	go func() {
		_, err := dead.Acquire(context.Background(), lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Hour})
		done <- err
	}()
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, "k")
		return err == nil && info.Waiters == 1
	}, patience, time.Millisecond)
	require.NoError(t, dying.Close())
	select {
	case err := <-done:
		assert.True(t, errors.Is(err, lock.ErrClosed) || errors.Is(err, lock.ErrUnavailable), "the waiter's client is closed: %v", err)
	case <-time.After(patience):
		require.FailNow(t, "the waiter did not end with its client")
	}
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, "k")
		return err == nil && info.Waiters == 0
	}, patience, time.Millisecond, "the dead waiter is dropped")
	released, err := st.Release(ctx, "k", holder)
	require.NoError(t, err)
	assert.True(t, released)
	info, err := st.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, info.Locked, "nobody was handed the key")
}

func itoa(n int) string { return strconv.Itoa(n) }

// Many more acquires wait than the client has connections: the Store
// reads every waiter's wake-up on one connection, so the pool is not
// exhausted and every waiter is handed the key in turn.
func TestWaitersShareOneConnection(t *testing.T) {
	srv := startServer(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.addr(), PoolSize: 3})
	t.Cleanup(func() { _ = rdb.Close() })
	st := redisstore.New(rdb, redisstore.Options{})
	t.Cleanup(func() { _ = st.Close() })
	ctx := t.Context()
	holder := lock.NewOwner()
	_, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)

	const n = 20
	granted := make(chan lock.Owner, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			o := lock.NewOwner()
			if _, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: o, TTL: time.Minute, Wait: patience}); err != nil {
				errs <- err
				return
			}
			granted <- o
		}()
	}
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, "k")
		return err == nil && info.Waiters == n
	}, patience, time.Millisecond, "every acquire queues")
	next := holder
	for i := range n {
		ok, err := st.Release(ctx, "k", next)
		require.NoError(t, err)
		require.True(t, ok)
		select {
		case next = <-granted:
		case err := <-errs:
			require.NoError(t, err, "waiter %d", i)
		case <-time.After(patience):
			require.FailNow(t, "a waiter was not handed the key", "after %d hand-offs", i)
		}
	}
	ok, err := st.Release(ctx, "k", next)
	require.NoError(t, err)
	assert.True(t, ok)
}

// Close ends the acquires waiting (they leave the queue) and refuses the
// calls after it with ErrClosed.
func TestClose(t *testing.T) {
	srv := startServer(t)
	rdb := srv.client(t)
	other := redisstore.New(rdb, redisstore.Options{})
	t.Cleanup(func() { _ = other.Close() })
	st := redisstore.New(rdb, redisstore.Options{})
	ctx := t.Context()
	holder := lock.NewOwner()
	_, err := other.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Hour})
		done <- err
	}()
	require.Eventually(t, func() bool {
		info, err := other.Inspect(ctx, "k")
		return err == nil && info.Waiters == 1
	}, patience, time.Millisecond)

	require.NoError(t, st.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, lock.ErrClosed)
	case <-time.After(patience):
		require.FailNow(t, "the waiting acquire did not end with Close")
	}
	info, err := other.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Zero(t, info.Waiters, "the waiter left the queue")
	_, err = st.Inspect(ctx, "k")
	assert.ErrorIs(t, err, lock.ErrClosed)
	assert.NoError(t, st.Close(), "Close is idempotent")
}

// A store pointed at a replica (after a failover went the other way, or a
// wrong address) is refused every write: ErrUnavailable that says so.
func TestReplicaRefuses(t *testing.T) {
	primary := startServer(t)
	replica := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	st := redisstore.New(replica.client(t), redisstore.Options{})
	t.Cleanup(func() { _ = st.Close() })
	_, err := st.Acquire(t.Context(), lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Second})
	require.Error(t, err)
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.Contains(t, err.Error(), "READONLY")
	assert.Contains(t, err.Error(), replica.addr())
}
