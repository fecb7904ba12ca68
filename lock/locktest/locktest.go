// Package locktest is the conformance suite for lock.Store, in the manner of
// testing/fstest.TestFS: every store (the memory store, a cluster node, the
// HTTP client of a remote node) runs TestStore and so is held to one set of
// semantics.
//
// The suite checks the Store contract directly (mutual exclusion under load,
// expiry and hand-off to waiters, FIFO order, idempotent acquire and
// release, compare-and-act release and extend, wait and cancel leaving the queue, fencing tokens,
// what Inspect may reveal, bad input) and the handle behaviours of package
// lock that depend on the store (Run releasing after an error or a panic, Run
// canceling its callback when the lease is lost, Serialize/Restore, IsExpired),
// and the other kinds of key: semaphores (N holders, FIFO, each with its own
// token) and read/write locks (readers share, a writer excludes and is not
// starved), and an acquire of a kind the key is not; and, for a store that
// implements lock.MultiKeyStore, multi-key locks (all or nothing, one token
// per grant, FIFO with single-key waiters and reserved keys, no deadlock
// between sets listed in any order, release and expiry of the whole set
// handing each key on).
//
// Every subtest uses keys under its own name, so a store may be shared between
// subtests, and keeps its leases short so that the whole suite takes a few
// seconds. Nothing waits with a sleep: conditions are awaited with a deadline,
// and a store that misses one fails the test rather than hanging it.
//
// A store that implements lock.AdminStore is also held to its contract
// (force-release hands off to the next waiter; the former holder's Release
// and Extend then find the lock not held, and the holder of a lock bound to
// a session learns of it through the session's keep-alive); the subtests
// skip otherwise.
package locktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// Options tunes the suite for slower stores. The zero value suits a store that
// answers within a few milliseconds.
type Options struct {
	// ShortTTL is the lease the expiry tests let run out, and Run's lease in
	// the keep-alive test (extended every ShortTTL/3). Default 150ms. Raise it
	// for a store whose round trip is a sizable part of that.
	ShortTTL time.Duration
	// Patience bounds every wait for a condition: a store that has not done
	// what it must within it fails. Default 10s.
	Patience time.Duration
}

// TestStore runs the conformance suite against stores made by newStore, which
// is called once per subtest and must register its own cleanup with t.Cleanup.
// It may return the same store every time.
func TestStore(t *testing.T, newStore func(t *testing.T) lock.Store) {
	TestStoreWith(t, newStore, Options{})
}

// TestStoreWith is TestStore with options.
func TestStoreWith(t *testing.T, newStore func(t *testing.T) lock.Store, opts Options) {
	s := newSuite(newStore, opts)
	for _, tc := range []subtest{
		{"BadInput", s.testBadInput},
		{"Exclusion", s.testExclusion},
		{"ExpiryHandsOff", s.testExpiryHandsOff},
		{"ExpiryFreesKey", s.testExpiryFreesKey},
		{"IdempotentAcquire", s.testIdempotentAcquire},
		{"NonOwner", s.testNonOwner},
		{"IdempotentRelease", s.testIdempotentRelease},
		{"Extend", s.testExtend},
		{"FIFO", s.testFIFO},
		{"ReleaseWakesWaiter", s.testReleaseWakesWaiter},
		{"WaitRunsOut", s.testWaitRunsOut},
		{"CancelWhileWaiting", s.testCancelWhileWaiting},
		{"TokensIncrease", s.testTokensIncrease},
		{"Inspect", s.testInspect},
		{"ForceRelease", s.testForceRelease},
		{"Handle/RunReleasesAfterError", s.testRunReleasesAfterError},
		{"Handle/RunReleasesAfterPanic", s.testRunReleasesAfterPanic},
		{"Handle/RunCancelsWhenLost", s.testRunCancelsWhenLost},
		{"Handle/Held", s.testHandleHeld},
		{"Handle/Restore", s.testRestore},
		{"Handle/IsExpired", s.testIsExpired},
		{"Handle/MaxHold", s.testMaxHold},
		{"Metadata", s.testMetadata},
		{"Session/BadInput", s.testSessionBadInput},
		{"Session/Renew", s.testSessionRenew},
		{"Session/CreateRetry", s.testSessionCreateRetry},
		{"Session/ExpiryHandsOff", s.testSessionExpiryHandsOff},
		{"Session/Destroy", s.testSessionDestroy},
		{"Session/LockDelay", s.testSessionLockDelay},
		{"Session/Handle", s.testSessionHandle},
		{"Session/HoldLost", s.testSessionHoldLost},
		{"Semaphore", s.testSemaphore},
		{"RWLock", s.testRWLock},
		{"KindMismatch", s.testKindMismatch},
		{"KindHandles", s.testKindHandles},
		{"MultiKey/AllOrNothing", s.testMultiKeyAllOrNothing},
		{"MultiKey/FIFO", s.testMultiKeyFIFO},
		{"MultiKey/Expiry", s.testMultiKeyExpiry},
		{"MultiKey/BadInput", s.testMultiKeyBadInput},
		{"MultiKey/NoDeadlock", s.testMultiKeyNoDeadlock},
		{"MultiKey/Handle", s.testMultiKeyHandle},
	} {
		t.Run(tc.name, tc.run)
	}
	s.runWatchTests(t)     // watch.go
	s.runReportingTests(t) // reporting.go
}

