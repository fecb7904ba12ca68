package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	sessionS = Owner{0xee, 15: 1}
	sessionT = Owner{0xef, 15: 2}
)

// sessionMachine is a machine with every kind of session state: a session
// holding two keys with waiters of both kinds, a lease holder queued behind
// it, metadata, and a key kept by a lock-delay.
func sessionMachine(tb testing.TB) *Machine {
	tb.Helper()
	return fixtureMachine(tb, []Command{
		createSession(0, sessionS, 100*ms, 0),
		createSession(0, sessionT, 10*ms, 50*ms),
		acquireIn(1*ms, "a", ownerA, sessionS, 0, "pid=1"),
		acquireIn(1*ms, "b", ownerA, sessionS, 0, ""),
		acquireIn(1*ms, "c", ownerB, sessionT, 0, "pid=2"),
		acquireIn(2*ms, "a", ownerB, sessionT, time.Second, "w"),
		{Op: OpAcquire, Stamp: 2 * ms, Key: "a", Owner: ownerC, TTL: time.Second, Wait: time.Second, Meta: "lease"},
		acquire(2*ms, "d", ownerC, time.Second, 0),
		tick(11 * ms), // T expires: "c" is kept for 50ms, B leaves the queue of "a"
	}, StatusInvalid, StatusNoSession)
}

func TestSessionLocksEndWithTheSession(t *testing.T) {
	r := newRecorder()
	res, _ := r.apply(createSession(0, sessionS, 10*ms, 0))
	require.Equal(t, StatusGranted, res.Status)
	assert.Equal(t, 10*ms, res.ExpiresAt)
	res, _ = r.apply(createSession(5*ms, sessionS, 10*ms, 0))
	assert.Equal(t, Result{Status: StatusGranted, ExpiresAt: 10 * ms, Now: 5 * ms}, res, "a retry changes nothing")

	res, _ = r.apply(acquireIn(5*ms, "k", ownerA, sessionS, 0, "host=a"))
	require.Equal(t, StatusGranted, res.Status)
	assert.Equal(t, 10*ms, res.ExpiresAt, "the lock ends with the session")
	tok := res.Token
	res, _ = r.apply(acquire(6*ms, "k", ownerB, time.Second, time.Second))
	require.Equal(t, StatusQueued, res.Status)
	assert.Equal(t, 10*ms, res.ExpiresAt, "the holder's end is the session's")

	res, _ = r.apply(renewSession(8*ms, sessionS))
	assert.Equal(t, Result{Status: StatusExtended, ExpiresAt: 18 * ms, Now: 8 * ms, Waiters: 1}, res)
	st := r.Lookup("k", 0)
	assert.Equal(t, KeyState{Held: true, Owner: ownerA, Token: tok, ExpiresAt: 18 * ms, Waiters: 1, Session: sessionS, Meta: "host=a"}, st)
	next, _ := r.NextDeadline()
	assert.Equal(t, 18*ms, next, "the session's end is the next deadline")

	res, _ = r.apply(extend(9*ms, "k", ownerA, time.Hour))
	assert.Equal(t, StatusExtended, res.Status)
	assert.Equal(t, 18*ms, res.ExpiresAt, "extend does not lengthen a session-bound lock")

	_, ev := r.apply(tick(18 * ms))
	assert.Equal(t, []Event{
		{Kind: EventSessionExpired, Owner: sessionS, ExpiresAt: 18 * ms, At: 18 * ms},
		{Kind: EventExpired, Key: "k", Owner: ownerA, Token: tok, ExpiresAt: 18 * ms, At: 18 * ms},
		{Kind: EventGranted, Key: "k", Owner: ownerB, Token: tok + 1, ExpiresAt: 18*ms + time.Second, At: 18 * ms},
	}, ev, "the session's end hands the key on in the same command")
	res, _ = r.apply(renewSession(19*ms, sessionS))
	assert.Equal(t, StatusNoSession, res.Status)
	res, _ = r.apply(acquireIn(19*ms, "x", ownerA, sessionS, 0, ""))
	assert.Equal(t, StatusNoSession, res.Status)
	assert.Equal(t, 0, r.Sessions())
	require.NoError(t, checkInternals(r.Machine))
}

