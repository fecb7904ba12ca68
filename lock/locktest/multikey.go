package locktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// multiKeyStore is a store that takes multi-key locks.
type multiKeyStore interface {
	lock.Store
	lock.MultiKeyStore
}

// multiStore is the store of a multi-key subtest, which skips for a store
// that does not take multi-key locks.
func (s *suite) multiStore(t *testing.T) multiKeyStore {
	return storeAs[multiKeyStore](t, s.newStore(t), "does not implement lock.MultiKeyStore")
}

// allReq is a multi-key request for a fresh owner (keys sorted here).
func allReq(ttl, wait time.Duration, keys ...string) lock.AcquireRequest {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	return lock.AcquireRequest{Key: keys[0], Keys: keys, Owner: lock.NewOwner(), TTL: ttl, Wait: wait}
}

func acquireAllAsync(ctx context.Context, st multiKeyStore, req lock.AcquireRequest) <-chan outcome {
	return async(func() outcome {
		lease, err := st.AcquireAll(ctx, req)
		return outcome{lease, err}
	})
}

// A set is granted all at once with one token that every key shows, or
// not at all: a set with one key held leaves the free keys free.
func (s *suite) testMultiKeyAllOrNothing(t *testing.T) {
	st := s.multiStore(t)
	ctx := s.ctx(t)
	a, b, c := key(t, "a"), key(t, "b"), key(t, "c")
	holder, before := acquire(t, ctx, st, b, long)

	_, err := st.AcquireAll(ctx, allReq(long, 0, c, a, b))
	var held *lock.HeldError
	require.ErrorAs(t, err, &held, "b is held")
	assert.Equal(t, before.Token, held.Token)
	for _, k := range []string{a, c} {
		assert.False(t, inspect(t, ctx, st, k).Locked, "never a partial grant: %q stays free", k)
	}

	free(t, ctx, st, lock.AcquireRequest{Key: b, Owner: holder})
	req := allReq(long, 0, a, b, c)
	lease, err := st.AcquireAll(ctx, req)
	require.NoError(t, err)
	assert.Greater(t, lease.Token, before.Token)
	for _, k := range []string{a, b, c} {
		info := inspect(t, ctx, st, k)
		assert.True(t, info.Locked, k)
		assert.Equal(t, lease.Token, info.Token, "one token for the set: %q", k)
		assert.Equal(t, sortedKeys(a, b, c), info.SetKeys, "%q shows its set's keys", k)
		assert.Nil(t, info.Holds, "a mutex lists no holds")
	}
	if w, ok := st.(lock.Watcher); ok { // a watch reports a key as Inspect does
		info, _, err := w.WatchKey(ctx, b, lock.WatchQuery{Consistent: true})
		require.NoError(t, err)
		assert.Equal(t, sortedKeys(a, b, c), info.SetKeys, "WatchKey shows the set's keys")
		list, _, err := w.WatchList(ctx, lock.ListRequest{Prefix: key(t, "")}, lock.WatchQuery{Consistent: true})
		require.NoError(t, err)
		require.Len(t, list, 3)
		for _, l := range list {
			assert.Equal(t, sortedKeys(a, b, c), l.SetKeys, "WatchList shows %q's set's keys", l.Key)
		}
	}
	// The retry is the same grant; another set of the same owner is held.
	again, err := st.AcquireAll(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, lease.Token, again.Token)
	other := req
	other.Keys, other.Key = []string{a, b}, a
	_, err = st.AcquireAll(ctx, other)
	assert.ErrorIs(t, err, lock.ErrLocked, "one owner, one set")

	// Extend and release by any key act on the whole set.
	_, err = st.Extend(ctx, c, req.Owner, long)
	require.NoError(t, err)
	release(t, ctx, st, b, req.Owner)
	for _, k := range []string{a, b, c} {
		assert.False(t, inspect(t, ctx, st, k).Locked, "the release of b released %q", k)
	}
}