// subtest is a row of the suite's tables of subtests.
type subtest struct {
	name string
	run  func(t *testing.T)
}

type suite struct {
	newStore func(t *testing.T) lock.Store
	Options
}

// newSuite is the suite with opts' zero fields set to their defaults.
func newSuite(newStore func(t *testing.T) lock.Store, opts Options) *suite {
	if opts.ShortTTL <= 0 {
		opts.ShortTTL = 150 * time.Millisecond
	}
	if opts.Patience <= 0 {
		opts.Patience = 10 * time.Second
	}
	return &suite{newStore: newStore, Options: opts}
}

// storeAs is st as T, an optional interface that a subtest needs; the
// subtest skips, saying that st lacks (what lacks says), for a store that
// does not implement it.
func storeAs[T any](t *testing.T, st lock.Store, lacks string) T {
	t.Helper()
	v, ok := st.(T)
	if !ok {
		t.Skipf("%T %s", st, lacks)
	}
	return v
}

// long is a lease that never runs out during a subtest.
const long = 10 * time.Minute

// key names a key private to the running subtest.
func key(t *testing.T, name string) string { return "locktest/" + t.Name() + "/" + name }

// begin gives a subtest its store and a context that bounds the whole
// subtest.
func (s *suite) begin(t *testing.T) (lock.Store, context.Context) {
	return s.newStore(t), s.ctx(t)
}

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*s.Patience)
	t.Cleanup(cancel)
	return ctx
}

// acquire takes k for a fresh owner, failing the test if it cannot.
func acquire(t *testing.T, ctx context.Context, st lock.Store, k string, ttl time.Duration) (lock.Owner, lock.Lease) {
	t.Helper()
	o := lock.NewOwner()
	lease, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: o, TTL: ttl})
	require.NoError(t, err, "acquire %q", k)
	require.NotZero(t, lease.Token, "a grant has a fencing token")
	return o, lease
}

// release ends o's hold on k, failing the test if the store errs or o did
// not hold k.
func release(t *testing.T, ctx context.Context, st lock.Store, k string, o lock.Owner, msgAndArgs ...any) {
	t.Helper()
	ok, err := st.Release(ctx, k, o)
	require.NoError(t, err, "release %q", k)
	require.True(t, ok, msgAndArgs...)
}

// assertNotHolder asserts that o, who does not hold k (any more), can neither
// release it (the release finds nothing) nor extend it (ErrNotHeld); who
// names o in the failure messages.
func assertNotHolder(t *testing.T, ctx context.Context, st lock.Store, k string, o lock.Owner, who string) {
	t.Helper()
	releaseFindsNothing(t, ctx, st, k, o, "release by %s", who)
	_, err := st.Extend(ctx, k, o, long)
	assert.ErrorIs(t, err, lock.ErrNotHeld, "extend by %s", who)
	// Every store words it alike, naming the key (a remote one's error
	// carries the store's words inside its own).
	assert.ErrorContains(t, err, notHeld(k), "extend by %s", who)
}

// notHeld is how a store says that the owner does not hold key: the
// wording of the state machine's stores, which every store shares.
func notHeld(key string) string { return fmt.Sprintf("%v: %q", lock.ErrNotHeld, key) }

// releaseFindsNothing asserts that o's release of k answers "not held"
// without an error: o does not hold k (any more).
func releaseFindsNothing(t *testing.T, ctx context.Context, st lock.Store, k string, o lock.Owner, msgAndArgs ...any) {
	t.Helper()
	ok, err := st.Release(ctx, k, o)
	require.NoError(t, err, "release %q", k)
	assert.False(t, ok, msgAndArgs...)
}

func inspect(t *testing.T, ctx context.Context, st lock.Store, k string) lock.KeyInfo {
	t.Helper()
	info, err := st.Inspect(ctx, k)
	require.NoError(t, err, "inspect %q", k)
	return info
}

// awaitWaiters waits until n callers queue for k.
func (s *suite) awaitWaiters(t *testing.T, ctx context.Context, st lock.Store, k string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, k)
		return err == nil && info.Waiters == n
	}, s.Patience, time.Millisecond, "waiting for %d waiters on %q", n, k)
}

