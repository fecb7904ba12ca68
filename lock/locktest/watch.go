package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// Watches (lock.Watcher): a store that implements it is held to the
// blocking-query contract; the subtests skip otherwise.
//
// "Stays quiet" is never proven by sleeping: a watch of the key under test
// and a watch of another key start from the same index; a change to the
// other key wakes its watch, and the first must still be waiting then (a
// store that woke every watcher on any change would have woken both).
// TestWatcher runs only the watch subtests of the suite (TestStoreWith runs
// them with the rest): for a store whose other behaviours are checked
// elsewhere, such as the HTTP client of a cluster follower.
func TestWatcher(t *testing.T, newStore func(t *testing.T) lock.Store, opts Options) {
	newSuite(newStore, opts).runWatchTests(t)
}

func (s *suite) runWatchTests(t *testing.T) {
	for _, tc := range []subtest{
		{"Watch/Key", s.testWatchKey},
		{"Watch/SessionEnd", s.testWatchSessionEnd},
		{"Watch/Prefix", s.testWatchPrefix},
		{"Watch/SharedHolders", s.testWatchSharedHolders},
		{"Watch/NoMissedChange", s.testWatchNoMissedChange},
		{"Watch/WaitEnds", s.testWatchWaitEnds},
		{"Watch/ContextEnds", s.testWatchContextEnds},
		{"Watch/Iterator", s.testWatchIterator},
	} {
		t.Run(tc.name, tc.run)
	}
}

func (s *suite) watcher(t *testing.T) (lock.Store, lock.Watcher) {
	st := s.newStore(t)
	return st, storeAs[lock.Watcher](t, st, "cannot watch (it does not implement lock.Watcher)")
}

type watchAnswer struct {
	info  lock.KeyInfo
	locks []lock.LockInfo
	index uint64
	err   error
}

// watchKeyAsync starts a blocking query on k after index, with a wait longer
// than any subtest.
func watchKeyAsync(ctx context.Context, w lock.Watcher, k string, index uint64) <-chan watchAnswer {
	return async(func() watchAnswer {
		info, i, err := w.WatchKey(ctx, k, lock.WatchQuery{Index: index, Wait: time.Hour})
		return watchAnswer{info: info, index: i, err: err}
	})
}

func watchListAsync(ctx context.Context, w lock.Watcher, prefix string, index uint64) <-chan watchAnswer {
	return async(func() watchAnswer {
		locks, i, err := w.WatchList(ctx, lock.ListRequest{Prefix: prefix}, lock.WatchQuery{Index: index, Wait: time.Hour})
		return watchAnswer{locks: locks, index: i, err: err}
	})
}

// woken waits for a watch's answer, which must come within Patience.
func (s *suite) woken(t *testing.T, done <-chan watchAnswer, what string) watchAnswer {
	t.Helper()
	a := receive(t, s.Patience, done, "the watch was not woken by "+what)
	require.NoError(t, a.err, what)
	return a
}

// now is a watch's answer at once (index 0).
func now(t *testing.T, ctx context.Context, w lock.Watcher, k string) (lock.KeyInfo, uint64) {
	t.Helper()
	info, index, err := w.WatchKey(ctx, k, lock.WatchQuery{})
	require.NoError(t, err)
	require.NotZero(t, index, "a watch answers an index")
	return info, index
}

// fence changes another key, waits until a watch of it started from index
// is woken, and then requires that waiting is still waiting.
func (s *suite) fence(t *testing.T, ctx context.Context, st lock.Store, w lock.Watcher, index uint64, waiting <-chan watchAnswer, what string) {
	t.Helper()
	other := key(t, "fence")
	otherWatch := watchKeyAsync(ctx, w, other, index)
	o, _ := acquire(t, ctx, st, other, long)
	s.woken(t, otherWatch, "a change to the fence key")
	_, err := st.Release(ctx, other, o)
	require.NoError(t, err)
	select {
	case a := <-waiting:
		assert.Fail(t, "a watch was woken by a change to another key", "%s: %+v", what, a)
	default:
	}
}

