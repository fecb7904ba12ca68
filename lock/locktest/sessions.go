package locktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// sessionStore is the store as a SessionStore; the session tests need one.
func (s *suite) sessionStore(t *testing.T) (lock.Store, lock.SessionStore) {
	st := s.newStore(t)
	return st, storeAs[lock.SessionStore](t, st, "has no sessions (it does not implement lock.SessionStore)")
}

func (s *suite) createSession(t *testing.T, ctx context.Context, ss lock.SessionStore, ttl time.Duration) lock.SessionID {
	t.Helper()
	id := lock.NewSessionID()
	lease, err := ss.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: ttl})
	require.NoError(t, err, "create session")
	assert.Positive(t, lease.Remaining)
	assert.LessOrEqual(t, lease.Remaining, ttl)
	return id
}

// Metadata given at acquire is shown by Inspect and List, for the holder
// and, once granted, for a waiter; oversized metadata is refused.
func (s *suite) testMetadata(t *testing.T) {
	st, ctx := s.begin(t)
	k := key(t, "k")
	a := lock.NewOwner()
	_, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: a, TTL: long, Metadata: "host=a pid=1"})
	require.NoError(t, err)
	info := inspect(t, ctx, st, k)
	assert.Equal(t, "host=a pid=1", info.Metadata)
	assert.NotContains(t, info.Metadata, a.String())
	if l, ok := st.(lock.Lister); ok {
		locks, err := l.List(ctx, lock.ListRequest{Prefix: k})
		require.NoError(t, err)
		require.Len(t, locks, 1)
		assert.Equal(t, "host=a pid=1", locks[0].Metadata)
	}

	b := lock.NewOwner()
	done := acquireAsync(ctx, st, lock.AcquireRequest{Key: k, Owner: b, TTL: long, Wait: s.Patience, Metadata: "host=b"})
	s.awaitWaiters(t, ctx, st, k, 1)
	release(t, ctx, st, k, a)
	require.NoError(t, s.await(t, done, "B's grant").err)
	assert.Equal(t, "host=b", inspect(t, ctx, st, k).Metadata, "the waiter's metadata comes with its grant")

	_, err = st.Acquire(ctx, lock.AcquireRequest{Key: key(t, "big"), Owner: lock.NewOwner(), TTL: long, Metadata: strings.Repeat("x", lock.MaxMetadataLen+1)})
	assert.ErrorIs(t, err, lock.ErrInvalidMetadata)
	assert.Contains(t, fmt.Sprint(err), "metadata")
	assert.False(t, inspect(t, ctx, st, key(t, "big")).Locked, "nothing changed")
	_, err = st.Acquire(ctx, lock.AcquireRequest{Key: key(t, "max"), Owner: lock.NewOwner(), TTL: long, Metadata: strings.Repeat("x", lock.MaxMetadataLen)})
	assert.NoError(t, err, "MaxMetadataLen bytes are fine")
}

