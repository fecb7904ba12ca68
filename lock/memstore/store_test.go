package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/locktest"
	"github.com/raftlock/raftlock/lock/memstore"
)

// patience bounds how long a test waits for what must happen.
const patience = 10 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*patience)
	t.Cleanup(cancel)
	return ctx
}

func newMemoryStore(t *testing.T) lock.Store {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestMemoryStore(t *testing.T) {
	locktest.TestStore(t, newMemoryStore)
}

func TestMemoryStoreClose(t *testing.T) {
	ctx := testCtx(t)
	st := memstore.New()
	holder := lock.NewOwner()
	_, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
		done <- err
	}()
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, "k")
		return err == nil && info.Waiters == 1
	}, patience, time.Millisecond)

	require.NoError(t, st.Close())
	assert.ErrorIs(t, <-done, lock.ErrClosed, "a waiter is woken by Close")
	require.NoError(t, st.Close(), "Close is idempotent")
	_, err = st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute})
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = st.Release(ctx, "k", holder)
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = st.Extend(ctx, "k", holder, time.Minute)
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = st.Inspect(ctx, "k")
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = st.List(ctx, lock.ListRequest{})
	assert.ErrorIs(t, err, lock.ErrClosed)
}

// A waiter granted after queueing is told a lease counted from when its
// acquire reached the store, so its deadline is never later than the lease's.
func TestMemoryStoreWaiterLeaseIsConservative(t *testing.T) {
	ctx := testCtx(t)
	st := newMemoryStore(t)
	holder := lock.NewOwner()
	_, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: 30 * time.Millisecond})
	require.NoError(t, err)
	sent := time.Now()
	lease, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: patience})
	require.NoError(t, err)
	info, err := st.Inspect(ctx, "k")
	require.NoError(t, err)
	deadline := sent.Add(lease.Remaining)
	assert.LessOrEqual(t, time.Until(deadline), info.Remaining, "the waiter's deadline comes before the store's")
	assert.Greater(t, lease.Remaining, time.Minute-time.Second, "but not much before: the wait is not charged to the lease")
}