// Each change a watcher must hear of wakes it; a change to another key does
// not.
func (s *suite) testWatchKey(t *testing.T) {
	st, w := s.watcher(t)
	ctx := s.ctx(t)
	k := key(t, "k")
	info, index := now(t, ctx, w, k)
	assert.Equal(t, lock.KeyInfo{}, info)

	// Grant.
	watch := watchKeyAsync(ctx, w, k, index)
	s.fence(t, ctx, st, w, index, watch, "before the grant")
	holder, lease := acquire(t, ctx, st, k, long)
	a := s.woken(t, watch, "the grant")
	assert.True(t, a.info.Locked)
	assert.Equal(t, lease.Token, a.info.Token)
	assert.Greater(t, a.index, index, "the index grows with a change")
	index = a.index

	// Queue change: a waiter joins.
	watch = watchKeyAsync(ctx, w, k, index)
	s.fence(t, ctx, st, w, index, watch, "before the waiter")
	waiter := acquireAsync(ctx, st, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: s.ShortTTL, Wait: s.Patience})
	a = s.woken(t, watch, "a waiter joining the queue")
	if a.info.Waiters == 0 { // woken before the waiter could be seen: a spurious wake, allowed once
		a = s.woken(t, watchKeyAsync(ctx, w, k, a.index), "a waiter joining the queue")
	}
	assert.Equal(t, 1, a.info.Waiters)
	index = a.index

	// Release: hand-off to the waiter.
	watch = watchKeyAsync(ctx, w, k, index)
	s.fence(t, ctx, st, w, index, watch, "before the release")
	release(t, ctx, st, k, holder)
	a = s.woken(t, watch, "the release and hand-off")
	granted := s.await(t, waiter, "the waiter's grant")
	require.NoError(t, granted.err)
	assert.True(t, a.info.Locked)
	assert.Equal(t, granted.lease.Token, a.info.Token, "the watch sees the new holder")
	assert.Zero(t, a.info.Waiters)
	index = a.index

	// Expiry: the waiter's short lease runs out with nobody releasing it.
	a = s.woken(t, watchKeyAsync(ctx, w, k, index), "the expiry")
	for a.info.Locked { // woken by something a reader cannot tell (an extend, a tick): go on
		a = s.woken(t, watchKeyAsync(ctx, w, k, a.index), "the expiry")
	}
	assert.False(t, a.info.Locked)
	index = a.index

	// Force-release (an operator's), when the store has it.
	if admin, ok := st.(lock.AdminStore); ok {
		_, lease := acquire(t, ctx, st, k, long)
		a = s.woken(t, watchKeyAsync(ctx, w, k, index), "a grant")
		assert.Equal(t, lease.Token, a.info.Token)
		watch = watchKeyAsync(ctx, w, k, a.index)
		s.fence(t, ctx, st, w, a.index, watch, "before the force-release")
		_, err := admin.ForceRelease(ctx, k)
		require.NoError(t, err)
		a = s.woken(t, watch, "the force-release")
		assert.False(t, a.info.Locked)
	}
}

// A session's end releases its keys, and wakes their watchers.
func (s *suite) testWatchSessionEnd(t *testing.T) {
	st, w := s.watcher(t)
	ss, ok := st.(lock.SessionStore)
	if !ok {
		t.Skipf("%T has no sessions", st)
	}
	ctx := s.ctx(t)
	k := key(t, "k")
	id := s.createSession(t, ctx, ss, long)
	_, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), Session: id})
	require.NoError(t, err)
	// A store that answers from local state (a cluster follower) may not
	// show the grant yet: watch until it does.
	info, index := now(t, ctx, w, k)
	for !info.Locked {
		a := s.woken(t, watchKeyAsync(ctx, w, k, index), "the grant")
		info, index = a.info, a.index
	}
	watch := watchKeyAsync(ctx, w, k, index)
	s.fence(t, ctx, st, w, index, watch, "before the session's end")
	ended, err := ss.DestroySession(ctx, id)
	require.NoError(t, err)
	require.True(t, ended)
	a := s.woken(t, watch, "the session's end")
	assert.False(t, a.info.Locked)
}

// A prefix watch wakes for a key under the prefix, not for one outside it,
// and answers the held keys under it.
func (s *suite) testWatchPrefix(t *testing.T) {
	st, w := s.watcher(t)
	ctx := s.ctx(t)
	prefix := key(t, "dir/")
	locks, index, err := w.WatchList(ctx, lock.ListRequest{Prefix: prefix}, lock.WatchQuery{})
	require.NoError(t, err)
	assert.Empty(t, locks)
	watch := watchListAsync(ctx, w, prefix, index)
	s.fence(t, ctx, st, w, index, watch, "a key outside the prefix") // key(t, "fence") is not under dir/
	_, lease := acquire(t, ctx, st, prefix+"a", long)
	a := s.woken(t, watch, "a grant under the prefix")
	require.Len(t, a.locks, 1)
	assert.Equal(t, prefix+"a", a.locks[0].Key)
	assert.Equal(t, lease.Token, a.locks[0].Token)
	assert.Greater(t, a.index, index)
}

// A change applied between two calls wakes the second at once.
func (s *suite) testWatchNoMissedChange(t *testing.T) {
	st, w := s.watcher(t)
	ctx := s.ctx(t)
	k := key(t, "k")
	_, index := now(t, ctx, w, k)
	_, lease := acquire(t, ctx, st, k, long) // between the two calls
	a := s.woken(t, watchKeyAsync(ctx, w, k, index), "a change made before the call")
	assert.True(t, a.info.Locked)
	assert.Equal(t, lease.Token, a.info.Token)

	prefix := key(t, "dir/")
	_, index, err := w.WatchList(ctx, lock.ListRequest{Prefix: prefix}, lock.WatchQuery{})
	require.NoError(t, err)
	acquire(t, ctx, st, prefix+"x", long)
	a = s.woken(t, watchListAsync(ctx, w, prefix, index), "a change under the prefix made before the call")
	assert.Len(t, a.locks, 1)
}