type outcome struct {
	lease lock.Lease
	err   error
}

// acquireAsync starts a waiting acquire and returns where its outcome arrives.
func acquireAsync(ctx context.Context, st lock.Store, req lock.AcquireRequest) <-chan outcome {
	return async(func() outcome {
		lease, err := st.Acquire(ctx, req)
		return outcome{lease, err}
	})
}

// async runs f in a goroutine of its own and returns where its answer
// arrives (buffered: the goroutine never blocks on it).
func async[T any](f func() T) <-chan T {
	done := make(chan T, 1)
	go func() { done <- f() }()
	return done
}

// receive is what done delivers, failing the test with failure if nothing
// arrives within patience.
func receive[T any](t *testing.T, patience time.Duration, done <-chan T, failure string) T {
	t.Helper()
	select {
	case v := <-done:
		return v
	case <-time.After(patience):
		require.FailNow(t, "timed out", failure)
		var zero T
		return zero
	}
}

// queue starts a waiting acquire of k under ctx for a fresh owner (lease
// long, wait the suite's patience) and returns once n callers queue on k:
// the owner, and where the acquire's outcome arrives.
func (s *suite) queue(t *testing.T, ctx context.Context, st lock.Store, k string, n int) (lock.Owner, <-chan outcome) {
	t.Helper()
	o := lock.NewOwner()
	done := acquireAsync(ctx, st, lock.AcquireRequest{Key: k, Owner: o, TTL: long, Wait: s.Patience})
	s.awaitWaiters(t, ctx, st, k, n)
	return o, done
}

func (s *suite) await(t *testing.T, done <-chan outcome, what string) outcome {
	t.Helper()
	return receive(t, s.Patience, done, "waiting for "+what)
}

func (s *suite) testBadInput(t *testing.T) {
	st, ctx := s.begin(t)
	held := key(t, "held")
	free := key(t, "free")
	holder, lease := acquire(t, ctx, st, held, long)
	stranger := lock.NewOwner()
	tooLong := strings.Repeat("k", lock.MaxKeyLen+1)
	acq := func(k string, o lock.Owner, ttl, wait time.Duration) func() error {
		return func() error {
			_, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: o, TTL: ttl, Wait: wait})
			return err
		}
	}
	rel := func(k string, o lock.Owner) func() error {
		return func() error { _, err := st.Release(ctx, k, o); return err }
	}
	ext := func(k string, o lock.Owner, ttl time.Duration) func() error {
		return func() error { _, err := st.Extend(ctx, k, o, ttl); return err }
	}
	insp := func(k string) func() error {
		return func() error { _, err := st.Inspect(ctx, k); return err }
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"acquire empty key", acq("", stranger, time.Second, 0), lock.ErrInvalidKey},
		{"acquire 513-byte key", acq(tooLong, stranger, time.Second, 0), lock.ErrInvalidKey},
		{"acquire zero ttl", acq(free, stranger, 0, 0), lock.ErrInvalidTTL},
		{"acquire negative ttl", acq(free, stranger, -time.Second, 0), lock.ErrInvalidTTL},
		{"acquire ttl below minimum", acq(free, stranger, lock.MinTTL-1, 0), lock.ErrInvalidTTL},
		{"acquire absurd ttl", acq(free, stranger, lock.MaxTTL+1, 0), lock.ErrInvalidTTL},
		{"acquire negative wait", acq(held, stranger, time.Second, -1), lock.ErrInvalidWait},
		{"acquire absurd wait", acq(held, stranger, time.Second, lock.MaxWait+1), lock.ErrInvalidWait},
		{"acquire zero owner", acq(free, lock.Owner{}, time.Second, 0), lock.ErrInvalidOwner},
		{"acquire held key, zero owner", acq(held, lock.Owner{}, time.Second, time.Second), lock.ErrInvalidOwner},
		{"release empty key", rel("", holder), lock.ErrInvalidKey},
		{"release 513-byte key", rel(tooLong, holder), lock.ErrInvalidKey},
		{"release zero owner", rel(held, lock.Owner{}), lock.ErrInvalidOwner},
		{"extend empty key", ext("", holder, time.Second), lock.ErrInvalidKey},
		{"extend zero owner", ext(held, lock.Owner{}, time.Second), lock.ErrInvalidOwner},
		{"extend zero ttl", ext(held, holder, 0), lock.ErrInvalidTTL},
		{"extend negative ttl", ext(held, holder, -time.Second), lock.ErrInvalidTTL},
		{"extend absurd ttl", ext(held, holder, lock.MaxTTL+1), lock.ErrInvalidTTL},
		{"inspect empty key", insp(""), lock.ErrInvalidKey},
		{"inspect 513-byte key", insp(tooLong), lock.ErrInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "lock: "), "message %q has the package prefix", err)

			// Nothing changed: the holder still holds with its token and
			// (close to) its expiry, nobody queued, the free key is free.
			info := inspect(t, ctx, st, held)
			assert.True(t, info.Locked)
			assert.Equal(t, lease.Token, info.Token)
			assert.Greater(t, info.Remaining, long-time.Minute, "the lease was not shortened")
			assert.Zero(t, info.Waiters)
			assert.Equal(t, lock.KeyInfo{}, inspect(t, ctx, st, free))
		})
	}

	t.Run("longest key is valid", func(t *testing.T) {
		k := key(t, "")
		k += strings.Repeat("k", lock.MaxKeyLen-len(k))
		o, _ := acquire(t, ctx, st, k, long)
		release(t, ctx, st, k, o)
	})
}

