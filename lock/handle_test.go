package lock_test

import (
	"bytes"
	"context"
	"errors"
	"log"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

const patience = 10 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*patience)
	t.Cleanup(cancel)
	return ctx
}

// fakeStore wraps a store and lets a test replace what some calls do.
type fakeStore struct {
	lock.Store
	acquire func(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error)
	extend  func(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error)
	release func(ctx context.Context, key string, owner lock.Owner) (bool, error)
	inspect func(ctx context.Context, key string) (lock.KeyInfo, error)
	extends atomic.Int32
}

func (f *fakeStore) Inspect(ctx context.Context, key string) (lock.KeyInfo, error) {
	if f.inspect != nil {
		return f.inspect(ctx, key)
	}
	return f.Store.Inspect(ctx, key)
}

func (f *fakeStore) Release(ctx context.Context, key string, owner lock.Owner) (bool, error) {
	if f.release != nil {
		return f.release(ctx, key, owner)
	}
	return f.Store.Release(ctx, key, owner)
}

func (f *fakeStore) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if f.acquire != nil {
		return f.acquire(ctx, req)
	}
	return f.Store.Acquire(ctx, req)
}

func (f *fakeStore) Extend(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error) {
	f.extends.Add(1)
	if f.extend != nil {
		return f.extend(ctx, key, owner, ttl)
	}
	return f.Store.Extend(ctx, key, owner, ttl)
}

func TestHandleInUse(t *testing.T) {
	ctx := testCtx(t)
	st := newMemoryStore(t)
	c := lock.New(st)
	l := c.Lock("k")

	require.NoError(t, l.Acquire(ctx))
	token := l.Token()
	assert.ErrorIs(t, l.Acquire(ctx), lock.ErrInUse, "Acquire on a held handle")
	_, err := l.TryAcquire(ctx)
	assert.ErrorIs(t, err, lock.ErrInUse, "TryAcquire on a held handle")
	ran, err := l.TryRun(ctx, func(context.Context) error { return nil })
	assert.ErrorIs(t, err, lock.ErrInUse, "TryRun on a held handle")
	assert.False(t, ran)
	assert.Equal(t, token, l.Token(), "the failed acquires changed nothing")
	ok, err := l.Release(ctx)
	require.NoError(t, err)
	require.True(t, ok)

	t.Run("inside Run", func(t *testing.T) {
		ran, err := l.Run(ctx, func(ctx context.Context) error {
			return l.Acquire(ctx)
		})
		assert.True(t, ran)
		assert.ErrorIs(t, err, lock.ErrInUse)
		locked, err := l.IsLocked(ctx)
		require.NoError(t, err)
		assert.False(t, locked, "Run released")
	})

	t.Run("while acquiring", func(t *testing.T) {
		holder := c.Lock("k")
		require.NoError(t, holder.Acquire(ctx))
		done := make(chan error, 1)
		go func() { done <- l.Acquire(ctx) }()
		require.Eventually(t, func() bool {
			info, err := st.Inspect(ctx, "k")
			return err == nil && info.Waiters == 1
		}, patience, time.Millisecond)
		_, err := l.TryAcquire(ctx)
		assert.ErrorIs(t, err, lock.ErrInUse, "a handle that is acquiring is in use")
		ok, err := holder.Release(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, <-done)
		ok, err = l.Release(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
	})
}

func TestNewRejectsNilStore(t *testing.T) {
	assert.PanicsWithValue(t, "lock: New called with a nil Store", func() { lock.New(nil) })
	// The client keeps its locks in the store it was made with.
	st := newMemoryStore(t)
	ctx := testCtx(t)
	l := lock.New(st).Lock("k")
	require.NoError(t, l.Acquire(ctx))
	info, err := st.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, l.Token(), info.Token)
}

func TestClientInspect(t *testing.T) {
	ctx := testCtx(t)
	c := lock.New(newMemoryStore(t))
	info, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, info.Locked)

	l := c.Lock("k", lock.TTL(time.Minute))
	require.NoError(t, l.Acquire(ctx))
	info, err = c.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, l.Token(), info.Token)
	assert.Positive(t, info.Remaining)

	_, err = c.Inspect(ctx, "")
	assert.ErrorIs(t, err, lock.ErrInvalidKey)
}

func TestHandleReacquireGetsFreshOwner(t *testing.T) {
	ctx := testCtx(t)
	c := lock.New(newMemoryStore(t))
	l := c.Lock("k")
	require.NoError(t, l.Acquire(ctx))
	first, firstSerialized := l.Token(), l.Serialize()
	ok, err := l.Release(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, first, l.Token(), "Token keeps the last lease's token after release")

	require.NoError(t, l.Acquire(ctx))
	assert.Greater(t, l.Token(), first)
	assert.NotEqual(t, ownerField(firstSerialized), ownerField(l.Serialize()), "a fresh owner per acquisition")

	// The old owner, restored elsewhere, cannot touch the new lease (its
	// release is the repeat of the one that ended its own lease).
	stale, err := c.Restore(firstSerialized)
	require.NoError(t, err)
	ok, err = stale.Release(ctx)
	require.NoError(t, err)
	assert.True(t, ok, "the old owner's lease was released")
	assert.ErrorIs(t, stale.Extend(ctx), lock.ErrNotHeld)
	expired, err := l.IsExpired(ctx)
	require.NoError(t, err)
	assert.False(t, expired)
}