// A waiting set reserves the free keys it heads (a try-acquire of one
// finds it held, a waiter queues behind), is granted every key when its
// last one frees, and its release hands each key to its next waiter.
func (s *suite) testMultiKeyFIFO(t *testing.T) {
	st := s.multiStore(t)
	ctx := s.ctx(t)
	a, b := key(t, "a"), key(t, "b")
	holder, first := acquire(t, ctx, st, b, long)
	set := allReq(long, s.Patience, a, b)
	setDone := acquireAllAsync(ctx, st, set)
	s.awaitWaiters(t, ctx, st, a, 1)
	info := inspect(t, ctx, st, a)
	assert.False(t, info.Locked, "nobody holds a reserved key")
	assert.True(t, info.Reserved, "a is kept for the set")
	assert.Nil(t, info.SetKeys, "nobody holds a")
	info = inspect(t, ctx, st, b)
	assert.False(t, info.Reserved, "b is held")
	assert.Nil(t, info.SetKeys, "b's holder holds no set")

	_, err := st.Acquire(ctx, lock.AcquireRequest{Key: a, Owner: lock.NewOwner(), TTL: long})
	assert.ErrorIs(t, err, lock.ErrLocked, "a key reserved for a waiting set is not free")
	later := lock.AcquireRequest{Key: a, Owner: lock.NewOwner(), TTL: long, Wait: s.Patience}
	laterDone := acquireAsync(ctx, st, later)
	s.awaitWaiters(t, ctx, st, a, 2)

	free(t, ctx, st, lock.AcquireRequest{Key: b, Owner: holder})
	got := s.await(t, setDone, "the set")
	require.NoError(t, got.err)
	assert.Greater(t, got.lease.Token, first.Token)
	select {
	case o := <-laterDone:
		t.Fatalf("the waiter behind the set was granted first: %+v", o)
	default:
	}
	release(t, ctx, st, a, set.Owner)
	o := s.await(t, laterDone, "the waiter behind the set")
	require.NoError(t, o.err)
	assert.Greater(t, o.lease.Token, got.lease.Token)
	assert.False(t, inspect(t, ctx, st, b).Locked, "b was released with the set")
	free(t, ctx, st, later)
}

// A set's lease expires on every key at once, and its wait running out
// (or its caller giving up) hands the keys it reserved on.
func (s *suite) testMultiKeyExpiry(t *testing.T) {
	st := s.multiStore(t)
	ctx := s.ctx(t)
	a, b := key(t, "a"), key(t, "b")
	set := allReq(s.ShortTTL, 0, a, b)
	lease, err := st.AcquireAll(ctx, set)
	require.NoError(t, err)
	w := lock.AcquireRequest{Key: b, Owner: lock.NewOwner(), TTL: long, Wait: s.Patience}
	o := s.await(t, acquireAsync(ctx, st, w), "the waiter for the expired set's key")
	require.NoError(t, o.err)
	assert.Greater(t, o.lease.Token, lease.Token)
	assert.False(t, inspect(t, ctx, st, a).Locked, "a expired with b")

	// A set waiting on b (held by w) reserves a; when its caller gives up,
	// a goes to the waiter behind it.
	waitCtx, cancel := context.WithCancel(ctx)
	waiting := allReq(long, s.Patience, a, b)
	setDone := acquireAllAsync(waitCtx, st, waiting)
	s.awaitWaiters(t, ctx, st, a, 1)
	behind := lock.AcquireRequest{Key: a, Owner: lock.NewOwner(), TTL: long, Wait: s.Patience}
	behindDone := acquireAsync(ctx, st, behind)
	s.awaitWaiters(t, ctx, st, a, 2)
	cancel()
	got := s.await(t, setDone, "the canceled set")
	assert.ErrorIs(t, got.err, context.Canceled)
	o = s.await(t, behindDone, "the waiter behind the canceled set")
	require.NoError(t, o.err)
	assert.Zero(t, inspect(t, ctx, st, b).Waiters, "the set left every queue")
	free(t, ctx, st, behind)
	free(t, ctx, st, w)
}

// Bad key sets and keys of another kind are refused, changing nothing.
func (s *suite) testMultiKeyBadInput(t *testing.T) {
	st := s.multiStore(t)
	ctx := s.ctx(t)
	a, b, sem := key(t, "a"), key(t, "b"), key(t, "sem")
	many := make([]string, lock.MaxKeys+1)
	for i := range many {
		many[i] = key(t, fmt.Sprintf("k%03d", i))
	}
	dup := allReq(long, 0, a, b)
	dup.Keys = []string{a, a}
	unsorted := allReq(long, 0, a, b)
	unsorted.Keys, unsorted.Key = []string{b, a}, b
	badKey := allReq(long, 0, a, b)
	badKey.Key = b
	session := allReq(long, 0, a, b)
	session.TTL, session.Session = 0, lock.NewSessionID()
	for name, tc := range map[string]struct {
		req  lock.AcquireRequest
		want error
	}{
		"duplicate key":     {dup, lock.ErrInvalidKey},
		"too many keys":     {allReq(long, 0, many...), lock.ErrInvalidKey},
		"no keys":           {lock.AcquireRequest{Keys: []string{}, Owner: lock.NewOwner(), TTL: long}, lock.ErrInvalidKey},
		"unsorted":          {unsorted, lock.ErrInvalidKey},
		"key not the first": {badKey, lock.ErrInvalidKey},
		"session":           {session, lock.ErrInvalidSession},
		"no ttl":            {allReq(0, 0, a, b), lock.ErrInvalidTTL},
		"semaphore in the set": {func() lock.AcquireRequest {
			r := allReq(long, 0, a, b)
			r.Kind, r.Limit = lock.KindSemaphore, 2
			return r
		}(), lock.ErrInvalidKind},
		"empty key in the set": {func() lock.AcquireRequest { r := allReq(long, 0, a, b); r.Keys = []string{"", a}; r.Key = ""; return r }(), lock.ErrInvalidKey},
	} {
		_, err := st.AcquireAll(ctx, tc.req)
		assert.ErrorIs(t, err, tc.want, name)
	}
	semHolder := grab(t, ctx, st, semReq(sem, 2))
	_, err := st.AcquireAll(ctx, allReq(long, s.Patience, a, sem))
	var mismatch *lock.KindMismatchError
	require.ErrorAs(t, err, &mismatch)
	assert.Equal(t, sem, mismatch.Key)
	assert.Equal(t, lock.KindSemaphore, mismatch.Kind)
	for _, k := range []string{a, b} {
		info := inspect(t, ctx, st, k)
		assert.False(t, info.Locked, k)
		assert.Zero(t, info.Waiters, k)
	}
	_ = semHolder
}