func (s *suite) testExclusion(t *testing.T) {
	st, ctx := s.begin(t)
	keys := []string{key(t, "a"), key(t, "b"), key(t, "c")}
	inside := make([]atomic.Int32, len(keys))
	const workers, rounds = 8, 64
	var granted, overlaps atomic.Int64
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var errs []error
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		errs = append(errs, err)
	}
	for w := range workers {
		wg.Go(func() {
			// Half the workers queue for the key, so hand-offs are exercised
			// as well as immediate grants.
			wait := time.Duration(0)
			if w%2 == 1 {
				wait = s.Patience
			}
			for range rounds {
				i := rand.IntN(len(keys))
				o := lock.NewOwner()
				_, err := st.Acquire(ctx, lock.AcquireRequest{Key: keys[i], Owner: o, TTL: long, Wait: wait})
				if errors.Is(err, lock.ErrLocked) && wait == 0 {
					continue
				}
				if err != nil {
					fail(fmt.Errorf("acquire %q: %w", keys[i], err))
					return
				}
				granted.Add(1)
				if inside[i].Add(1) != 1 {
					overlaps.Add(1)
				}
				for range rand.IntN(3) {
					runtime.Gosched() // let other goroutines run inside the critical section
				}
				inside[i].Add(-1)
				ok, err := st.Release(ctx, keys[i], o)
				if err != nil || !ok {
					fail(fmt.Errorf("release %q: ok=%v err=%v", keys[i], ok, err))
					return
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	assert.Zero(t, overlaps.Load(), "two owners held one key at once")
	assert.GreaterOrEqual(t, granted.Load(), int64(workers/2*rounds), "every waiting worker got the key every round")
	for _, k := range keys {
		assert.Equal(t, lock.KeyInfo{}, inspect(t, ctx, st, k), "%q is free at the end", k)
	}
}

// A's lease runs out while B waits: B is handed the key by the store's own
// expiry (nobody polls), and A, too late, can neither release nor extend.
func (s *suite) testExpiryHandsOff(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	a, leaseA := acquire(t, ctx, st, k, s.ShortTTL)
	b := lock.NewOwner()
	lease, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: b, TTL: long, Wait: s.Patience})
	require.NoError(t, err, "B is handed the key when A's lease runs out")
	assert.Greater(t, lease.Token, leaseA.Token)

	assertNotHolder(t, ctx, st, k, a, "A after expiry")

	info := inspect(t, ctx, st, k)
	assert.True(t, info.Locked, "B still holds the key")
	assert.Equal(t, lease.Token, info.Token)

	release(t, ctx, st, k, b)
	assert.False(t, inspect(t, ctx, st, k).Locked)
}

// A's lease runs out with nobody waiting: the key is free for anyone.
func (s *suite) testExpiryFreesKey(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	a, leaseA := acquire(t, ctx, st, k, s.ShortTTL)
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, k)
		return err == nil && !info.Locked
	}, s.Patience, time.Millisecond, "A's lease runs out")

	b, leaseB := acquire(t, ctx, st, k, long)
	assert.Greater(t, leaseB.Token, leaseA.Token)
	assertNotHolder(t, ctx, st, k, a, "A after expiry")
	assert.Equal(t, leaseB.Token, inspect(t, ctx, st, k).Token, "B still holds the key")
	release(t, ctx, st, k, b)
}