func ownerField(serialized string) string { return strings.Split(serialized, ".")[3] }

func TestHandleRemainingIsConservative(t *testing.T) {
	ctx := testCtx(t)
	st := newMemoryStore(t)
	l := lock.New(st).Lock("k", lock.TTL(time.Minute))
	_, ok := l.Remaining()
	assert.False(t, ok, "not held yet")

	require.NoError(t, l.Acquire(ctx))
	info, err := st.Inspect(ctx, "k")
	require.NoError(t, err)
	left, ok := l.Remaining()
	require.True(t, ok)
	assert.Positive(t, left)
	assert.LessOrEqual(t, left, info.Remaining, "the handle never believes in more lease than the store has")

	require.NoError(t, l.Extend(ctx, lock.TTL(2*time.Minute)))
	assert.Equal(t, 2*time.Minute, l.TTL(), "Extend's TTL becomes the handle's")
	left, ok = l.Remaining()
	require.True(t, ok)
	assert.Greater(t, left, time.Minute)
	assert.LessOrEqual(t, left, 2*time.Minute)

	ok, err = l.Release(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok = l.Remaining()
	assert.False(t, ok, "released")
}

func TestHandleValidation(t *testing.T) {
	ctx := testCtx(t)
	st := newMemoryStore(t)
	c := lock.New(st)
	for _, tc := range []struct {
		name string
		l    *lock.Lock
		opts []lock.AcquireOption
		want error
	}{
		{"empty key", c.Lock(""), nil, lock.ErrInvalidKey},
		{"long key", c.Lock(strings.Repeat("x", lock.MaxKeyLen+1)), nil, lock.ErrInvalidKey},
		{"zero ttl", c.Lock("k", lock.TTL(0)), nil, lock.ErrInvalidTTL},
		{"absurd ttl", c.Lock("k", lock.TTL(lock.MaxTTL+1)), nil, lock.ErrInvalidTTL},
		{"negative wait", c.Lock("k"), []lock.AcquireOption{lock.Wait(-time.Second)}, lock.ErrInvalidWait},
		{"negative default wait", c.Lock("k", lock.Wait(-time.Second)), nil, lock.ErrInvalidWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.Acquire(ctx, tc.opts...)
			assert.ErrorIs(t, err, tc.want)
			called := false
			var runOpts []lock.RunOption
			for _, o := range tc.opts {
				runOpts = append(runOpts, o.(lock.WaitOption))
			}
			ran, err := tc.l.Run(ctx, func(context.Context) error { called = true; return nil }, runOpts...)
			assert.ErrorIs(t, err, tc.want)
			assert.False(t, ran)
			assert.False(t, called)
			// The handle is not stuck: nothing was acquired and it is not in use.
			assert.NotErrorIs(t, tc.l.Acquire(ctx, tc.opts...), lock.ErrInUse)
			info, err := st.Inspect(ctx, "k")
			require.NoError(t, err)
			assert.False(t, info.Locked)
		})
	}

	l := c.Lock("k")
	require.NoError(t, l.Acquire(ctx))
	err := l.Extend(ctx, lock.TTL(-1))
	assert.ErrorIs(t, err, lock.ErrInvalidTTL)
	assert.Contains(t, err.Error(), "got -1ns", "the message says what was wrong")
	assert.Equal(t, lock.DefaultTTL, l.TTL(), "a rejected TTL is not adopted")
}

func TestValidateMessages(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{lock.ValidateKey(""), "lock: invalid key: key is empty"},
		{lock.ValidateKey(strings.Repeat("k", 600)), "lock: invalid key: key is longer than 512 bytes (got 600)"},
		{lock.ValidateRelease("k", lock.Owner{}), "lock: invalid owner: owner is zero"},
		{lock.ValidateExtend("k", lock.NewOwner(), 0), "lock: invalid ttl: ttl must be between 1ms and 24h (got 0s)"},
		{lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Second, Wait: -time.Second}.Validate(),
			"lock: invalid wait: wait must be between 0 and 24h (got -1s)"},
		{lock.ListRequest{Limit: -1}.Validate(), "lock: invalid list request: limit is negative (got -1)"},
		{lock.ValidateExtend("k", lock.NewOwner(), lock.MaxTTL+1), "lock: invalid ttl: ttl must be between 1ms and 24h (got 24h0m0.000000001s)"},
		{lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Second, Wait: lock.MaxWait + 1}.Validate(),
			"lock: invalid wait: wait must be between 0 and 24h (got 24h0m0.000000001s)"},
	} {
		require.Error(t, tc.err)
		assert.Equal(t, tc.want, tc.err.Error())
	}
	assert.NoError(t, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: lock.MinTTL, Wait: lock.MaxWait}.Validate())
	assert.NoError(t, lock.ValidateKey(strings.Repeat("k", lock.MaxKeyLen)))
	assert.NoError(t, lock.ValidateExtend("k", lock.NewOwner(), lock.MaxTTL))
	assert.NoError(t, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Second}.Validate())
}

