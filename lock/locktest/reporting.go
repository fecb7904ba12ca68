package locktest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// runReportingTests checks that what a store reports about a key that
// nobody holds but nobody may take tells the truth: a semaphore slot a
// lock-delay keeps, a key reserved for a waiting multi-key acquire, and a
// multi-key handle carried to another process by Serialize and Restore.
func (s *suite) runReportingTests(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Report/LockDelaySlot", s.testReportLockDelaySlot},
		{"Report/ReservedRefusal", s.testReportReservedRefusal},
		{"Report/MultiKeyRestore", s.testReportMultiKeyRestore},
	} {
		t.Run(tc.name, tc.run)
	}
}

// A semaphore slot whose session expired with a lock-delay is listed among
// the key's holds as Delayed (nobody's, no metadata), beside the live
// holds, until the delay runs out.
func (s *suite) testReportLockDelaySlot(t *testing.T) {
	st, ss := s.sessionStore(t)
	ctx := s.ctx(t)
	id := lock.NewSessionID()
	_, err := ss.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: s.ShortTTL, LockDelay: 8 * s.ShortTTL})
	require.NoError(t, err)
	k := key(t, "sem")
	live := semReq(k, 3)
	live.Metadata = "live"
	liveLease := grab(t, ctx, st, live)
	gone := semReq(k, 3)
	gone.TTL, gone.Session, gone.Metadata = 0, id, "gone"
	goneLease := grab(t, ctx, st, gone)

	var info lock.KeyInfo
	require.Eventually(t, func() bool {
		var err error
		info, err = st.Inspect(ctx, k)
		return err == nil && len(info.Holds) == 2 && info.Holds[1].Delayed
	}, s.Patience, time.Millisecond, "the session expires into its lock-delay")
	assert.Equal(t, 2, info.Holders, "the kept slot still counts")
	assert.Equal(t, lock.HoldInfo{Token: liveLease.Token, Remaining: info.Holds[0].Remaining, Metadata: "live"}, info.Holds[0], "the live hold is unchanged")
	delayed := info.Holds[1]
	assert.Equal(t, goneLease.Token, delayed.Token)
	assert.Empty(t, delayed.Metadata, "nobody holds a lock-delayed slot")
	assert.Positive(t, delayed.Remaining, "the delay left")
	assert.False(t, info.Delayed, "the key itself is held by a live holder")

	if l, ok := st.(lock.Lister); ok {
		page, err := l.List(ctx, lock.ListRequest{Prefix: k})
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Len(t, page[0].Holds, 2)
		assert.False(t, page[0].Holds[0].Delayed)
		assert.True(t, page[0].Holds[1].Delayed, "List tells the kept slot too")
	}

}