func (s *suite) testIdempotentAcquire(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	o, first := acquire(t, ctx, st, k, long)

	if first.TTL != 0 {
		assert.Equal(t, long, first.TTL, "a new grant's term is the TTL asked")
	}
	for _, wait := range []time.Duration{0, s.Patience} {
		again, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: o, TTL: long, Wait: wait})
		require.NoError(t, err, "the holder acquires again (wait %v)", wait)
		assert.Equal(t, first.Token, again.Token, "same grant, same token")
		assert.LessOrEqual(t, again.Remaining, first.Remaining, "the repeat does not lengthen the lease")

		// Another TTL changes nothing either, and the answer says so: it
		// describes the lease the owner has, not one of the TTL asked.
		longer := 2 * long
		again, err = st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: o, TTL: longer, Wait: wait})
		require.NoError(t, err, "the holder acquires again with a longer TTL (wait %v)", wait)
		assert.Equal(t, first.Token, again.Token, "same grant, same token")
		assert.LessOrEqual(t, again.Remaining, first.Remaining, "a longer TTL does not lengthen the lease")
		if again.TTL != 0 {
			assert.LessOrEqual(t, again.TTL, long, "the term reported is the lease's, not the TTL asked")
		}
		shorter := long / 2
		again, err = st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: o, TTL: shorter, Wait: wait})
		require.NoError(t, err, "the holder acquires again with a shorter TTL (wait %v)", wait)
		assert.Equal(t, first.Token, again.Token, "same grant, same token")
		assert.Greater(t, again.Remaining, shorter, "a shorter TTL does not shorten the lease")
		if again.TTL != 0 {
			assert.Greater(t, again.TTL, shorter, "the term reported is the lease's, not the TTL asked")
		}
	}
	info := inspect(t, ctx, st, k)
	assert.Equal(t, first.Token, info.Token)
	assert.Zero(t, info.Waiters, "the holder does not queue behind itself")
	release(t, ctx, st, k, o, "one release ends the lease")
	assert.False(t, inspect(t, ctx, st, k).Locked)
}

func (s *suite) testNonOwner(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	a, lease := acquire(t, ctx, st, k, long)
	b := lock.NewOwner()

	assertNotHolder(t, ctx, st, k, b, "a non-owner")
	releaseFindsNothing(t, ctx, st, key(t, "never-held"), b, "release of a free key")

	info := inspect(t, ctx, st, k)
	assert.True(t, info.Locked)
	assert.Equal(t, lease.Token, info.Token)
	release(t, ctx, st, k, a)
}

// A release sent again (its answer lost) returns true again, and touches
// the key's next holder no more than the first did; but only while it was
// this owner's release that ended its hold: once the owner held the key
// again and that lease ran out, its release returns false.
func (s *suite) testIdempotentRelease(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	a, _ := acquire(t, ctx, st, k, long)
	release(t, ctx, st, k, a)
	release(t, ctx, st, k, a, "the repeat of A's release")

	b, leaseB := acquire(t, ctx, st, k, long)
	release(t, ctx, st, k, a, "the repeat of A's release, with B holding")
	assert.Equal(t, leaseB.Token, inspect(t, ctx, st, k).Token, "B still holds the key")
	release(t, ctx, st, k, b)

	// The same owner holds the key again, and that lease runs out.
	_, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: a, TTL: s.ShortTTL})
	require.NoError(t, err, "A acquires again with the same owner")
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, k)
		return err == nil && !info.Locked
	}, s.Patience, time.Millisecond, "A's second lease runs out")
	releaseFindsNothing(t, ctx, st, k, a, "A's release after its second lease ran out")
}

func (s *suite) testExtend(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	o, lease := acquire(t, ctx, st, k, s.ShortTTL)

	extended, err := st.Extend(ctx, k, o, long)
	require.NoError(t, err)
	assert.Equal(t, lease.Token, extended.Token, "extend keeps the token")
	assert.Greater(t, extended.Remaining, s.ShortTTL)
	assert.LessOrEqual(t, extended.Remaining, long)
	info := inspect(t, ctx, st, k)
	assert.Greater(t, info.Remaining, s.ShortTTL, "the expiry moved out")
	assert.Equal(t, lease.Token, info.Token)

	// Extend sets the lease to end ttl from now, which may shorten it.
	shortened, err := st.Extend(ctx, k, o, s.ShortTTL)
	require.NoError(t, err)
	assert.LessOrEqual(t, shortened.Remaining, s.ShortTTL)
	assert.LessOrEqual(t, inspect(t, ctx, st, k).Remaining, s.ShortTTL)

	release(t, ctx, st, k, o)
}

// Three waiters queued in a known order are served in that order, each woken
// by the previous holder's release.
func (s *suite) testFIFO(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	holder, holderLease := acquire(t, ctx, st, k, long)

	const n = 3
	owners := make([]lock.Owner, n)
	done := make([]<-chan outcome, n)
	for i := range n {
		owners[i], done[i] = s.queue(t, ctx, st, k, i+1)
	}

	prev, prevOwner := holderLease.Token, holder
	for i := range n {
		release(t, ctx, st, k, prevOwner)
		got := s.await(t, done[i], fmt.Sprintf("waiter %d", i))
		require.NoError(t, got.err, "waiter %d is handed the key", i)
		assert.Greater(t, got.lease.Token, prev, "waiter %d gets a newer token", i)
		info := inspect(t, ctx, st, k)
		assert.Equal(t, got.lease.Token, info.Token, "waiter %d holds the key", i)
		assert.Equal(t, n-1-i, info.Waiters, "the others still queue")
		for j := i + 1; j < n; j++ {
			select {
			case o := <-done[j]:
				t.Fatalf("waiter %d returned before waiter %d released: %+v", j, i, o)
			default:
			}
		}
		prev, prevOwner = got.lease.Token, owners[i]
	}
	release(t, ctx, st, k, prevOwner)
}