func TestRunWaitsForTheKey(t *testing.T) {
	ctx := testCtx(t)
	st := newMemoryStore(t)
	c := lock.New(st)
	holder := c.Lock("k")
	require.NoError(t, holder.Acquire(ctx))

	type result struct {
		ran bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		ran, err := c.Lock("k").Run(ctx, func(context.Context) error { return nil })
		done <- result{ran, err}
	}()
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, "k")
		return err == nil && info.Waiters == 1
	}, patience, time.Millisecond)
	ok, err := holder.Release(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	got := <-done
	assert.NoError(t, got.err)
	assert.True(t, got.ran, "Run waited for the holder's release")

	t.Run("context done", func(t *testing.T) {
		require.NoError(t, holder.Acquire(ctx))
		waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		ran, err := c.Lock("k").Run(waitCtx, func(context.Context) error { return nil })
		assert.False(t, ran)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		ok, err := holder.Release(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
	})
}

func TestRunKeepsTheLeaseAlive(t *testing.T) {
	ctx := testCtx(t)
	st := &fakeStore{Store: newMemoryStore(t)}
	const ttl = 60 * time.Millisecond
	l := lock.New(st).Lock("k", lock.TTL(ttl))
	ran, err := l.Run(ctx, func(ctx context.Context) error {
		// Work for several TTLs; the keep-alive must extend meanwhile.
		require.Eventually(t, func() bool { return st.extends.Load() >= 4 }, patience, time.Millisecond)
		expired, err := l.IsExpired(ctx)
		require.NoError(t, err)
		assert.False(t, expired, "still held after several TTLs")
		left, ok := l.Remaining()
		assert.True(t, ok)
		assert.LessOrEqual(t, left, ttl)
		return ctx.Err()
	})
	assert.True(t, ran)
	assert.NoError(t, err)
	expired, err := l.IsExpired(ctx)
	require.NoError(t, err)
	assert.False(t, expired, "released by Run, not lost")
}

// When no extend gets an answer before the lease's local deadline, Run cancels
// fn rather than let it run on a lease that may belong to someone else by now.
func TestRunCancelsAtTheLocalDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		extend func(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error)
	}{
		{"extend hangs", func(ctx context.Context, _ string, _ lock.Owner, _ time.Duration) (lock.Lease, error) {
			<-ctx.Done()
			return lock.Lease{}, ctx.Err()
		}},
		{"extend fails", func(context.Context, string, lock.Owner, time.Duration) (lock.Lease, error) {
			return lock.Lease{}, lock.ErrUnavailable
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			st := &fakeStore{Store: newMemoryStore(t), extend: tc.extend}
			// The store's lease is longer than the handle thinks, so the final
			// release finds it: the loss was only possible, yet Run must not
			// have let fn go on past the deadline.
			st.acquire = func(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
				req.TTL = time.Minute
				lease, err := st.Store.Acquire(ctx, req)
				lease.Remaining = 90 * time.Millisecond
				return lease, err
			}
			l := lock.New(st).Lock("k", lock.TTL(90*time.Millisecond))
			start := time.Now()
			var cause error
			var ranFor time.Duration
			ran, err := l.Run(ctx, func(ctx context.Context) error {
				<-ctx.Done()
				ranFor, cause = time.Since(start), context.Cause(ctx)
				return nil
			})
			assert.True(t, ran)
			assert.GreaterOrEqual(t, ranFor, 90*time.Millisecond, "not canceled before the deadline")
			assert.ErrorIs(t, cause, lock.ErrNotHeld)
			assert.NoError(t, err, "the release found the lease intact, so it was never lost")
			assert.GreaterOrEqual(t, st.extends.Load(), int32(1))
			locked, err := l.IsLocked(ctx)
			require.NoError(t, err)
			assert.False(t, locked, "released")
		})
	}
}

// When Run's release fails, Run says so, and the handle keeps the owner: the
// next Run is the idempotent re-acquire of the same lease, and Release works.
func TestRunReleaseFails(t *testing.T) {
	ctx := testCtx(t)
	st := &fakeStore{Store: newMemoryStore(t)}
	st.release = func(context.Context, string, lock.Owner) (bool, error) { return false, lock.ErrUnavailable }
	l := lock.New(st).Lock("k", lock.TTL(time.Minute))
	ran, err := l.Run(ctx, func(context.Context) error { return nil })
	assert.True(t, ran)
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.NotErrorIs(t, err, lock.ErrNotHeld, "the lease was not lost, only not released")
	first := l.Token()

	st.release = nil
	ran, err = l.Run(ctx, func(context.Context) error {
		assert.Equal(t, first, l.Token(), "the same lease, re-acquired by its owner")
		return nil
	})
	assert.True(t, ran)
	assert.NoError(t, err)
	locked, err := l.IsLocked(ctx)
	require.NoError(t, err)
	assert.False(t, locked)

	t.Run("after the local deadline", func(t *testing.T) {
		st.release = func(context.Context, string, lock.Owner) (bool, error) { return false, lock.ErrUnavailable }
		st.extend = func(context.Context, string, lock.Owner, time.Duration) (lock.Lease, error) {
			return lock.Lease{}, lock.ErrUnavailable
		}
		st.inspect = func(context.Context, string) (lock.KeyInfo, error) { return lock.KeyInfo{}, lock.ErrUnavailable }
		l := lock.New(st).Lock("k2", lock.TTL(30*time.Millisecond))
		ran, err := l.Run(ctx, func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		})
		assert.True(t, ran)
		assert.ErrorIs(t, err, lock.ErrNotHeld, "nothing can tell whether the lease outlived its deadline")
		assert.ErrorIs(t, err, lock.ErrUnavailable)
	})
}