func (s *suite) testSessionBadInput(t *testing.T) {
	st, ss := s.sessionStore(t)
	ctx := s.ctx(t)
	for _, req := range []lock.SessionRequest{
		{TTL: time.Second},
		{ID: lock.NewSessionID()},
		{ID: lock.NewSessionID(), TTL: lock.MaxTTL + 1},
		{ID: lock.NewSessionID(), TTL: time.Second, LockDelay: lock.MaxLockDelay + 1},
	} {
		_, err := ss.CreateSession(ctx, req)
		assert.ErrorIs(t, err, lock.ErrInvalidSession, "%+v", req)
	}
	_, err := ss.RenewSession(ctx, lock.SessionID{})
	assert.ErrorIs(t, err, lock.ErrInvalidSession)
	_, err = ss.DestroySession(ctx, lock.SessionID{})
	assert.ErrorIs(t, err, lock.ErrInvalidSession)
	_, err = ss.InspectSession(ctx, lock.SessionID{})
	assert.ErrorIs(t, err, lock.ErrInvalidSession)
	info, err := ss.InspectSession(ctx, lock.NewSessionID())
	require.NoError(t, err)
	assert.Equal(t, lock.SessionInfo{}, info, "an unknown session is not live")

	id := s.createSession(t, ctx, ss, long)
	_, err = st.Acquire(ctx, lock.AcquireRequest{Key: key(t, "k"), Owner: lock.NewOwner(), TTL: time.Second, Session: id})
	assert.ErrorIs(t, err, lock.ErrInvalidTTL, "a session-bound lock has no TTL")
	_, err = st.Acquire(ctx, lock.AcquireRequest{Key: key(t, "k"), Owner: lock.NewOwner(), Session: lock.NewSessionID()})
	assert.ErrorIs(t, err, lock.ErrNoSession, "an unknown session")
	_, err = ss.RenewSession(ctx, lock.NewSessionID())
	assert.ErrorIs(t, err, lock.ErrNoSession)
	ok, err := ss.DestroySession(ctx, lock.NewSessionID())
	require.NoError(t, err)
	assert.False(t, ok)
	assert.False(t, inspect(t, ctx, st, key(t, "k")).Locked, "nothing changed")
}

// Renewals keep a session's locks well past its TTL; a create retry
// changes nothing.
func (s *suite) testSessionRenew(t *testing.T) {
	st, ss := s.sessionStore(t)
	ctx := s.ctx(t)
	ttl := 2 * s.ShortTTL
	id := lock.NewSessionID()
	req := lock.SessionRequest{ID: id, TTL: ttl}
	_, err := ss.CreateSession(ctx, req)
	require.NoError(t, err)
	_, err = ss.CreateSession(ctx, req)
	require.NoError(t, err, "a create is idempotent")
	k := key(t, "k")
	lease, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), Session: id})
	require.NoError(t, err)
	assert.LessOrEqual(t, lease.Remaining, ttl, "a session-bound lock lasts at most the session")
	assert.Zero(t, lease.TTL, "a session-bound lock has no lease of its own")
	// Renew every third of the TTL, as a keep-alive does, for three TTLs.
	renewals := time.NewTicker(ttl / 3)
	defer renewals.Stop()
	for range 9 {
		sl, err := ss.RenewSession(ctx, id)
		require.NoError(t, err, "renew")
		require.Positive(t, sl.Remaining)
		assert.Equal(t, 1, sl.Keys, "a renew counts the session's keys")
		<-renewals.C
	}
	info := inspect(t, ctx, st, k)
	assert.True(t, info.Locked, "held for three TTLs by renewals")
	assert.Equal(t, lease.Token, info.Token)
	si, err := ss.InspectSession(ctx, id)
	require.NoError(t, err)
	assert.True(t, si.Live)
	assert.Equal(t, ttl, si.TTL)
	assert.Positive(t, si.Remaining)
	assert.LessOrEqual(t, si.Remaining, ttl)
	assert.Equal(t, 1, si.Keys)
	ok, err := ss.DestroySession(ctx, id)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.False(t, inspect(t, ctx, st, k).Locked, "the destroy released it")
	si, err = ss.InspectSession(ctx, id)
	require.NoError(t, err)
	assert.False(t, si.Live, "destroyed")
}