// A wait that ends answers the state and index as they are, without error.
func (s *suite) testWatchWaitEnds(t *testing.T) {
	_, w := s.watcher(t)
	ctx := s.ctx(t)
	k := key(t, "k")
	_, index := now(t, ctx, w, k)
	info, next, err := w.WatchKey(ctx, k, lock.WatchQuery{Index: index, Wait: 10 * time.Millisecond})
	require.NoError(t, err)
	assert.False(t, info.Locked)
	assert.GreaterOrEqual(t, next, index)

	_, _, err = w.WatchKey(ctx, k, lock.WatchQuery{Index: index, Wait: -time.Second})
	assert.ErrorIs(t, err, lock.ErrInvalidWait)
	_, _, err = w.WatchKey(ctx, "", lock.WatchQuery{})
	assert.ErrorIs(t, err, lock.ErrInvalidKey)
}

// A watch ends with its context.
func (s *suite) testWatchContextEnds(t *testing.T) {
	_, w := s.watcher(t)
	ctx := s.ctx(t)
	k := key(t, "k")
	_, index := now(t, ctx, w, k)
	wctx, cancel := context.WithCancel(ctx)
	watch := watchKeyAsync(wctx, w, k, index)
	cancel()
	select {
	case a := <-watch:
		assert.True(t, errors.Is(a.err, context.Canceled), "the error matches ctx's: %v", a.err)
	case <-time.After(s.Patience):
		require.FailNow(t, "the watch did not end with its context")
	}
}

// Client.Watch yields the state now, then each change.
func (s *suite) testWatchIterator(t *testing.T) {
	st, _ := s.watcher(t)
	ctx := s.ctx(t)
	c := lock.New(st)
	k := key(t, "k")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type seen struct {
		info lock.KeyInfo
		err  error
	}
	states := make(chan seen, 16)
	go func() {
		defer close(states)
		for info, err := range c.Watch(wctx, k) {
			states <- seen{info, err}
			if err != nil {
				return
			}
		}
	}()
	next := func(what string) lock.KeyInfo {
		t.Helper()
		select {
		case v := <-states:
			require.NoError(t, v.err, what)
			return v.info
		case <-time.After(s.Patience):
			require.FailNow(t, "timed out", "Watch did not yield %s", what)
			return lock.KeyInfo{}
		}
	}
	assert.False(t, next("the state now").Locked)
	o, lease := acquire(t, ctx, st, k, long)
	got := next("the grant")
	assert.True(t, got.Locked)
	assert.Equal(t, lease.Token, got.Token)
	_, err := st.Release(ctx, k, o)
	require.NoError(t, err)
	assert.False(t, next("the release").Locked)
	cancel()
	for v := range states { // drained: ends with ctx's error
		if v.err != nil {
			assert.ErrorIs(t, v.err, context.Canceled)
		}
	}
}

// A holder joining or leaving a semaphore or a read/write lock's readers is
// a change too (Holders counts them).
func (s *suite) testWatchSharedHolders(t *testing.T) {
	st, w := s.watcher(t)
	ctx := s.ctx(t)
	for _, req := range []lock.AcquireRequest{
		{Key: key(t, "sem"), Kind: lock.KindSemaphore, Limit: 3, TTL: long},
		{Key: key(t, "rw"), Kind: lock.KindRWLock, Shared: true, TTL: long},
	} {
		req.Owner = lock.NewOwner()
		_, err := st.Acquire(ctx, req)
		require.NoError(t, err)
		info, index := now(t, ctx, w, req.Key)
		for info.Holders != 1 { // a follower may not show the grant yet
			a := s.woken(t, watchKeyAsync(ctx, w, req.Key, index), "the first grant")
			info, index = a.info, a.index
		}
		watch := watchKeyAsync(ctx, w, req.Key, index)
		s.fence(t, ctx, st, w, index, watch, "before the second holder")
		second := req
		second.Owner = lock.NewOwner()
		lease, err := st.Acquire(ctx, second)
		require.NoError(t, err)
		a := s.woken(t, watch, "a second holder of "+req.Kind.String())
		assert.Equal(t, 2, a.info.Holders, req.Kind.String())
		assert.Equal(t, lease.Token, a.info.Token, "the newest holder's token")

		watch = watchKeyAsync(ctx, w, req.Key, a.index)
		release(t, ctx, st, req.Key, second.Owner)
		a = s.woken(t, watch, "a holder of "+req.Kind.String()+" leaving")
		assert.Equal(t, 1, a.info.Holders, req.Kind.String())
	}
}