// When the keep-alive gives up at the local deadline and a copy of the
// handle (Restore) released the lease meanwhile, Run's release is answered
// as the repeat of the copy's (true), but Run says the lease was lost: the
// key's token tells it.
func TestRunFindsALeaseReleasedByACopyAfterTheDeadline(t *testing.T) {
	ctx := testCtx(t)
	st := &fakeStore{Store: newMemoryStore(t), extend: func(ctx context.Context, _ string, _ lock.Owner, _ time.Duration) (lock.Lease, error) {
		<-ctx.Done() // no answer before the local deadline
		return lock.Lease{}, ctx.Err()
	}}
	l := lock.New(st).Lock("k", lock.TTL(60*time.Millisecond))
	var cause error
	ran, err := l.Run(ctx, func(fnCtx context.Context) error {
		other, err := lock.New(st).Restore(l.Serialize())
		require.NoError(t, err)
		ok, err := other.Release(ctx)
		require.NoError(t, err)
		require.True(t, ok, "the copy releases the lease")
		<-fnCtx.Done()
		cause = context.Cause(fnCtx)
		return fnCtx.Err()
	})
	assert.True(t, ran)
	assert.ErrorIs(t, cause, lock.ErrNotHeld, "fn was told the lease may be lost")
	assert.ErrorIs(t, err, lock.ErrNotHeld, "Run says the lease was lost")
	assert.ErrorContains(t, err, "was lost")
	expired, err := l.IsExpired(ctx)
	require.NoError(t, err)
	assert.True(t, expired, "lost, not released by the handle")
}

func TestRunCancelsWhenReleasedThroughTheHandle(t *testing.T) {
	ctx := testCtx(t)
	l := lock.New(newMemoryStore(t)).Lock("k", lock.TTL(60*time.Millisecond))
	var cause error
	ran, err := l.Run(ctx, func(fnCtx context.Context) error {
		ok, err := l.Release(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		<-fnCtx.Done()
		cause = context.Cause(fnCtx)
		return nil
	})
	assert.True(t, ran)
	assert.NoError(t, err, "a release through the handle is not a loss")
	assert.ErrorIs(t, cause, lock.ErrNotHeld, "but fn is told it no longer holds the lock")
}

func TestUnknownOutcomeRetriesWithTheSameOwner(t *testing.T) {
	ctx := testCtx(t)
	st := &fakeStore{Store: newMemoryStore(t)}
	var owners []lock.Owner
	st.acquire = func(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
		owners = append(owners, req.Owner)
		lease, err := st.Store.Acquire(ctx, req)
		if len(owners) == 1 {
			require.NoError(t, err)
			return lock.Lease{}, lock.ErrUnknownOutcome // granted, but the answer was lost
		}
		return lease, err
	}
	l := lock.New(st).Lock("k")
	assert.ErrorIs(t, l.Acquire(ctx), lock.ErrUnknownOutcome)
	require.NoError(t, l.Acquire(ctx), "the retry is the idempotent repeat")
	require.Len(t, owners, 2)
	assert.Equal(t, owners[0], owners[1])
	info, err := st.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, info.Token, l.Token())

	t.Run("release after an unknown outcome", func(t *testing.T) {
		owners = nil
		ok, err := l.Release(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		assert.ErrorIs(t, l.Acquire(ctx), lock.ErrUnknownOutcome)
		ok, err = l.Release(ctx)
		require.NoError(t, err)
		assert.True(t, ok, "Release gives back what may have been granted")
		locked, err := l.IsLocked(ctx)
		require.NoError(t, err)
		assert.False(t, locked)
	})
}

type hookLog struct {
	mu     sync.Mutex
	events []any
}

func (h *hookLog) add(e any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

func (h *hookLog) all() []any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]any(nil), h.events...)
}

func (h *hookLog) hooks() lock.Hooks {
	return lock.Hooks{
		OnAcquired:  func(_ context.Context, e lock.AcquiredEvent) { h.add(e) },
		OnReleased:  func(_ context.Context, e lock.ReleasedEvent) { e.Held = 0; h.add(e) },
		OnContended: func(_ context.Context, e lock.ContendedEvent) { e.Remaining = 0; h.add(e) },
	}
}

// The contended hook says when a key is reserved for a waiting multi-key
// lock rather than held.
func TestHooksTellAReservedKey(t *testing.T) {
	ctx := testCtx(t)
	st := newMemoryStore(t)
	var h hookLog
	c := lock.New(st, lock.WithHooks(h.hooks()))
	b := c.Lock("b", lock.TTL(time.Minute))
	require.NoError(t, b.Acquire(ctx))
	set := c.LockAll([]string{"a", "b"}, lock.TTL(time.Minute))
	done := make(chan error, 1)
	go func() { done <- set.Acquire(ctx) }()
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, "a")
		return err == nil && info.Reserved
	}, patience, time.Millisecond)
	ok, err := c.Lock("a").TryAcquire(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	assert.Contains(t, h.all(), lock.ContendedEvent{Key: "a", Reserved: true})
	_, err = b.Release(ctx)
	require.NoError(t, err)
	require.NoError(t, <-done)
}