func TestSessionDestroyReleasesEverythingInOneCommand(t *testing.T) {
	r := newRecorder()
	r.apply(createSession(0, sessionS, time.Second, 50*ms))
	r.apply(createSession(0, sessionT, time.Second, 0))
	keys := []string{"c", "a", "b"}
	for _, k := range keys {
		res, _ := r.apply(acquireIn(1*ms, k, ownerA, sessionS, 0, ""))
		require.Equal(t, StatusGranted, res.Status)
	}
	r.apply(acquireIn(2*ms, "a", ownerB, sessionT, time.Second, "next"))
	r.apply(acquire(2*ms, "b", ownerC, time.Second, time.Second))
	r.apply(acquireIn(2*ms, "d", ownerC, sessionT, 0, ""))
	r.apply(acquireIn(3*ms, "d", ownerB, sessionS, time.Second, "")) // S also waits for d

	res, ev := r.apply(destroySession(4*ms, sessionS))
	assert.Equal(t, StatusReleased, res.Status)
	assert.Equal(t, 3, res.Waiters, "three locks released")
	kinds := []string{}
	for _, e := range ev {
		kinds = append(kinds, e.Kind.String()+":"+e.Key)
	}
	assert.Equal(t, []string{"granted:a", "granted:b", "wait-expired:d"}, kinds, "key order; no lock-delay after a destroy")
	assert.Equal(t, KeyState{Held: true, Owner: ownerB, Token: 5, ExpiresAt: time.Second, Session: sessionT, Meta: "next"}, r.Lookup("a", 0))
	assert.False(t, r.Lookup("c", 0).Held)
	assert.Equal(t, 0, r.Lookup("d", 0).Waiters)
	// A repeat of the destroy (its answer lost) answers released, and
	// releases nothing more; a session never created is not found.
	res, _ = r.apply(destroySession(5*ms, sessionS))
	assert.Equal(t, StatusReleased, res.Status)
	assert.Zero(t, res.Waiters)
	res, _ = r.apply(destroySession(5*ms, Owner{0xed, 15: 9}))
	assert.Equal(t, StatusNoSession, res.Status)
	require.NoError(t, checkInternals(r.Machine))
}

func TestSessionLockDelayAfterExpiry(t *testing.T) {
	r := newRecorder()
	r.apply(createSession(0, sessionS, 10*ms, 30*ms))
	r.apply(acquireIn(1*ms, "k", ownerA, sessionS, 0, "m"))
	r.apply(acquire(2*ms, "k", ownerB, time.Second, time.Second))
	r.apply(tick(10 * ms))
	st := r.Lookup("k", 0)
	assert.Equal(t, KeyState{Held: true, Token: 1, ExpiresAt: 40 * ms, Waiters: 1, Delayed: true}, st, "the key stays unavailable for the delay")
	res, _ := r.apply(acquire(20*ms, "k", ownerC, time.Second, 0))
	assert.Equal(t, StatusHeld, res.Status)
	res, _ = r.apply(release(20*ms, "k", ownerA))
	assert.Equal(t, StatusNotHeld, res.Status, "the old holder has nothing left to release")
	_, ev := r.apply(tick(40 * ms))
	require.Len(t, ev, 1)
	assert.Equal(t, Event{Kind: EventGranted, Key: "k", Owner: ownerB, Token: 2, ExpiresAt: 40*ms + time.Second, At: 40 * ms}, ev[0])
	require.NoError(t, checkInternals(r.Machine))
}

func TestSessionValidation(t *testing.T) {
	for _, tt := range []struct {
		name string
		c    Command
		want error
	}{
		{"create zero session", createSession(0, Owner{}, time.Second, 0), ErrZeroSession},
		{"create ttl 0", createSession(0, sessionS, 0, 0), ErrTTLRange},
		{"create delay too long", createSession(0, sessionS, time.Second, MaxLockDelay+1), ErrDelayRange},
		{"renew with ttl", Command{Op: OpSessionRenew, Session: sessionS, TTL: time.Second}, ErrUnusedField},
		{"destroy with key", Command{Op: OpSessionDestroy, Session: sessionS, Key: "k"}, ErrUnusedField},
		{"session acquire with ttl", Command{Op: OpAcquire, Key: "k", Owner: ownerA, Session: sessionS, TTL: time.Second}, ErrUnusedField},
		{"metadata too long", Command{Op: OpAcquire, Key: "k", Owner: ownerA, TTL: time.Second, Meta: strings.Repeat("x", MaxMetaLen+1)}, ErrMetaTooLong},
		{"metadata on release", Command{Op: OpRelease, Key: "k", Owner: ownerA, Meta: "x"}, ErrUnusedField},
		{"session on release", Command{Op: OpRelease, Key: "k", Owner: ownerA, Session: sessionS}, ErrUnusedField},
		{"lock delay on acquire", Command{Op: OpAcquire, Key: "k", Owner: ownerA, TTL: time.Second, LockDelay: 1}, ErrUnusedField},
	} {
		assert.ErrorIs(t, tt.c.Validate(), tt.want, tt.name)
	}
	// Op 11 without session and metadata has the op-1 form only.
	b, err := acquire(0, "k", ownerA, time.Second, 0).AppendBinary(nil)
	require.NoError(t, err)
	b[1] = wireAcquireExtended
	b = append(b, make([]byte, 16)...)
	b = append(b, 0)
	_, err = DecodeCommand(b)
	assert.ErrorIs(t, err, ErrBadEncoding)
}

