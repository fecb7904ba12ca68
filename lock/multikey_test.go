package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// A LockAll handle sorts its keys, refuses a session with a clear error,
// reports a store without multi-key locks, and its handle methods act on
// the whole set.
func TestLockAllHandle(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	c := lock.New(store)

	h := c.LockAll([]string{"z", "m", "a"}, lock.TTL(time.Minute))
	assert.Equal(t, []string{"a", "m", "z"}, h.Keys())
	assert.Equal(t, "a", h.Key())
	assert.Nil(t, c.Lock("a").Keys(), "a single key's handle has no set")

	ok, err := h.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	again, err := h.TryAcquire(ctx)
	assert.ErrorIs(t, err, lock.ErrInUse)
	assert.False(t, again)
	require.NoError(t, h.Extend(ctx, lock.TTL(2*time.Minute)))
	for _, k := range []string{"a", "m", "z"} {
		info, err := c.Inspect(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, h.Token(), info.Token, k)
		assert.Greater(t, info.Remaining, time.Minute, "%s: extended with the set", k)
	}
	released, err := h.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	info, err := c.Inspect(ctx, "z")
	require.NoError(t, err)
	assert.False(t, info.Locked)

	sess, err := c.NewSession(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sess.Close(ctx) })
	_, err = c.WithSession(sess).LockAll([]string{"a", "b"}).TryAcquire(ctx)
	assert.ErrorIs(t, err, lock.ErrInvalidSession)
	assert.Contains(t, err.Error(), "cannot be bound to a session")

	_, err = lock.New(plainStore{store}).LockAll([]string{"a", "b"}).TryAcquire(ctx)
	assert.ErrorIs(t, err, errors.ErrUnsupported)

	_, err = c.LockAll(nil).TryAcquire(ctx)
	assert.ErrorIs(t, err, lock.ErrInvalidKey)
	assert.Contains(t, err.Error(), "1 to 64 keys (got 0)")
}

// plainStore hides every optional ability of the store it wraps.
type plainStore struct{ lock.Store }