func TestHooks(t *testing.T) {
	ctx := testCtx(t)
	st := newMemoryStore(t)
	var h hookLog
	c := lock.New(st, lock.WithHooks(h.hooks()))
	a := c.Lock("k", lock.TTL(time.Minute))
	b := c.Lock("k", lock.TTL(time.Minute))

	require.NoError(t, a.Acquire(ctx))
	ok, err := b.TryAcquire(ctx)
	require.NoError(t, err)
	require.False(t, ok)

	// A waiting acquire reports the contention before it waits.
	done := make(chan error, 1)
	go func() { done <- b.Acquire(ctx) }()
	require.Eventually(t, func() bool { return len(h.all()) == 3 }, patience, time.Millisecond)
	assert.Equal(t, lock.ContendedEvent{Key: "k", Token: 1}, h.all()[2])
	ok, err = a.Release(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, <-done)
	ok, err = b.Release(ctx)
	require.NoError(t, err)
	require.True(t, ok)

	// a's release hook and b's acquire hook run on different goroutines, in
	// either order; everything else is ordered.
	events := h.all()
	require.Len(t, events, 6)
	assert.Equal(t, []any{
		lock.AcquiredEvent{Key: "k", Token: 1, TTL: time.Minute},
		lock.ContendedEvent{Key: "k", Token: 1},
		lock.ContendedEvent{Key: "k", Token: 1},
	}, events[:3])
	assert.ElementsMatch(t, []any{
		lock.ReleasedEvent{Key: "k", Token: 1},
		lock.AcquiredEvent{Key: "k", Token: 2, TTL: time.Minute},
	}, events[3:5])
	assert.Equal(t, lock.ReleasedEvent{Key: "k", Token: 2}, events[5])

	t.Run("lost lease", func(t *testing.T) {
		h := hookLog{}
		c := lock.New(st, lock.WithHooks(h.hooks()))
		l := c.Lock("lost", lock.TTL(20*time.Millisecond))
		require.NoError(t, l.Acquire(ctx))
		require.Eventually(t, func() bool {
			expired, err := l.IsExpired(ctx)
			return err == nil && expired
		}, patience, time.Millisecond)
		ok, err := l.Release(ctx)
		require.NoError(t, err)
		assert.False(t, ok)
		assert.Equal(t, []any{
			lock.AcquiredEvent{Key: "lost", Token: 3, TTL: 20 * time.Millisecond},
			lock.ReleasedEvent{Key: "lost", Token: 3, Lost: true},
		}, h.all(), "released once, when the loss was found")
	})
}

func TestHooksMayUseTheHandle(t *testing.T) {
	ctx := testCtx(t)
	var l *lock.Lock
	var seen uint64
	c := lock.New(newMemoryStore(t), lock.WithHooks(lock.Hooks{
		OnAcquired: func(ctx context.Context, e lock.AcquiredEvent) {
			seen = l.Token() // would deadlock if the hook ran under the handle's lock
			_, _ = l.Remaining()
		},
	}))
	l = c.Lock("k")
	require.NoError(t, l.Acquire(ctx))
	assert.Equal(t, l.Token(), seen)
}

func TestPanickingHookDoesNotBreakTheLock(t *testing.T) {
	var logged bytes.Buffer
	previous := log.Writer()
	log.SetOutput(&logged)
	t.Cleanup(func() { log.SetOutput(previous) })

	ctx := testCtx(t)
	st := newMemoryStore(t)
	c := lock.New(st, lock.WithHooks(lock.Hooks{
		OnAcquired:  func(context.Context, lock.AcquiredEvent) { panic("acquired hook") },
		OnReleased:  func(context.Context, lock.ReleasedEvent) { panic("released hook") },
		OnContended: func(context.Context, lock.ContendedEvent) { panic("contended hook") },
	}))
	l := c.Lock("k")
	ran, err := l.Run(ctx, func(ctx context.Context) error {
		ok, err := c.Lock("k").TryAcquire(ctx)
		require.NoError(t, err)
		assert.False(t, ok)
		return nil
	})
	assert.True(t, ran)
	assert.NoError(t, err)
	locked, err := l.IsLocked(ctx)
	require.NoError(t, err)
	assert.False(t, locked, "released despite the panicking hooks")
	for _, hook := range []string{"OnAcquired", "OnReleased", "OnContended"} {
		assert.Contains(t, logged.String(), "lock: hook "+hook+` panicked for "k"`)
	}
}

func TestSerializeRoundTrip(t *testing.T) {
	ctx := testCtx(t)
	c := lock.New(newMemoryStore(t))
	urlSafe := regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	for _, key := range []string{"k", "invoice:42", "a/b c?d=e&f#g", "\x00\xff", strings.Repeat("é", lock.MaxKeyLen/2)} {
		l := c.Lock(key, lock.TTL(1500*time.Microsecond))
		s := l.Serialize()
		assert.Regexp(t, urlSafe, s)
		assert.True(t, strings.HasPrefix(s, "v1."))
		restored, err := c.Restore(s)
		require.NoError(t, err)
		assert.Equal(t, key, restored.Key())
		assert.Equal(t, 1500*time.Microsecond, restored.TTL())
		assert.Zero(t, restored.Token())
		ok, err := restored.Release(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "restored from a handle that held nothing")
		assert.Equal(t, s, restored.Serialize(), "one form per handle")
	}

	l := c.Lock("held", lock.TTL(time.Minute))
	require.NoError(t, l.Acquire(ctx))
	s := l.Serialize()
	assert.Regexp(t, `^v1\.aGVsZA\.60000000000\.[0-9a-f]{32}\.1$`, s)
	restored, err := c.Restore(s)
	require.NoError(t, err)
	assert.Equal(t, s, restored.Serialize())
	assert.Equal(t, l.Token(), restored.Token())
	_, ok := restored.Remaining()
	assert.False(t, ok, "unknown until the restored handle extends")
}

