package locktest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

func semReq(k string, n int) lock.AcquireRequest {
	return lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: long, Kind: lock.KindSemaphore, Limit: n}
}

func rwReq(k string, shared bool) lock.AcquireRequest {
	return lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: long, Kind: lock.KindRWLock, Shared: shared}
}

// grab acquires req, failing the test if it is not granted at once.
func grab(t *testing.T, ctx context.Context, st lock.Store, req lock.AcquireRequest) lock.Lease {
	t.Helper()
	lease, err := st.Acquire(ctx, req)
	require.NoError(t, err, "acquire %q as %v", req.Key, req.Kind)
	require.NotZero(t, lease.Token)
	return lease
}

// free releases req's hold, failing the test if it was not held.
func free(t *testing.T, ctx context.Context, st lock.Store, req lock.AcquireRequest) {
	t.Helper()
	release(t, ctx, st, req.Key, req.Owner, "release of %q", req.Key)
}

// A semaphore of N: N holders at once, each with a newer token; the next
// is refused (or waits, in FIFO order) until a release hands its slot on;
// every holder releases and extends on its own.
func (s *suite) testSemaphore(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	const n = 3
	holders := make([]lock.AcquireRequest, n)
	var prev uint64
	tokens := make([]uint64, n)
	for i := range holders {
		holders[i] = semReq(k, n)
		holders[i].Metadata = fmt.Sprintf("holder=%d", i)
		lease := grab(t, ctx, st, holders[i])
		assert.Greater(t, lease.Token, prev, "holder %d gets a newer token", i)
		prev, tokens[i] = lease.Token, lease.Token
	}
	info := inspect(t, ctx, st, k)
	assert.True(t, info.Locked)
	assert.Equal(t, lock.KindSemaphore, info.Kind)
	assert.Equal(t, n, info.Limit)
	assert.Equal(t, n, info.Holders)
	assert.Equal(t, prev, info.Token, "inspect shows the newest grant")
	s.checkHolds(t, info, holders, tokens)
	if l, ok := st.(lock.Lister); ok {
		locks, err := l.List(ctx, lock.ListRequest{Prefix: k})
		require.NoError(t, err)
		require.Len(t, locks, 1)
		s.checkHolds(t, locks[0].KeyInfo, holders, tokens)
	}

	_, err := st.Acquire(ctx, semReq(k, n))
	assert.ErrorIs(t, err, lock.ErrLocked, "holder n+1 is refused without a wait")

	// Two waiters, served in order, one slot each.
	waiters := []lock.AcquireRequest{semReq(k, n), semReq(k, n)}
	var done []<-chan outcome
	for i := range waiters {
		waiters[i].Wait = s.Patience
		done = append(done, acquireAsync(ctx, st, waiters[i]))
		s.awaitWaiters(t, ctx, st, k, i+1)
	}
	_, err = st.Extend(ctx, k, holders[1].Owner, long)
	require.NoError(t, err, "a holder extends its own hold")
	free(t, ctx, st, holders[1])
	got := s.await(t, done[0], "the first waiter")
	require.NoError(t, got.err)
	assert.Greater(t, got.lease.Token, prev)
	release(t, ctx, st, k, holders[1].Owner, "a released holder's repeated release is answered as the first was")
	select {
	case o := <-done[1]:
		t.Fatalf("the second waiter got a slot while the semaphore was full (a repeated release freed one?): %+v", o)
	default:
	}
	free(t, ctx, st, holders[0])
	got = s.await(t, done[1], "the second waiter")
	require.NoError(t, got.err)
	for _, r := range []lock.AcquireRequest{holders[2], waiters[0], waiters[1]} {
		free(t, ctx, st, r)
	}
	assert.False(t, inspect(t, ctx, st, k).Locked)
}

// checkHolds asserts that info lists each of holders, in grant order, with
// its token, metadata and a lease left, and never an owner.
func (s *suite) checkHolds(t *testing.T, info lock.KeyInfo, holders []lock.AcquireRequest, tokens []uint64) {
	t.Helper()
	require.Len(t, info.Holds, len(holders), "every holder is listed")
	for i, h := range info.Holds {
		assert.Equal(t, tokens[i], h.Token, "hold %d", i)
		assert.Equal(t, holders[i].Metadata, h.Metadata, "hold %d shows its own metadata", i)
		assert.Positive(t, h.Remaining, "hold %d", i)
		assert.LessOrEqual(t, h.Remaining, long, "hold %d", i)
		assert.Equal(t, holders[i].Shared, h.Shared, "hold %d", i)
		assert.NotContains(t, fmt.Sprintf("%+v", h), fmt.Sprintf("%v", holders[i].Owner), "never an owner")
	}
	assert.Empty(t, info.Metadata, "a group key's own Metadata stays empty")
}

