package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/internal/errcode"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// A Store given Quotas refuses new state past them, never what
// frees or keeps state, and takes new state again once some is freed.
func TestMemoryQuotas(t *testing.T) {
	s := memstore.New(memstore.Quotas(2, 1, 1))
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	acquire := func(key string, owner lock.Owner, wait time.Duration) error {
		_, err := s.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute, Wait: wait})
		return err
	}
	a, b := lock.NewOwner(), lock.NewOwner()
	require.NoError(t, acquire("a", a, 0))
	require.NoError(t, acquire("b", b, 0))
	err := acquire("c", lock.NewOwner(), 0)
	require.ErrorIs(t, err, lock.ErrQuotaExceeded)
	assert.Equal(t, errcode.QuotaExceeded, errcode.Of(err))
	assert.Contains(t, err.Error(), "at most 2 locks")
	require.NoError(t, acquire("a", a, 0), "the holder's retry")
	_, err = s.Extend(ctx, "a", a, time.Minute)
	require.NoError(t, err)

	// One waiter fits; a second is refused; the first is served.
	queued := make(chan error, 1)
	waiter := lock.NewOwner()
	go func() { queued <- acquire("a", waiter, time.Minute) }()
	require.Eventually(t, func() bool {
		info, err := s.Inspect(ctx, "a")
		return err == nil && info.Waiters == 1
	}, 10*time.Second, time.Millisecond)
	require.ErrorIs(t, acquire("a", lock.NewOwner(), time.Minute), lock.ErrQuotaExceeded)
	released, err := s.Release(ctx, "a", a)
	require.NoError(t, err)
	require.True(t, released)
	require.NoError(t, <-queued)

	_, err = s.CreateSession(ctx, lock.SessionRequest{ID: lock.NewSessionID(), TTL: time.Minute})
	require.NoError(t, err)
	_, err = s.CreateSession(ctx, lock.SessionRequest{ID: lock.NewSessionID(), TTL: time.Minute})
	require.ErrorIs(t, err, lock.ErrQuotaExceeded)

	released, err = s.Release(ctx, "b", b)
	require.NoError(t, err)
	require.True(t, released)
	require.NoError(t, acquire("c", lock.NewOwner(), 0), "room again")
}