// A semaphore's or read/write lock's handle keeps its kind through
// Serialize and Restore (version 2), and the restored handle releases the
// same hold.
func TestSerializeKeepsTheKind(t *testing.T) {
	ctx := testCtx(t)
	c := lock.New(newMemoryStore(t))
	sem := c.Semaphore("sem", 3, lock.TTL(time.Minute))
	require.NoError(t, sem.Acquire(ctx))
	reader := c.RWLock("rw", lock.TTL(time.Minute)).Reader()
	require.NoError(t, reader.Acquire(ctx))
	writer := c.RWLock("w", lock.TTL(time.Minute)).Writer()
	for _, tc := range []struct {
		l    *lock.Lock
		tail string
	}{{sem, `\.s3$`}, {reader, `\.r$`}, {writer, `\.w$`}} {
		s := tc.l.Serialize()
		assert.Regexp(t, `^v2\.`+`.*`+tc.tail, s)
		restored, err := c.Restore(s)
		require.NoError(t, err)
		assert.Equal(t, tc.l.Kind(), restored.Kind())
		assert.Equal(t, tc.l.Limit(), restored.Limit())
		assert.Equal(t, tc.l.Shared(), restored.Shared())
		assert.Equal(t, s, restored.Serialize())
	}
	restored, err := c.Restore(sem.Serialize())
	require.NoError(t, err)
	ok, err := restored.Release(ctx)
	require.NoError(t, err)
	assert.True(t, ok, "the restored handle releases the slot")
	again, err := c.Semaphore("sem", 3).TryAcquire(ctx)
	require.NoError(t, err)
	assert.True(t, again)
}

// A LockAll handle is written in version 3 with its whole set and restored
// with it; the version 1 form older versions wrote for it (its first key
// alone) is still read, as a handle of that key.
func TestSerializeKeepsTheKeySet(t *testing.T) {
	ctx := testCtx(t)
	c := lock.New(newMemoryStore(t))
	set := c.LockAll([]string{"m", "k", "\x00\xff"}, lock.TTL(time.Minute))
	free := set.Serialize()
	assert.Equal(t, "v3.AP8.60000000000...k.aw.bQ", free, "the first key, then the others in byte order")
	restored, err := c.Restore(free)
	require.NoError(t, err)
	assert.Equal(t, set.Keys(), restored.Keys())
	assert.Equal(t, free, restored.Serialize())

	require.NoError(t, set.Acquire(ctx))
	held := set.Serialize()
	assert.Regexp(t, `^v3\.AP8\.60000000000\.[0-9a-f]{32}\.[0-9]+\.k\.aw\.bQ$`, held)
	restored, err = c.Restore(held)
	require.NoError(t, err)
	assert.Equal(t, []string{"\x00\xff", "k", "m"}, restored.Keys())
	assert.Equal(t, set.Token(), restored.Token())

	one := c.LockAll([]string{"k"})
	assert.Equal(t, "v3.aw."+strconv.FormatInt(int64(one.TTL()), 10)+"...k", one.Serialize(), "a set of one key is still a set")
	restored, err = c.Restore(one.Serialize())
	require.NoError(t, err)
	assert.Equal(t, []string{"k"}, restored.Keys())

	fields := strings.Split(held, ".")
	old, err := c.Restore(strings.Join(append([]string{"v1"}, fields[1:5]...), "."))
	require.NoError(t, err, "the form older versions wrote")
	assert.Nil(t, old.Keys())
	ok, err := old.Release(ctx)
	require.NoError(t, err)
	assert.True(t, ok, "it still releases the whole set")
	for _, k := range []string{"\x00\xff", "k", "m"} {
		locked, err := c.Lock(k).IsLocked(ctx)
		require.NoError(t, err)
		assert.False(t, locked, k)
	}
}