// A waiter behind a holder whose lease would last minutes is woken by the
// holder's release, within the suite's patience, not by the lease's end.
func (s *suite) testReleaseWakesWaiter(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	holder, _ := acquire(t, ctx, st, k, long)
	waiter, done := s.queue(t, ctx, st, k, 1)

	release(t, ctx, st, k, holder)
	got := s.await(t, done, "the waiter")
	require.NoError(t, got.err)
	assert.Positive(t, got.lease.Remaining)
	release(t, ctx, st, k, waiter)
}

func (s *suite) testForceRelease(t *testing.T) {
	st := s.newStore(t)
	admin := storeAs[lock.AdminStore](t, st, "does not implement lock.AdminStore")
	ctx := s.ctx(t)
	k := key(t, "k")

	_, err := admin.ForceRelease(ctx, "")
	assert.ErrorIs(t, err, lock.ErrInvalidKey, "empty key")
	_, err = admin.ForceRelease(ctx, k)
	assert.ErrorIs(t, err, lock.ErrNotHeld, "a key nobody holds")

	holder, lease := acquire(t, ctx, st, k, long)
	waiter, done := s.queue(t, ctx, st, k, 1)

	token, err := admin.ForceRelease(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, lease.Token, token, "answers the token of the lease it ended")
	got := s.await(t, done, "the waiter")
	require.NoError(t, got.err, "the next waiter is handed the key")
	assert.Greater(t, got.lease.Token, lease.Token)

	// The former holder has lost the lock.
	assertNotHolder(t, ctx, st, k, holder, "the former holder")
	info := inspect(t, ctx, st, k)
	assert.True(t, info.Locked)
	assert.Equal(t, got.lease.Token, info.Token, "the waiter holds the key")

	token, err = admin.ForceRelease(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, got.lease.Token, token)
	assert.False(t, inspect(t, ctx, st, k).Locked, "nobody waited: the key is free")
	_, err = st.Extend(ctx, k, waiter, long)
	assert.ErrorIs(t, err, lock.ErrNotHeld)
	_, err = admin.ForceRelease(ctx, k)
	assert.ErrorIs(t, err, lock.ErrNotHeld, "a second force-release")
}

func (s *suite) testWaitRunsOut(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	_, lease := acquire(t, ctx, st, k, long)

	for _, wait := range []time.Duration{0, s.ShortTTL} {
		_, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: long, Wait: wait})
		var held *lock.HeldError
		require.ErrorAs(t, err, &held, "wait %v", wait)
		assert.ErrorIs(t, err, lock.ErrLocked)
		assert.Equal(t, k, held.Key)
		assert.Equal(t, lease.Token, held.Token, "the holder's token")
		assert.Positive(t, held.Remaining)
		assert.LessOrEqual(t, held.Remaining, long)

		info := inspect(t, ctx, st, k)
		assert.Zero(t, info.Waiters, "the queue is left (wait %v)", wait)
		assert.Equal(t, lease.Token, info.Token, "the holder keeps the key")
	}
}

func (s *suite) testCancelWhileWaiting(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	holder, lease := acquire(t, ctx, st, k, long)

	t.Run("cancel", func(t *testing.T) {
		waitCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		_, done := s.queue(t, waitCtx, st, k, 1)
		cancel()
		got := s.await(t, done, "the canceled waiter")
		assert.ErrorIs(t, got.err, context.Canceled)
		assert.ErrorContains(t, got.err, fmt.Sprintf("%q", k), "the error names the key waited for")
		s.assertQueueLeft(t, ctx, st, k, got.err)
		assert.Equal(t, lease.Token, inspect(t, ctx, st, k).Token)
	})
	t.Run("deadline", func(t *testing.T) {
		waitCtx, cancel := context.WithTimeout(ctx, s.ShortTTL)
		defer cancel()
		_, err := st.Acquire(waitCtx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: long, Wait: s.Patience})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, fmt.Sprintf("%q", k), "the error names the key waited for")
		s.assertQueueLeft(t, ctx, st, k, err)
		assert.Equal(t, lease.Token, inspect(t, ctx, st, k).Token)
	})

	release(t, ctx, st, k, holder)
	assert.False(t, inspect(t, ctx, st, k).Locked, "no canceled waiter was handed the key")
}