// Handles over the same keys listed in every order, and a single-key
// handle on one of them, take turns without deadlock or overlap, and the
// tokens each key sees grow.
func (s *suite) testMultiKeyNoDeadlock(t *testing.T) {
	st := s.multiStore(t)
	ctx := s.ctx(t)
	a, b, c := key(t, "a"), key(t, "b"), key(t, "c")
	client := lock.New(st)
	var mu sync.Mutex
	inside := map[string]int{}
	lastToken := map[string]uint64{}
	var failures []string
	enter := func(keys []string, token uint64) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			inside[k]++
			if inside[k] > 1 {
				failures = append(failures, fmt.Sprintf("%q held twice", k))
			}
			if token <= lastToken[k] {
				failures = append(failures, fmt.Sprintf("%q: token %d after %d", k, token, lastToken[k]))
			}
			lastToken[k] = token
		}
	}
	leave := func(keys []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			inside[k]--
		}
	}
	handles := []*lock.Lock{
		client.LockAll([]string{a, b, c}, lock.TTL(long), lock.Wait(s.Patience)),
		client.LockAll([]string{c, b, a}, lock.TTL(long), lock.Wait(s.Patience)),
		client.LockAll([]string{b, a}, lock.TTL(long), lock.Wait(s.Patience)),
		client.LockAll([]string{c, a}, lock.TTL(long), lock.Wait(s.Patience)),
		client.Lock(b, lock.TTL(long), lock.Wait(s.Patience)),
	}
	const rounds = 10
	var wg sync.WaitGroup
	errs := make(chan error, len(handles))
	for _, h := range handles {
		wg.Go(func() {
			keys := h.Keys()
			if keys == nil {
				keys = []string{h.Key()}
			}
			for range rounds {
				ran, err := h.Run(ctx, func(ctx context.Context) error {
					enter(keys, h.Token())
					leave(keys)
					return nil
				})
				if err != nil || !ran {
					errs <- fmt.Errorf("%v: ran %v: %w", keys, ran, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Empty(t, failures)
	for _, k := range []string{a, b, c} {
		assert.False(t, inspect(t, ctx, st, k).Locked, k)
	}
}

// A LockAll handle: Run holds every key with one token and releases them
// all; a store without multi-key locks says so.
func (s *suite) testMultiKeyHandle(t *testing.T) {
	st, ctx := s.begin(t)
	a, b := key(t, "a"), key(t, "b")
	h := lock.New(st).LockAll([]string{b, a}, lock.TTL(long))
	assert.Equal(t, []string{a, b}, h.Keys())
	assert.Equal(t, a, h.Key())
	if _, ok := st.(lock.MultiKeyStore); !ok {
		_, err := h.TryAcquire(ctx)
		assert.ErrorIs(t, err, errors.ErrUnsupported)
		return
	}
	ran, err := h.Run(ctx, func(ctx context.Context) error {
		for _, k := range []string{a, b} {
			info := inspect(t, ctx, st, k)
			assert.True(t, info.Locked, k)
			assert.Equal(t, h.Token(), info.Token, k)
		}
		ok, err := lock.New(st).Lock(b).TryAcquire(ctx)
		assert.NoError(t, err)
		assert.False(t, ok, "b is held by the set")
		return nil
	})
	require.NoError(t, err)
	require.True(t, ran)
	for _, k := range []string{a, b} {
		assert.False(t, inspect(t, ctx, st, k).Locked, k)
	}
	_, err = lock.New(st).LockAll([]string{a, a}).TryAcquire(ctx)
	assert.ErrorIs(t, err, lock.ErrInvalidKey)
}

// sortedKeys is keys in byte order: how KeyInfo.SetKeys lists a set.
func sortedKeys(keys ...string) []string {
	return slices.Sorted(slices.Values(keys))
}