func TestRestoreRejectsGarbage(t *testing.T) {
	c := lock.New(memstore.New())
	owner := lock.NewOwner().String()
	for _, tc := range []struct {
		name, s string
		also    error
	}{
		{"empty", "", nil},
		{"not ours", "hello", nil},
		{"future version", "v4.aw.1000000." + owner + ".1", nil},
		{"v3 without a kind", "v3.aw.1000000." + owner + ".1", nil},
		{"v3 unknown kind", "v3.aw.1000000." + owner + ".1.x.bA", nil},
		{"v3 keys out of order", "v3.bA.1000000." + owner + ".1.k.aw", nil},
		{"v3 key twice", "v3.aw.1000000." + owner + ".1.k.aw", nil},
		{"v3 set key not base64", "v3.aw.1000000." + owner + ".1.k.b*A", nil},
		{"v3 empty set key", "v3.aw.1000000." + owner + ".1.k.", lock.ErrInvalidKey},
		{"v3 too many keys", "v3.aw.1000000." + owner + ".1.k" + strings.Repeat(".bA", lock.MaxKeys), nil},
		{"v2 without a kind", "v2.aw.1000000." + owner + ".1", nil},
		{"v2 unknown kind", "v2.aw.1000000." + owner + ".1.x", nil},
		{"v2 semaphore of 0", "v2.aw.1000000." + owner + ".1.s0", lock.ErrInvalidLimit},
		{"v2 semaphore too large", "v2.aw.1000000." + owner + ".1.s65537", lock.ErrInvalidLimit},
		{"v2 semaphore leading zero", "v2.aw.1000000." + owner + ".1.s08", nil},
		{"too few fields", "v1.aw.1000000", nil},
		{"too many fields", "v1.aw.1000000." + owner + ".1.x", nil},
		{"key not base64", "v1.a*w.1000000..", nil},
		{"key padded", "v1.aw==.1000000..", nil},
		{"empty key", "v1..1000000..", lock.ErrInvalidKey},
		{"long key", "v1." + strings.Repeat("a", 700) + ".1000000..", lock.ErrInvalidKey},
		{"ttl not a number", "v1.aw.30s..", nil},
		{"ttl signed", "v1.aw.+1000000..", nil},
		{"ttl leading zero", "v1.aw.01000000..", nil},
		{"ttl zero", "v1.aw.0..", lock.ErrInvalidTTL},
		{"ttl negative", "v1.aw.-1000000..", nil},
		{"ttl absurd", "v1.aw.86400000000001..", lock.ErrInvalidTTL},
		{"ttl overflow", "v1.aw.99999999999999999999..", nil},
		{"owner without token", "v1.aw.1000000." + owner + ".", nil},
		{"token without owner", "v1.aw.1000000..1", nil},
		{"owner short", "v1.aw.1000000.abcd.1", lock.ErrInvalidOwner},
		{"owner not hex", "v1.aw.1000000." + strings.Repeat("z", 32) + ".1", lock.ErrInvalidOwner},
		{"owner zero", "v1.aw.1000000." + strings.Repeat("0", 32) + ".1", lock.ErrInvalidOwner},
		{"token zero", "v1.aw.1000000." + owner + ".0", nil},
		{"token negative", "v1.aw.1000000." + owner + ".-1", nil},
		{"token overflow", "v1.aw.1000000." + owner + ".18446744073709551616", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := c.Restore(tc.s)
			assert.Nil(t, l)
			require.ErrorIs(t, err, lock.ErrBadSerialized)
			if tc.also != nil {
				assert.ErrorIs(t, err, tc.also)
			}
			assert.True(t, strings.HasPrefix(err.Error(), "lock: "))
		})
	}
	l, err := c.Restore("v1.aw.1000000." + owner + ".18446744073709551615")
	require.NoError(t, err, "the largest token")
	assert.Equal(t, "k", l.Key())
}

func TestClientList(t *testing.T) {
	ctx := testCtx(t)
	st := newMemoryStore(t)
	c := lock.New(st)
	for _, k := range []string{"job/a", "job/b", "job/c", "other"} {
		require.NoError(t, c.Lock(k, lock.TTL(time.Minute)).Acquire(ctx))
	}
	short := c.Lock("job/expired", lock.TTL(lock.MinTTL))
	require.NoError(t, short.Acquire(ctx))
	require.Eventually(t, func() bool {
		expired, err := short.IsExpired(ctx)
		return err == nil && expired
	}, patience, time.Millisecond)

	keys := func(infos []lock.LockInfo) []string {
		var out []string
		for _, info := range infos {
			assert.True(t, info.Locked)
			assert.Positive(t, info.Token)
			assert.Positive(t, info.Remaining)
			assert.LessOrEqual(t, info.Remaining, time.Minute)
			out = append(out, info.Key)
		}
		return out
	}
	all, err := c.List(ctx, lock.ListRequest{})
	require.NoError(t, err)
	assert.Equal(t, []string{"job/a", "job/b", "job/c", "other"}, keys(all))
	page, err := c.List(ctx, lock.ListRequest{Prefix: "job/", Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{"job/a", "job/b"}, keys(page))
	page, err = c.List(ctx, lock.ListRequest{Prefix: "job/", After: "job/b", Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{"job/c"}, keys(page))

	_, err = c.List(ctx, lock.ListRequest{Limit: -1})
	assert.ErrorIs(t, err, lock.ErrInvalidList)
	_, err = c.List(ctx, lock.ListRequest{Prefix: strings.Repeat("p", lock.MaxKeyLen+1)})
	assert.ErrorIs(t, err, lock.ErrInvalidKey)
	_, err = lock.New(struct{ lock.Store }{st}).List(ctx, lock.ListRequest{})
	assert.ErrorIs(t, err, errors.ErrUnsupported, "a store that cannot list")
}

func TestClientForceRelease(t *testing.T) {
	ctx := testCtx(t)
	st := newMemoryStore(t)
	c := lock.New(st)
	l := c.Lock("job/stuck", lock.TTL(time.Hour))
	require.NoError(t, l.Acquire(ctx))

	token, err := c.ForceRelease(ctx, "job/stuck")
	require.NoError(t, err)
	assert.Equal(t, l.Token(), token)
	info, err := c.Inspect(ctx, "job/stuck")
	require.NoError(t, err)
	assert.False(t, info.Locked)
	assert.ErrorIs(t, l.Extend(ctx), lock.ErrNotHeld, "the holder finds out at its next extend")

	_, err = c.ForceRelease(ctx, "job/stuck")
	assert.ErrorIs(t, err, lock.ErrNotHeld)
	_, err = c.ForceRelease(ctx, "")
	assert.ErrorIs(t, err, lock.ErrInvalidKey)
	_, err = lock.New(struct{ lock.Store }{st}).ForceRelease(ctx, "k")
	assert.ErrorIs(t, err, errors.ErrUnsupported, "a store that cannot force-release")
}

// KeepAlive extends a lease taken with Acquire until its context ends, so
// the lease outlives many TTLs, and then returns nil.
func TestKeepAliveExtendsUntilCanceled(t *testing.T) {
	ctx := testCtx(t)
	st := &fakeStore{Store: newMemoryStore(t)}
	// Short, so that extends come quickly, yet long enough that a loaded
	// machine's scheduling delays never let the lease run out between two.
	l := lock.New(st).Lock("k", lock.TTL(300*time.Millisecond))
	assert.ErrorIs(t, l.KeepAlive(ctx), lock.ErrNotHeld, "no lease to keep alive")
	require.NoError(t, l.Acquire(ctx))

	kaCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.KeepAlive(kaCtx) }()
	require.Eventually(t, func() bool { return st.extends.Load() >= 5 }, patience, time.Millisecond,
		"extends keep coming")
	info, err := st.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked, "the lease outlived its TTL several times")
	assert.Equal(t, l.Token(), info.Token)
	stop()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(patience):
		t.Fatal("KeepAlive did not return when its context ended")
	}
	ok, err := l.Release(ctx)
	require.NoError(t, err)
	assert.True(t, ok)
}