// assertQueueLeft checks that owner, whose waiting acquire of k ended with
// err as its caller gave up, no longer waits for k. A store that could not
// confirm the withdrawal says so (lock.ErrUnknownOutcome: under load, a
// cluster's cancel-wait may take longer than the caller waits for it); the
// withdrawal it sent still lands, or the wait runs out, so then the queue
// is left within the suite's patience rather than at once.
func (s *suite) assertQueueLeft(t *testing.T, ctx context.Context, st lock.Store, k string, err error) {
	t.Helper()
	if errors.Is(err, lock.ErrUnknownOutcome) {
		assert.Eventually(t, func() bool {
			info, err := st.Inspect(ctx, k)
			return err == nil && info.Waiters == 0
		}, s.Patience, time.Millisecond,
			"the queue is left (the acquire answered: %v)", err)
		return
	}
	assert.Zero(t, inspect(t, ctx, st, k).Waiters, "the queue is left (the acquire answered: %v)", err)
}

func (s *suite) testTokensIncrease(t *testing.T) {
	st, ctx := s.begin(t)
	var last uint64
	for round := range 3 {
		for _, name := range []string{"a", "b", "c"} {
			k := key(t, name)
			o, lease := acquire(t, ctx, st, k, long)
			assert.Greater(t, lease.Token, last, "round %d key %s", round, name)
			last = lease.Token
			release(t, ctx, st, k, o)
		}
	}
}

func (s *suite) testInspect(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	assert.Equal(t, lock.KeyInfo{}, inspect(t, ctx, st, k), "a free key")

	const ttl = time.Minute
	o, lease := acquire(t, ctx, st, k, ttl)
	info := inspect(t, ctx, st, k)
	assert.True(t, info.Locked)
	assert.Equal(t, lease.Token, info.Token)
	assert.Positive(t, info.Remaining)
	assert.LessOrEqual(t, info.Remaining, ttl)
	assert.LessOrEqual(t, lease.Remaining, ttl)
	assert.NotContains(t, fmt.Sprintf("%+v %#v", info, info), o.String(), "Inspect reveals no owner")

	_, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: ttl})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), o.String(), "a HeldError reveals no owner")
	assert.NotContains(t, fmt.Sprintf("%#v", err), fmt.Sprintf("%#v", o), "a HeldError reveals no owner")

	release(t, ctx, st, k, o)
	assert.Equal(t, lock.KeyInfo{}, inspect(t, ctx, st, k), "free again")
}

func (s *suite) testRunReleasesAfterError(t *testing.T) {
	c := lock.New(s.newStore(t))
	ctx := s.ctx(t)
	l := c.Lock(key(t, "k"), lock.TTL(long))
	boom := errors.New("boom")
	called := false
	ran, err := l.Run(ctx, func(ctx context.Context) error {
		called = true
		locked, err := l.IsLocked(ctx)
		require.NoError(t, err)
		assert.True(t, locked, "held while fn runs")
		return boom
	})
	assert.True(t, ran)
	assert.True(t, called)
	assert.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, lock.ErrNotHeld)
	locked, err := l.IsLocked(ctx)
	require.NoError(t, err)
	assert.False(t, locked, "released after fn's error")
	expired, err := l.IsExpired(ctx)
	require.NoError(t, err)
	assert.False(t, expired, "released, not lost")
}

func (s *suite) testRunReleasesAfterPanic(t *testing.T) {
	c := lock.New(s.newStore(t))
	ctx := s.ctx(t)
	l := c.Lock(key(t, "k"), lock.TTL(long))
	assert.PanicsWithValue(t, "boom", func() {
		_, _ = l.Run(ctx, func(context.Context) error { panic("boom") })
	})
	locked, err := l.IsLocked(ctx)
	require.NoError(t, err)
	assert.False(t, locked, "released after fn's panic")

	ran, err := l.TryRun(ctx, func(context.Context) error { return nil })
	require.NoError(t, err)
	assert.True(t, ran, "the handle can run again")
}

// Another process releases the lease with the serialized owner while Run's
// callback works: the keep-alive's next extend finds the lease gone and Run
// cancels the callback's context.
func (s *suite) testRunCancelsWhenLost(t *testing.T) {
	st, ctx := s.begin(t)
	c := lock.New(st)
	l := c.Lock(key(t, "k"), lock.TTL(s.ShortTTL))
	var cause error
	ran, err := l.Run(ctx, func(fnCtx context.Context) error {
		other, err := lock.New(st).Restore(l.Serialize())
		require.NoError(t, err)
		ok, err := other.Release(ctx)
		require.NoError(t, err)
		require.True(t, ok, "the other process releases the lease")
		select {
		case <-fnCtx.Done():
			cause = context.Cause(fnCtx)
			return fnCtx.Err()
		case <-time.After(s.Patience):
			return errors.New("fn's context was not canceled")
		}
	})
	assert.True(t, ran)
	assert.ErrorIs(t, err, lock.ErrNotHeld, "Run says the lease was lost")
	assert.ErrorIs(t, err, context.Canceled, "Run carries fn's error")
	assert.ErrorIs(t, cause, lock.ErrNotHeld, "fn's context says why")
	expired, err := l.IsExpired(ctx)
	require.NoError(t, err)
	assert.True(t, expired)
}