// A create of a live session is a retry: it answers the session the
// store holds, not lengthened, whatever TTL the retry asks. Its TTL never
// overstates the session's (a keep-alive paced by it would renew too
// late) nor understates what is left of it.
func (s *suite) testSessionCreateRetry(t *testing.T) {
	_, ss := s.sessionStore(t)
	ctx := s.ctx(t)
	const ttl = long / 2
	id := lock.NewSessionID()
	created, err := ss.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: ttl})
	require.NoError(t, err)
	assert.Equal(t, ttl, created.TTL, "a new session has the TTL asked")
	assert.Positive(t, created.Remaining)
	assert.LessOrEqual(t, created.Remaining, ttl)

	for _, asked := range []time.Duration{ttl, 2 * ttl, ttl / 4} {
		retry, err := ss.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: asked})
		require.NoError(t, err, "a retry asking %v", asked)
		assert.LessOrEqual(t, retry.TTL, ttl, "a retry asking %v: TTL never more than the session's", asked)
		assert.Positive(t, retry.Remaining, "a retry asking %v", asked)
		assert.LessOrEqual(t, retry.Remaining, retry.TTL, "a retry asking %v: no more left than the TTL", asked)
	}
	info, err := ss.InspectSession(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, ttl, info.TTL, "the retries changed nothing")
	assert.LessOrEqual(t, info.Remaining, ttl)
	_, err = ss.DestroySession(ctx, id)
	require.NoError(t, err)
}

// A session that is not renewed expires by itself: its locks go to their
// waiters (a session-bound one among them), a key nobody waits for is
// free, and the session is gone for renew and acquire.
func (s *suite) testSessionExpiryHandsOff(t *testing.T) {
	st, ss := s.sessionStore(t)
	ctx := s.ctx(t)
	id := s.createSession(t, ctx, ss, s.ShortTTL)
	other := s.createSession(t, ctx, ss, long)
	k1, k2 := key(t, "k1"), key(t, "k2")
	l1, err := st.Acquire(ctx, lock.AcquireRequest{Key: k1, Owner: lock.NewOwner(), Session: id})
	require.NoError(t, err)
	_, err = st.Acquire(ctx, lock.AcquireRequest{Key: k2, Owner: lock.NewOwner(), Session: id})
	require.NoError(t, err)
	b := lock.NewOwner()
	lease, err := st.Acquire(ctx, lock.AcquireRequest{Key: k1, Owner: b, Session: other, Wait: s.Patience, Metadata: "b"})
	require.NoError(t, err, "B is handed k1 when the session expires")
	assert.Greater(t, lease.Token, l1.Token)
	info := inspect(t, ctx, st, k1)
	assert.True(t, info.Locked)
	assert.Equal(t, lease.Token, info.Token)
	assert.Equal(t, "b", info.Metadata)
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, k2)
		return err == nil && !info.Locked
	}, s.Patience, time.Millisecond, "k2 is freed by the session's expiry")
	_, err = ss.RenewSession(ctx, id)
	assert.ErrorIs(t, err, lock.ErrNoSession, "an expired session cannot be renewed")
	_, err = st.Acquire(ctx, lock.AcquireRequest{Key: key(t, "k3"), Owner: lock.NewOwner(), Session: id})
	assert.ErrorIs(t, err, lock.ErrNoSession)
	ok, err := ss.DestroySession(ctx, id)
	require.NoError(t, err)
	assert.False(t, ok, "a session that expired is not ended by its destroy")
	ok, err = ss.DestroySession(ctx, other)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.False(t, inspect(t, ctx, st, k1).Locked)
}

// Destroying a session releases all its locks at once, each to its next
// waiter, and drops the session's own waiters.
func (s *suite) testSessionDestroy(t *testing.T) {
	st, ss := s.sessionStore(t)
	ctx := s.ctx(t)
	id := s.createSession(t, ctx, ss, long)
	keys := []string{key(t, "a"), key(t, "b"), key(t, "c")}
	for _, k := range keys {
		_, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), Session: id})
		require.NoError(t, err)
	}
	var waiting []<-chan outcome
	for _, k := range keys[:2] {
		_, done := s.queue(t, ctx, st, k, 1)
		waiting = append(waiting, done)
	}
	// The session also waits for a key someone else holds.
	held := key(t, "held")
	acquire(t, ctx, st, held, long)
	sessionWaiter := acquireAsync(ctx, st, lock.AcquireRequest{Key: held, Owner: lock.NewOwner(), Session: id, Wait: s.Patience})
	s.awaitWaiters(t, ctx, st, held, 1)

	ok, err := ss.DestroySession(ctx, id)
	require.NoError(t, err)
	assert.True(t, ok)
	for i, w := range waiting {
		o := s.await(t, w, "a waiter's grant")
		require.NoError(t, o.err)
		info := inspect(t, ctx, st, keys[i])
		assert.True(t, info.Locked)
		assert.Equal(t, o.lease.Token, info.Token)
	}
	assert.False(t, inspect(t, ctx, st, keys[2]).Locked, "a key nobody waits for is free")
	o := s.await(t, sessionWaiter, "the session's waiter")
	assert.ErrorIs(t, o.err, lock.ErrNoSession, "the session's waiter leaves with it")
	assert.Equal(t, 0, inspect(t, ctx, st, held).Waiters)

	ok, err = ss.DestroySession(ctx, id)
	require.NoError(t, err)
	assert.True(t, ok, "a repeat of the destroy that ended it")
}