// KeepAlive returns an error matching ErrNotHeld when the lease is lost, and
// when extends fail until the lease's local deadline: it may be lost.
func TestKeepAliveReportsALostLease(t *testing.T) {
	ctx := testCtx(t)
	t.Run("released elsewhere", func(t *testing.T) {
		st := newMemoryStore(t)
		l := lock.New(st).Lock("k", lock.TTL(30*time.Millisecond))
		require.NoError(t, l.Acquire(ctx))
		other, err := lock.New(st).Restore(l.Serialize())
		require.NoError(t, err)
		ok, err := other.Release(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		err = l.KeepAlive(ctx)
		assert.ErrorIs(t, err, lock.ErrNotHeld)
		assert.ErrorContains(t, err, "was lost")
	})
	t.Run("extends fail", func(t *testing.T) {
		st := &fakeStore{Store: newMemoryStore(t), extend: func(context.Context, string, lock.Owner, time.Duration) (lock.Lease, error) {
			return lock.Lease{}, lock.ErrUnavailable
		}}
		l := lock.New(st).Lock("k", lock.TTL(30*time.Millisecond))
		require.NoError(t, l.Acquire(ctx))
		err := l.KeepAlive(ctx)
		assert.ErrorIs(t, err, lock.ErrNotHeld)
		assert.ErrorContains(t, err, "may have been lost")
		assert.GreaterOrEqual(t, st.extends.Load(), int32(2), "failed extends were retried")
	})
}

// staleStore is a store with local state: its stale reads answer from a
// table of its own, so a test can tell which read was used.
type staleStore struct {
	lock.Store
	local map[string]lock.KeyInfo
}

func (s *staleStore) InspectStale(key string) (lock.KeyInfo, error) { return s.local[key], nil }

func (s *staleStore) ListStale(lock.ListRequest) ([]lock.LockInfo, error) {
	var out []lock.LockInfo
	for k, info := range s.local {
		out = append(out, lock.LockInfo{Key: k, KeyInfo: info})
	}
	return out, nil
}

// Stale reads go to a store's local state when it has one, and are ordinary
// reads otherwise; without Stale a read is never served locally.
func TestStaleReads(t *testing.T) {
	ctx := testCtx(t)
	mem := newMemoryStore(t)
	st := &staleStore{Store: mem, local: map[string]lock.KeyInfo{"old": {Locked: true, Token: 7}}}
	c := lock.New(st)

	info, err := c.Inspect(ctx, "old", lock.Stale())
	require.NoError(t, err)
	assert.Equal(t, lock.KeyInfo{Locked: true, Token: 7}, info, "answered from local state")
	info, err = c.Inspect(ctx, "old")
	require.NoError(t, err)
	assert.False(t, info.Locked, "a linearizable read asks the store")
	locks, err := c.List(ctx, lock.ListRequest{}, lock.Stale())
	require.NoError(t, err)
	assert.Equal(t, []lock.LockInfo{{Key: "old", KeyInfo: lock.KeyInfo{Locked: true, Token: 7}}}, locks)
	_, err = c.Inspect(ctx, "", lock.Stale())
	assert.ErrorIs(t, err, lock.ErrInvalidKey, "validated before either read")

	plain := lock.New(mem) // no local state: Stale changes nothing
	require.NoError(t, plain.Lock("k", lock.TTL(time.Minute)).Acquire(ctx))
	info, err = plain.Inspect(ctx, "k", lock.Stale())
	require.NoError(t, err)
	assert.True(t, info.Locked)
	locks, err = plain.List(ctx, lock.ListRequest{}, lock.Stale())
	require.NoError(t, err)
	assert.Len(t, locks, 1)
}