func (s *suite) testHandleHeld(t *testing.T) {
	st, ctx := s.begin(t)
	c := lock.New(st)
	k := key(t, "k")
	holder := c.Lock(k, lock.TTL(long))
	require.NoError(t, holder.Acquire(ctx))
	t.Cleanup(func() { _, _ = holder.Release(context.Background()) })

	other := c.Lock(k, lock.TTL(long))
	err := other.Acquire(ctx, lock.Wait(0))
	var held *lock.HeldError
	require.ErrorAs(t, err, &held)
	assert.Equal(t, k, held.Key)
	assert.Equal(t, holder.Token(), held.Token)

	ok, err := other.TryAcquire(ctx)
	require.NoError(t, err)
	assert.False(t, ok)
	ran, err := other.TryRun(ctx, func(context.Context) error {
		t.Error("fn ran while another handle held the key")
		return nil
	})
	require.NoError(t, err)
	assert.False(t, ran)
	ran, err = other.Run(ctx, func(context.Context) error {
		t.Error("fn ran while another handle held the key")
		return nil
	}, lock.Wait(s.ShortTTL))
	require.NoError(t, err)
	assert.False(t, ran, "Run's wait ran out")

	assert.Zero(t, other.Token(), "never held")
	_, ok = other.Remaining()
	assert.False(t, ok)
	ok, err = other.Release(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "a handle that never held releases nothing")
	assert.ErrorIs(t, other.Extend(ctx), lock.ErrNotHeld)
	locked, err := other.IsLocked(ctx)
	require.NoError(t, err)
	assert.True(t, locked, "IsLocked sees another owner's lock")
}

// A lock taken in one process is extended and released in another through
// Serialize and Restore.
func (s *suite) testRestore(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	l := lock.New(st).Lock(k, lock.TTL(s.ShortTTL))
	require.NoError(t, l.Acquire(ctx))

	restored, err := lock.New(st).Restore(l.Serialize())
	require.NoError(t, err)
	assert.Equal(t, k, restored.Key())
	assert.Equal(t, s.ShortTTL, restored.TTL())
	assert.Equal(t, l.Token(), restored.Token())

	require.NoError(t, restored.Extend(ctx, lock.TTL(long)))
	left, ok := restored.Remaining()
	assert.True(t, ok, "Remaining is known after an extend")
	assert.Greater(t, left, s.ShortTTL)
	info := inspect(t, ctx, st, k)
	assert.Equal(t, l.Token(), info.Token)
	assert.Greater(t, info.Remaining, s.ShortTTL, "the restored handle extended the original's lease")

	ok, err = restored.Release(ctx)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.False(t, inspect(t, ctx, st, k).Locked)
	expired, err := l.IsExpired(ctx)
	require.NoError(t, err)
	assert.True(t, expired, "the original learns its lease is gone")
	ok, err = l.Release(ctx)
	require.NoError(t, err)
	assert.False(t, ok)
}

func (s *suite) testIsExpired(t *testing.T) {
	st, ctx := s.begin(t)
	c := lock.New(st)
	l := c.Lock(key(t, "k"), lock.TTL(s.ShortTTL))
	expired, err := l.IsExpired(ctx)
	require.NoError(t, err)
	assert.False(t, expired, "never held")

	require.NoError(t, l.Acquire(ctx))
	expired, err = l.IsExpired(ctx)
	require.NoError(t, err)
	assert.False(t, expired, "just acquired")
	require.Eventually(t, func() bool {
		expired, err := l.IsExpired(ctx)
		return err == nil && expired
	}, s.Patience, time.Millisecond, "the lease runs out")
	_, ok := l.Remaining()
	assert.False(t, ok, "no time left once expired")
	assert.ErrorIs(t, l.Extend(ctx), lock.ErrNotHeld)

	// The handle acquires again, with a new token, and is no longer expired.
	first := l.Token()
	require.NoError(t, l.Acquire(ctx))
	assert.Greater(t, l.Token(), first)
	expired, err = l.IsExpired(ctx)
	require.NoError(t, err)
	assert.False(t, expired)
	ok, err = l.Release(ctx)
	require.NoError(t, err)
	assert.True(t, ok)
	expired, err = l.IsExpired(ctx)
	require.NoError(t, err)
	assert.False(t, expired, "released, not lost")
}