// The Go API: a session's keep-alive, handles bound to it, Run canceling
// its callback when the session ends, Close releasing everything.
func (s *suite) testSessionHandle(t *testing.T) {
	st, ss := s.sessionStore(t)
	ctx := s.ctx(t)
	c := lock.New(st)
	sess, err := c.NewSession(ctx, lock.SessionTTL(s.ShortTTL))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	sc := c.WithSession(sess)

	// Held across several TTLs by the session's keep-alive alone.
	l := sc.Lock(key(t, "held"), lock.Metadata("worker 1"))
	require.NoError(t, l.Acquire(ctx))
	threeTTLs := time.NewTimer(3 * s.ShortTTL)
	select {
	case <-threeTTLs.C:
	case <-sess.Done():
		require.FailNow(t, "the session ended", "%v", sess.Err())
	}
	expired, err := l.IsExpired(ctx)
	require.NoError(t, err)
	assert.False(t, expired, "the session keeps its lock alive")
	assert.Equal(t, "worker 1", inspect(t, ctx, st, l.Key()).Metadata)
	_, ok := l.Remaining()
	assert.True(t, ok)

	// The session ends under Run (destroyed by someone who knows its ID):
	// the keep-alive learns it and fn's context is canceled.
	var cause error
	ran, err := sc.Lock(key(t, "run")).Run(ctx, func(fnCtx context.Context) error {
		ok, err := ss.DestroySession(ctx, sess.ID())
		require.NoError(t, err)
		require.True(t, ok)
		select {
		case <-fnCtx.Done():
			cause = context.Cause(fnCtx)
			return nil
		case <-time.After(s.Patience):
			return errors.New("fn's context was not canceled")
		}
	})
	assert.True(t, ran)
	assert.ErrorIs(t, err, lock.ErrNotHeld, "Run says the lock was lost")
	assert.ErrorIs(t, cause, lock.ErrNoSession, "fn's context says why")
	<-sess.Done()
	assert.ErrorIs(t, sess.Err(), lock.ErrNoSession)
	assert.False(t, inspect(t, ctx, st, l.Key()).Locked, "the session's locks went with it")
	assert.ErrorIs(t, sc.Lock(key(t, "late")).Acquire(ctx), lock.ErrNoSession, "no acquire on an ended session")

	// Close destroys a live session: its locks are free at once.
	sess2, err := c.NewSession(ctx)
	require.NoError(t, err)
	l2 := c.WithSession(sess2).Lock(key(t, "closed"))
	require.NoError(t, l2.Acquire(ctx))
	require.NoError(t, sess2.Close(ctx))
	assert.False(t, inspect(t, ctx, st, l2.Key()).Locked)
	assert.NoError(t, sess2.Close(ctx), "Close is idempotent")
}