func TestSessionSnapshotRoundTrip(t *testing.T) {
	m := sessionMachine(t)
	require.NoError(t, checkInternals(m))
	snap := m.Snapshot()
	assert.Equal(t, byte(snapshotVersion), snap[0])
	m2 := restoredCopy(t, m, snap, "a", "b", "c", "d")
	assert.True(t, m2.Lookup("c", 0).Delayed)
	assert.Equal(t, "pid=1", m2.Lookup("a", 0).Meta)

	// A freeze copied while sessions change gives the bytes of its start.
	fz := m.StartFreeze()
	m.Apply(destroySession(12*ms, sessionS))
	m.Apply(createSession(12*ms, sessionT, time.Second, 0))
	assert.Equal(t, snap, frozenBytes(t, fz))
}

func TestRestoreRejectsBadSessions(t *testing.T) {
	valid := sessionMachine(t).Snapshot()
	require.NoError(t, New(nil).Restore(valid))
	// header: version 3, now 100, last token 10, epoch 0, sessions, 1 key.
	hdr := func(sessions ...snapshotBuilder) snapshotBuilder {
		s := snapshotBuilder{snapshotVersionV5}.uv(100).uv(10).uv(0).uv(uint64(len(sessions)))
		for _, x := range sessions {
			s = append(s, x...)
		}
		return s
	}
	sess := func(id Owner, ttl, end, delay uint64) snapshotBuilder {
		return snapshotBuilder{}.owner(id).uv(ttl).uv(end).uv(delay)
	}
	bound := func(s snapshotBuilder, id Owner) snapshotBuilder {
		return s.uv(1).key("k").uv(holdSession).owner(ownerA).uv(1).owner(id).uv(0).uv(0)
	}
	ok := sess(sessionS, uint64(ms), 120, 0)
	require.NoError(t, New(nil).Restore(bound(hdr(ok), sessionS)), "the base case is valid")
	for _, tt := range []struct {
		name string
		in   []byte
	}{
		{"unknown session", bound(hdr(ok), sessionT)},
		{"sessions out of order", bound(hdr(sess(sessionT, uint64(ms), 120, 0), ok), sessionS)},
		{"session already over", bound(hdr(sess(sessionS, uint64(ms), 100, 0)), sessionS)},
		{"session beyond its ttl", bound(hdr(sess(sessionS, uint64(ms), 101+uint64(ms), 0)), sessionS)},
		{"lock delay too long", bound(hdr(sess(sessionS, uint64(ms), 120, uint64(MaxLockDelay)+1)), sessionS)},
		{"unknown holder kind", hdr(ok).uv(1).key("k").uv(7)},
		{"metadata too long", hdr().uv(1).key("k").uv(holdLease).owner(ownerA).uv(1).uv(200).uv(MaxMetaLen + 1)},
		{"delay beyond the limit", hdr().uv(1).key("k").uv(holdDelayed).uv(1).uv(101 + uint64(MaxLockDelay)).uv(0)},
	} {
		m := sessionMachine(t)
		before := m.Snapshot()
		assert.ErrorIs(t, m.Restore(tt.in), ErrBadEncoding, tt.name)
		assert.Equal(t, before, m.Snapshot(), tt.name)
	}
}

// An owner's acquire is its idempotent retry only under the binding of its
// grant (or place in the queue): under another session, or a lease, whose
// renewals would not keep that grant, it finds the key held, and nothing
// changes.
func TestRetryUnderAnotherBindingIsHeld(t *testing.T) {
	r := newRecorder()
	r.apply(createSession(0, sessionS, time.Second, 0))
	r.apply(createSession(0, sessionT, time.Second, 0))
	res, _ := r.apply(acquireIn(ms, "k", ownerA, sessionS, 0, ""))
	require.Equal(t, StatusGranted, res.Status)
	before := r.Snapshot()
	for _, c := range []Command{
		acquireIn(2*ms, "k", ownerA, sessionT, time.Second, ""),
		acquire(2*ms, "k", ownerA, time.Second, time.Second),
	} {
		res, _ = r.apply(c)
		assert.Equal(t, StatusHeld, res.Status, "%+v", c)
		assert.Equal(t, uint64(1), res.Token)
	}
	res, _ = r.apply(acquireIn(2*ms, "k", ownerA, sessionS, 0, ""))
	assert.Equal(t, StatusGranted, res.Status, "the same binding is the retry")
	r.apply(acquireIn(3*ms, "k", ownerB, sessionT, time.Second, ""))
	res, _ = r.apply(acquire(4*ms, "k", ownerB, time.Second, time.Second))
	assert.Equal(t, StatusHeld, res.Status, "a queued owner under another binding")
	res, _ = r.apply(acquireIn(4*ms, "k", ownerB, sessionT, time.Second, ""))
	assert.Equal(t, StatusQueued, res.Status)
	assert.NotEqual(t, before, r.Snapshot()) // B queued
	require.NoError(t, checkInternals(r.Machine))
}