// A read/write lock: readers share; a writer waits for them and excludes
// everyone; a reader that comes after a waiting writer waits behind it
// (writers are not starved); the writer's release lets the readers in.
func (s *suite) testRWLock(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	r1, r2 := rwReq(k, true), rwReq(k, true)
	r1.Metadata, r2.Metadata = "reader=1", "reader=2"
	l1 := grab(t, ctx, st, r1)
	l2 := grab(t, ctx, st, r2)
	info := inspect(t, ctx, st, k)
	assert.Equal(t, lock.KindRWLock, info.Kind)
	assert.Equal(t, 2, info.Holders)
	assert.True(t, info.Shared)
	s.checkHolds(t, info, []lock.AcquireRequest{r1, r2}, []uint64{l1.Token, l2.Token})

	_, err := st.Acquire(ctx, rwReq(k, false))
	assert.ErrorIs(t, err, lock.ErrLocked, "a writer is refused while readers hold")

	w := rwReq(k, false)
	w.Wait = s.Patience
	writer := acquireAsync(ctx, st, w)
	s.awaitWaiters(t, ctx, st, k, 1)
	late := rwReq(k, true)
	late.Wait = s.Patience
	reader := acquireAsync(ctx, st, late)
	s.awaitWaiters(t, ctx, st, k, 2)
	_, err = st.Acquire(ctx, rwReq(k, true))
	assert.ErrorIs(t, err, lock.ErrLocked, "a new reader does not pass the waiting writer")

	free(t, ctx, st, r1)
	select {
	case o := <-writer:
		t.Fatalf("the writer got the lock while a reader held it: %+v", o)
	default:
	}
	free(t, ctx, st, r2)
	got := s.await(t, writer, "the writer")
	require.NoError(t, got.err)
	info = inspect(t, ctx, st, k)
	assert.False(t, info.Shared)
	assert.Equal(t, 1, info.Holders)
	assert.Equal(t, got.lease.Token, info.Token)
	// A second reader queues behind the first; the writer's release lets
	// both in at once (one step hands over to every waiter that fits, and
	// each waiting caller is answered).
	late2 := rwReq(k, true)
	late2.Wait = s.Patience
	reader2 := acquireAsync(ctx, st, late2)
	s.awaitWaiters(t, ctx, st, k, 2)
	select {
	case o := <-reader:
		t.Fatalf("a reader got the lock while the writer held it: %+v", o)
	default:
	}
	free(t, ctx, st, w)
	got = s.await(t, reader, "the reader behind the writer")
	require.NoError(t, got.err)
	got2 := s.await(t, reader2, "the second reader behind the writer")
	require.NoError(t, got2.err)
	assert.Greater(t, got2.lease.Token, got.lease.Token, "granted in queue order")
	info = inspect(t, ctx, st, k)
	assert.Equal(t, 2, info.Holders)
	assert.True(t, info.Shared)
	free(t, ctx, st, late)
	free(t, ctx, st, late2)
}

// An acquire of another kind, or of a semaphore of another limit, while
// the key exists fails with a *KindMismatchError saying what the key is;
// once nobody holds it, any kind takes it.
func (s *suite) testKindMismatch(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	holder := semReq(k, 8)
	grab(t, ctx, st, holder)
	for _, req := range []lock.AcquireRequest{semReq(k, 4), rwReq(k, true), {Key: k, Owner: lock.NewOwner(), TTL: long, Wait: s.Patience}} {
		_, err := st.Acquire(ctx, req)
		require.ErrorIs(t, err, lock.ErrKindMismatch, "%v of %d", req.Kind, req.Limit)
		var mismatch *lock.KindMismatchError
		if assert.True(t, errors.As(err, &mismatch), "%T", err) {
			assert.Equal(t, lock.KindSemaphore, mismatch.Kind)
			assert.Equal(t, 8, mismatch.Limit)
		}
		assert.Contains(t, err.Error(), "semaphore of 8")
	}
	assert.Zero(t, inspect(t, ctx, st, k).Waiters, "a mismatch queues nobody")
	free(t, ctx, st, holder)
	w := rwReq(k, false)
	grab(t, ctx, st, w)
	_, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: long})
	assert.ErrorIs(t, err, lock.ErrKindMismatch)
	free(t, ctx, st, w)

	for _, n := range []int{0, -1, lock.MaxHolders + 1} {
		_, err := st.Acquire(ctx, semReq(key(t, "bad"), n))
		assert.ErrorIs(t, err, lock.ErrInvalidLimit, "limit %d", n)
	}
	bad := semReq(key(t, "bad"), 2)
	bad.Shared = true
	_, err = st.Acquire(ctx, bad)
	assert.ErrorIs(t, err, lock.ErrInvalidKind)
}

// The handles: Client.Semaphore and an RWLock's Reader and Writer, with
// Run, on the store.
func (s *suite) testKindHandles(t *testing.T) {
	st, ctx := s.begin(t)
	c := lock.New(st)
	k := key(t, "sem")
	a, b := c.Semaphore(k, 2, lock.TTL(long)), c.Semaphore(k, 2, lock.TTL(long))
	require.NoError(t, a.Acquire(ctx))
	ran, err := b.TryRun(ctx, func(ctx context.Context) error {
		info, err := c.Inspect(ctx, k)
		if err == nil && info.Holders != 2 {
			err = fmt.Errorf("%d holders inside Run, want 2", info.Holders)
		}
		return err
	})
	require.NoError(t, err)
	assert.True(t, ran)
	third := c.Semaphore(k, 3)
	_, err = third.TryAcquire(ctx)
	assert.ErrorIs(t, err, lock.ErrKindMismatch)
	_, err = a.Release(ctx)
	require.NoError(t, err)

	rw := c.RWLock(key(t, "rw"), lock.TTL(long))
	r1, r2, w := rw.Reader(), rw.Reader(), rw.Writer()
	require.NoError(t, r1.Acquire(ctx))
	ok, err := r2.TryAcquire(ctx)
	require.NoError(t, err)
	assert.True(t, ok, "readers share")
	ok, err = w.TryAcquire(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "the writer is excluded")
	for _, l := range []*lock.Lock{r1, r2} {
		released, err := l.Release(ctx)
		require.NoError(t, err)
		assert.True(t, released)
	}
	ok, err = w.TryAcquire(ctx)
	require.NoError(t, err)
	assert.True(t, ok)
	_, err = w.Release(ctx)
	require.NoError(t, err)
}