// A lock bound to a session that an admin force-releases, and another
// owner then takes, is lost to its holder though the session lives on: the
// session's keep-alive finds it gone, Run cancels fn's context with a cause
// matching ErrNotHeld and reports the loss, and the session's other lock
// stays held.
func (s *suite) testSessionHoldLost(t *testing.T) {
	st, _ := s.sessionStore(t)
	admin := storeAs[lock.AdminStore](t, st, "does not implement lock.AdminStore")
	ctx := s.ctx(t)
	c := lock.New(st)
	sess, err := c.NewSession(ctx, lock.SessionTTL(s.ShortTTL))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	sc := c.WithSession(sess)
	other := sc.Lock(key(t, "other"))
	require.NoError(t, other.Acquire(ctx))

	k := key(t, "k")
	var cause error
	ran, err := sc.Lock(k).Run(ctx, func(fnCtx context.Context) error {
		_, err := admin.ForceRelease(ctx, k)
		require.NoError(t, err)
		taken, err := c.Lock(k).TryAcquire(ctx)
		require.NoError(t, err)
		require.True(t, taken, "another owner takes the key")
		select {
		case <-fnCtx.Done():
			cause = context.Cause(fnCtx)
			return nil
		case <-time.After(s.Patience):
			return errors.New("fn's context was not canceled")
		}
	})
	assert.True(t, ran)
	assert.ErrorIs(t, cause, lock.ErrNotHeld, "fn's context says the lock is lost")
	assert.ErrorIs(t, err, lock.ErrNotHeld, "Run says the lock was lost")
	assert.NoError(t, sess.Err(), "the session lives on")
	expired, err := other.IsExpired(ctx)
	require.NoError(t, err)
	assert.False(t, expired, "the session's other lock is still held")
}

// MaxHold cancels Run's callback at the cap and releases the lock, though
// the keep-alive would have kept it.
func (s *suite) testMaxHold(t *testing.T) {
	st, ctx := s.begin(t)
	c := lock.New(st)
	l := c.Lock(key(t, "k"), lock.TTL(s.ShortTTL))
	var cause error
	var lockedAfter bool
	ran, err := l.Run(ctx, func(fnCtx context.Context) error {
		select {
		case <-fnCtx.Done():
			cause = context.Cause(fnCtx)
		case <-time.After(s.Patience):
			return errors.New("fn's context was not canceled at the cap")
		}
		// Released at the cap, before fn returns.
		require.Eventually(t, func() bool {
			info, err := st.Inspect(ctx, l.Key())
			lockedAfter = err == nil && info.Locked
			return err == nil && !info.Locked
		}, s.Patience, time.Millisecond)
		return nil
	}, lock.MaxHold(2*s.ShortTTL))
	assert.True(t, ran)
	assert.NoError(t, err, "a cap is not a loss")
	assert.ErrorIs(t, cause, lock.ErrMaxHold)
	assert.False(t, lockedAfter)
}

// After a session expires (not after a destroy), a lock-delay keeps its
// keys from everyone, then hands them to their waiters.
func (s *suite) testSessionLockDelay(t *testing.T) {
	st, ss := s.sessionStore(t)
	ctx := s.ctx(t)
	id := lock.NewSessionID()
	// A delay long enough that the checks below fall inside it on a loaded machine.
	_, err := ss.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: s.ShortTTL, LockDelay: 8 * s.ShortTTL})
	require.NoError(t, err)
	k := key(t, "k")
	l, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), Session: id, Metadata: "gone"})
	require.NoError(t, err)
	var delayed lock.KeyInfo
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, k)
		delayed = info
		return err == nil && info.Delayed
	}, s.Patience, time.Millisecond, "the session expires into its lock-delay")
	assert.True(t, delayed.Locked, "nobody can take it")
	assert.Equal(t, l.Token, delayed.Token)
	assert.Empty(t, delayed.Metadata, "nobody holds it")
	_, err = st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: long})
	assert.ErrorIs(t, err, lock.ErrLocked, "taken during the lock-delay")
	lease, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: long, Wait: s.Patience})
	require.NoError(t, err, "a waiter gets it when the delay runs out")
	assert.Greater(t, lease.Token, l.Token)
	info := inspect(t, ctx, st, k)
	assert.False(t, info.Delayed)
	assert.True(t, info.Locked)
}