// A try-acquire of a key reserved for a waiting multi-key acquire fails
// with a *HeldError that says so (Reserved, no token: nobody holds it) and
// still matches ErrLocked; so does a wait that runs out behind the set,
// and a multi-key acquire whose first key not free is the reserved one
// (the error names that key, not the set's first). A key that is held
// still names its holder.
func (s *suite) testReportReservedRefusal(t *testing.T) {
	st := s.multiStore(t)
	ctx := s.ctx(t)
	a, b, c := key(t, "a"), key(t, "b"), key(t, "c")
	first := key(t, "0") // sorts before a, b and c, and stays free
	holder, held := acquire(t, ctx, st, b, long)
	set := allReq(long, s.Patience, a, b)
	setDone := acquireAllAsync(ctx, st, set)
	s.awaitWaiters(t, ctx, st, a, 1)
	require.True(t, inspect(t, ctx, st, a).Reserved)

	checkReserved := func(err error, what string) {
		t.Helper()
		var refused *lock.HeldError
		require.ErrorAs(t, err, &refused, what)
		assert.ErrorIs(t, err, lock.ErrLocked, what)
		assert.True(t, refused.Reserved, "%s: reserved for the waiting set", what)
		assert.Zero(t, refused.Token, "%s: no holder, so no token", what)
		assert.Zero(t, refused.Remaining, what)
		assert.Equal(t, a, refused.Key, what)
		assert.Contains(t, err.Error(), "reserved", what)
		assert.NotContains(t, err.Error(), "token", what)
	}
	_, err := st.Acquire(ctx, lock.AcquireRequest{Key: a, Owner: lock.NewOwner(), TTL: long})
	checkReserved(err, "try-acquire")
	_, err = st.Acquire(ctx, lock.AcquireRequest{Key: a, Owner: lock.NewOwner(), TTL: long, Wait: s.ShortTTL})
	checkReserved(err, "a wait that runs out")
	_, err = st.AcquireAll(ctx, allReq(long, 0, a, c))
	checkReserved(err, "a multi-key try-acquire")
	_, err = st.AcquireAll(ctx, allReq(long, 0, first, a))
	checkReserved(err, "a multi-key try-acquire whose first key is free")
	ok, err := lock.New(st).Lock(a).TryAcquire(ctx)
	require.NoError(t, err, "a handle's try reports contention as false")
	assert.False(t, ok)

	_, err = st.Acquire(ctx, lock.AcquireRequest{Key: b, Owner: lock.NewOwner(), TTL: long})
	var refused *lock.HeldError
	require.ErrorAs(t, err, &refused)
	assert.False(t, refused.Reserved, "b is held, not reserved")
	assert.Equal(t, held.Token, refused.Token)
	assert.Contains(t, err.Error(), "token "+strconv.FormatUint(held.Token, 10))
	_, err = st.AcquireAll(ctx, allReq(long, 0, first, b))
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, b, refused.Key, "the set's first key not free")
	assert.Equal(t, held.Token, refused.Token)
	assert.False(t, inspect(t, ctx, st, first).Locked, "never a partial grant")

	free(t, ctx, st, lock.AcquireRequest{Key: b, Owner: holder})
	require.NoError(t, s.await(t, setDone, "the set").err)
	free(t, ctx, st, lock.AcquireRequest{Key: a, Owner: set.Owner})
}

// A LockAll handle rebuilt by Restore has the original's key set and acts
// on all of it: it inspects, extends and releases every key, and acquires
// the whole set again.
func (s *suite) testReportMultiKeyRestore(t *testing.T) {
	st := s.multiStore(t)
	ctx := s.ctx(t)
	keys := []string{key(t, "a"), key(t, "b"), key(t, "c")}
	c := lock.New(st)
	original := c.LockAll([]string{keys[2], keys[0], keys[1]}, lock.TTL(long), lock.Metadata("set"))
	require.NoError(t, original.Acquire(ctx))

	restored, err := lock.New(st).Restore(original.Serialize())
	require.NoError(t, err)
	assert.Equal(t, keys, restored.Keys(), "the whole set")
	assert.Equal(t, keys[0], restored.Key())
	assert.Equal(t, original.Token(), restored.Token())
	assert.Equal(t, original.Serialize(), restored.Serialize(), "one form per handle")
	locked, err := restored.IsLocked(ctx)
	require.NoError(t, err)
	assert.True(t, locked)
	require.NoError(t, restored.Extend(ctx), "the restored handle extends the set")
	left, ok := restored.Remaining()
	assert.True(t, ok)
	assert.Positive(t, left)

	released, err := restored.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)
	for _, k := range keys {
		assert.False(t, inspect(t, ctx, st, k).Locked, "the restored release freed %q", k)
	}

	// Acquired again by the restored handle: the whole set, one token.
	require.NoError(t, restored.Acquire(ctx))
	t.Cleanup(func() { _, _ = restored.Release(context.Background()) })
	for _, k := range keys {
		info := inspect(t, ctx, st, k)
		assert.True(t, info.Locked, k)
		assert.Equal(t, restored.Token(), info.Token, k)
		assert.Equal(t, keys, info.SetKeys, k)
	}
}
