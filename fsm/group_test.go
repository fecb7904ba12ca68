package fsm

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func semAcquire(at time.Duration, key string, o Owner, n int, wait time.Duration) Command {
	return acquireKind(at, key, o, time.Second, wait, n, false)
}

func rwAcquire(at time.Duration, key string, o Owner, shared bool, wait time.Duration) Command {
	return acquireKind(at, key, o, time.Second, wait, 0, shared)
}

func TestSemaphoreHoldsUpToN(t *testing.T) {
	r := newRecorder()
	a := r.Apply(semAcquire(1*ms, "s", ownerA, 2, 0))
	b := r.Apply(semAcquire(2*ms, "s", ownerB, 2, 0))
	require.Equal(t, StatusGranted, a.Status)
	require.Equal(t, StatusGranted, b.Status)
	assert.Greater(t, b.Token, a.Token, "each holder has its own, later token")

	assert.Equal(t, StatusHeld, r.Apply(semAcquire(3*ms, "s", ownerC, 2, 0)).Status, "the third, not waiting, is refused")
	q := r.Apply(semAcquire(3*ms, "s", ownerC, 2, time.Second))
	assert.Equal(t, StatusQueued, q.Status)
	assert.Equal(t, 1, q.Waiters)
	assert.Equal(t, a.Token, q.Token, "a queued answer names the oldest hold")

	again := r.Apply(semAcquire(4*ms, "s", ownerA, 2, 0))
	assert.Equal(t, StatusGranted, again.Status, "a holder's retry is its grant")
	assert.Equal(t, a.Token, again.Token)

	st := r.Lookup("s", 0)
	assert.Equal(t, KeyState{Held: true, Token: b.Token, ExpiresAt: b.ExpiresAt, Waiters: 1, Kind: KindSemaphore, Limit: 2, Holders: 2,
		Holds: []Hold{{Token: a.Token, ExpiresAt: again.ExpiresAt}, {Token: b.Token, ExpiresAt: b.ExpiresAt}}}, st)

	res, events := r.apply(release(5*ms, "s", ownerA))
	assert.Equal(t, StatusReleased, res.Status)
	assert.Equal(t, a.Token, res.Token)
	require.Len(t, events, 1, "the release hands the slot on in the same command")
	assert.Equal(t, EventGranted, events[0].Kind)
	assert.Equal(t, ownerC, events[0].Owner)
	assert.Greater(t, events[0].Token, b.Token)
	assert.Equal(t, StatusExtended, r.Apply(extend(6*ms, "s", ownerC, time.Hour)).Status)
	assert.Equal(t, StatusNotHeld, r.Apply(extend(6*ms, "s", ownerA, time.Hour)).Status, "the released holder extends nothing")
	require.NoError(t, checkInternals(r.Machine))

	// Expiry frees one slot; the last release removes the key.
	r.Apply(tick(2 * time.Second))
	st = r.Lookup("s", 0)
	assert.Equal(t, 1, st.Holders, "B's lease ran out, C's was extended")
	assert.Equal(t, StatusReleased, r.Apply(release(3*time.Second, "s", ownerC)).Status)
	assert.Equal(t, 0, r.Len())
	require.NoError(t, checkInternals(r.Machine))
}

func TestReadersShareWritersExcludeAndAreNotStarved(t *testing.T) {
	r := newRecorder()
	r1 := r.Apply(rwAcquire(1*ms, "k", ownerA, true, 0))
	r2 := r.Apply(rwAcquire(1*ms, "k", ownerB, true, 0))
	require.Equal(t, StatusGranted, r1.Status)
	require.Equal(t, StatusGranted, r2.Status, "readers share")
	assert.True(t, r.Lookup("k", 0).Shared)

	assert.Equal(t, StatusHeld, r.Apply(rwAcquire(2*ms, "k", ownerC, false, 0)).Status, "a writer waits for readers")
	require.Equal(t, StatusQueued, r.Apply(rwAcquire(2*ms, "k", ownerC, false, time.Second)).Status)
	late := r.Apply(rwAcquire(3*ms, "k", ownerD, true, time.Second))
	assert.Equal(t, StatusQueued, late.Status, "a reader behind a waiting writer waits: writers are not starved")
	assert.Equal(t, 2, late.Waiters)

	_, events := r.apply(release(4*ms, "k", ownerA))
	assert.Empty(t, events, "one reader still holds")
	_, events = r.apply(release(5*ms, "k", ownerB))
	require.Len(t, events, 1)
	assert.Equal(t, ownerC, events[0].Owner, "the writer goes first")
	st := r.Lookup("k", 0)
	assert.False(t, st.Shared)
	assert.Equal(t, 1, st.Holders)

	// While the writer holds, readers queue; its release grants them all
	// in the one command, in queue order, each with its own token.
	other := Owner{0x50, 15: 5}
	require.Equal(t, StatusQueued, r.Apply(rwAcquire(6*ms, "k", other, true, time.Second)).Status)
	writer2 := Owner{0x60, 15: 6}
	require.Equal(t, StatusQueued, r.Apply(rwAcquire(6*ms, "k", writer2, false, time.Second)).Status)
	_, events = r.apply(release(7*ms, "k", ownerC))
	require.Len(t, events, 2, "both readers at the head, not the writer behind them")
	assert.Equal(t, []Owner{ownerD, other}, []Owner{events[0].Owner, events[1].Owner})
	assert.Less(t, events[0].Token, events[1].Token)
	assert.Equal(t, 1, r.Lookup("k", 0).Waiters)
	require.NoError(t, checkInternals(r.Machine))
}

// A waiter that leaves the head of the queue (its wait ran out, it
// canceled) lets those behind it in if they fit.
func TestHeadWaiterLeavingGrantsWhoFits(t *testing.T) {
	r := newRecorder()
	r.Apply(rwAcquire(1*ms, "k", ownerA, true, 0))
	r.Apply(acquireKind(1*ms, "k", ownerB, time.Second, 10*ms, 0, false)) // a writer, waiting 10ms
	r.Apply(rwAcquire(2*ms, "k", ownerC, true, time.Second))
	_, events := r.apply(tick(11 * ms))
	require.Len(t, events, 2)
	assert.Equal(t, EventWaitExpired, events[0].Kind)
	assert.Equal(t, EventGranted, events[1].Kind)
	assert.Equal(t, ownerC, events[1].Owner)

	r.Apply(acquireKind(12*ms, "k", ownerB, time.Second, time.Second, 0, false))
	r.Apply(rwAcquire(12*ms, "k", ownerD, true, time.Second))
	res, events := r.apply(cancelWait(13*ms, "k", ownerB))
	assert.Equal(t, StatusCanceled, res.Status)
	require.Len(t, events, 1)
	assert.Equal(t, ownerD, events[0].Owner)
	assert.Equal(t, 3, r.Lookup("k", 0).Holders)
	require.NoError(t, checkInternals(r.Machine))
}

func TestKindIsFixedWhileTheKeyExists(t *testing.T) {
	m := New(nil)
	require.Equal(t, StatusGranted, m.Apply(semAcquire(1*ms, "s", ownerA, 8, 0)).Status)
	for _, c := range []Command{
		semAcquire(2*ms, "s", ownerB, 4, time.Second),
		rwAcquire(2*ms, "s", ownerB, true, 0),
		acquire(2*ms, "s", ownerB, time.Second, time.Second),
		semAcquire(2*ms, "s", ownerA, 4, 0), // even its holder
	} {
		r := m.Apply(c)
		assert.Equal(t, StatusKindMismatch, r.Status, "%v/%d", c.Kind, c.Limit)
		assert.Equal(t, KindSemaphore, r.Kind)
		assert.Equal(t, 8, r.Limit)
	}
	assert.Equal(t, 0, m.Waiters(), "a mismatch queues nobody")

	require.Equal(t, StatusGranted, m.Apply(acquire(3*ms, "m", ownerA, time.Second, 0)).Status)
	r := m.Apply(rwAcquire(3*ms, "m", ownerB, false, time.Second))
	assert.Equal(t, StatusKindMismatch, r.Status)
	assert.Equal(t, KindMutex, r.Kind)

	// Once nobody holds or waits, the key is gone, and any kind takes it.
	m.Apply(release(4*ms, "s", ownerA))
	assert.Equal(t, StatusGranted, m.Apply(rwAcquire(5*ms, "s", ownerB, false, 0)).Status)
	assert.Equal(t, KindRW, m.Lookup("s", 0).Kind)
}

func TestKindValidation(t *testing.T) {
	base := semAcquire(0, "k", ownerA, 1, 0)
	for _, tt := range []struct {
		name string
		edit func(*Command)
		want error
	}{
		{"limit 0", func(c *Command) { c.Limit = 0 }, ErrLimitRange},
		{"limit above MaxHolders", func(c *Command) { c.Limit = MaxHolders + 1 }, ErrLimitRange},
		{"negative limit", func(c *Command) { c.Limit = -1 }, ErrLimitRange},
		{"shared semaphore", func(c *Command) { c.Shared = true }, ErrUnusedField},
		{"limit on a mutex", func(c *Command) { c.Kind = KindMutex }, ErrUnusedField},
		{"limit on a read/write key", func(c *Command) { c.Kind = KindRW }, ErrUnusedField},
		{"unknown kind", func(c *Command) { c.Kind = 3 }, ErrUnknownKind},
		{"kind on a release", func(c *Command) { c.Op, c.TTL = OpRelease, 0 }, ErrUnusedField},
		{"shared on a release", func(c *Command) { c.Op, c.TTL, c.Kind, c.Limit, c.Shared = OpRelease, 0, KindMutex, 0, true }, ErrUnusedField},
	} {
		c := base
		tt.edit(&c)
		assert.ErrorIs(t, c.Validate(), tt.want, tt.name)
	}
	ok := base
	ok.Limit = MaxHolders
	assert.NoError(t, ok.Validate())
}

func TestKindEncodingIsStable(t *testing.T) {
	c := acquireKind(1500*ms, "ab", Owner{1, 15: 2}, 30*time.Second, 0, 8, false)
	b, err := c.AppendBinary(nil)
	require.NoError(t, err)
	assert.Equal(t,
		"01"+"0c"+"80dea0cb05"+"02"+"6162"+"01000000000000000000000000000002"+"80d88ee16f"+"00"+
			"00000000000000000000000000000000"+"00"+"01"+"08"+"00",
		hex.EncodeToString(b), "op 12: the op-11 body, then kind, limit, shared")
	for _, c := range []Command{c, rwAcquire(1, "k", ownerA, true, time.Second), acquireIn(2, "k", ownerA, sessionS, 0, "m")} {
		c.Kind, c.Limit, c.Shared = KindRW, 0, true
		b, err := c.AppendBinary(nil)
		require.NoError(t, err)
		got, err := DecodeCommand(b)
		require.NoError(t, err)
		assert.Equal(t, c, got)
	}

	bad := func(kind, limit, shared byte) []byte {
		b, _ := acquire(1, "k", ownerA, time.Second, 0).AppendBinary(nil)
		b[1] = wireAcquireKind
		b = append(b, make([]byte, ownerLen)...)
		return append(b, 0, kind, limit, shared)
	}
	_, err = DecodeCommand(bad(byte(KindSemaphore), 2, 0))
	require.NoError(t, err, "the base case is valid")
	for name, in := range map[string][]byte{
		"mutex in op 12":        bad(0, 0, 0),
		"shared flag 2":         bad(byte(KindRW), 0, 2),
		"limit on rw":           bad(byte(KindRW), 1, 0),
		"semaphore of 0":        bad(byte(KindSemaphore), 0, 0),
		"shared semaphore":      bad(byte(KindSemaphore), 1, 1),
		"unknown kind":          bad(9, 0, 0),
		"truncated after kind":  bad(byte(KindSemaphore), 2, 0)[:len(bad(1, 2, 0))-2],
		"limit beyond 64 KiB":   append(bad(byte(KindSemaphore), 0x80, 0x80)[:len(bad(1, 2, 0))-2], 0x80, 0x80, 0x08, 0),
		"trailing byte after 0": append(bad(byte(KindSemaphore), 2, 0), 0),
	} {
		_, err := DecodeCommand(in)
		assert.ErrorIs(t, err, ErrBadEncoding, name)
	}
}

// groupMachine is a machine with every kind of semaphore and read/write
// state: lease and session holders with metadata, a lock-delay slot,
// readers with a writer and a reader queued behind, and a writer holding.
func groupMachine(tb testing.TB) *Machine {
	tb.Helper()
	return fixtureMachine(tb, []Command{
		createSession(0, sessionS, 100*ms, 0),
		createSession(0, sessionT, 10*ms, 50*ms),
		semAcquire(1*ms, "sem", ownerA, 3, 0),
		{Op: OpAcquire, Stamp: 1 * ms, Key: "sem", Owner: ownerB, Session: sessionT, Kind: KindSemaphore, Limit: 3, Meta: "pid=2"},
		{Op: OpAcquire, Stamp: 1 * ms, Key: "sem", Owner: ownerC, Session: sessionS, Kind: KindSemaphore, Limit: 3, Meta: "pid=3"},
		semAcquire(2*ms, "sem", ownerD, 3, time.Second),
		rwAcquire(2*ms, "rw", ownerA, true, 0),
		rwAcquire(2*ms, "rw", ownerB, true, 0),
		rwAcquire(3*ms, "rw", ownerC, false, time.Second),
		{Op: OpAcquire, Stamp: 3 * ms, Key: "rw", Owner: ownerD, Session: sessionS, Wait: time.Second, Kind: KindRW, Shared: true, Meta: "r"},
		rwAcquire(3*ms, "w", ownerD, false, 0),
		tick(11 * ms), // T expires: B's slot of "sem" is kept for 50ms, so D still waits
	}, StatusInvalid, StatusNoSession)
}

func TestGroupSnapshotRoundTrip(t *testing.T) {
	m := groupMachine(t)
	require.NoError(t, checkInternals(m))
	st := m.Lookup("sem", 0)
	require.Equal(t, 3, st.Holders, "the lock-delay slot counts")
	require.Equal(t, 1, st.Waiters)
	snap := m.Snapshot()
	assert.Equal(t, byte(snapshotVersion), snap[0])
	m2 := restoredCopy(t, m, snap, "sem", "rw", "w")
	// Both go on alike: the delay ends and D gets the slot.
	r1, r2 := m.Apply(tick(61*ms)), m2.Apply(tick(61*ms))
	assert.Equal(t, r1, r2)
	assert.Equal(t, m.Snapshot(), m2.Snapshot())
	assert.Equal(t, 3, m.Lookup("sem", 0).Holders)
	assert.Equal(t, 0, m.Lookup("sem", 0).Waiters)

	// A freeze copied while the groups change gives the bytes of its start.
	m = groupMachine(t)
	fz := m.StartFreeze()
	m.Apply(release(12*ms, "rw", ownerA))
	m.Apply(release(12*ms, "rw", ownerB))
	m.Apply(release(12*ms, "w", ownerD))
	m.Apply(semAcquire(12*ms, "new", ownerA, 2, 0))
	assert.Equal(t, snap, frozenBytes(t, fz))
}

// Snapshots of every version restore: version 4 (groups) from a file
// written by this version, and a version 3 one (no groups), which reads
// exactly as the same state in version 4.
func TestSnapshotFixturesRestore(t *testing.T) {
	path := filepath.Join("testdata", "snapshot-v4.bin")
	if os.Getenv("FSM_UPDATE_FIXTURES") != "" {
		snap := asV5(t, groupMachine(t).Snapshot())
		snap[0] = 4 // the version 4 fixture stays a version 4 file
		require.NoError(t, os.WriteFile(path, snap, 0o644))
	}
	v4, err := os.ReadFile(path)
	require.NoError(t, err)
	m := New(nil)
	require.NoError(t, m.Restore(v4))
	require.NoError(t, checkInternals(m))
	assert.Equal(t, v4[1:], asV5(t, m.Snapshot())[1:], "version 5 writes a state without multi-key locks as version 4 did")
	assert.Equal(t, asV5(t, groupMachine(t).Snapshot())[1:], v4[1:], "the fixture is groupMachine's state")

	v3 := asV5(t, sessionMachine(t).Snapshot())
	v3[0] = 3 // a state without groups is written alike in version 3
	m3 := New(nil)
	require.NoError(t, m3.Restore(v3))
	assert.Equal(t, sessionMachine(t).Snapshot(), m3.Snapshot())

	// Version 3 has no holder kind 3.
	v3g := bytes.Clone(v4)
	v3g[0] = 3
	assert.ErrorIs(t, New(nil).Restore(v3g), ErrBadEncoding)
}

func TestRestoreRejectsBadGroups(t *testing.T) {
	hdr := snapshotBuilder{snapshotVersionV5}.uv(100).uv(10).uv(0).uv(0).uv(1).key("k").uv(holdGroup)
	slot := func(s snapshotBuilder, o Owner, token uint64) snapshotBuilder {
		return s.owner(o).uv(token).uv(holdLease).uv(200).uv(0)
	}
	sem := func(limit, n uint64) snapshotBuilder { return hdr.uv(uint64(KindSemaphore)).uv(limit).uv(0).uv(n) }
	valid := slot(slot(sem(2, 2), ownerA, 1), ownerB, 2).uv(0)
	require.NoError(t, New(nil).Restore(valid), "the base case is valid")
	waiter := func(s snapshotBuilder, o Owner) snapshotBuilder {
		return s.uv(1).owner(o).uv(holdLease).uv(uint64(ms)).uv(150).uv(0).uv(0)
	}
	require.NoError(t, New(nil).Restore(waiter(slot(slot(sem(2, 2), ownerA, 1), ownerB, 2), ownerC)), "a waiter behind a full semaphore")
	for name, in := range map[string]snapshotBuilder{
		"more holders than the limit": slot(slot(sem(1, 2), ownerA, 1), ownerB, 2).uv(0),
		"no holders":                  sem(2, 0).uv(0),
		"semaphore of 0":              slot(sem(0, 1), ownerA, 1).uv(0),
		"tokens not ascending":        slot(slot(sem(2, 2), ownerA, 2), ownerB, 1).uv(0),
		"token beyond the last":       slot(sem(2, 1), ownerA, 11).uv(0),
		"owner twice":                 slot(slot(sem(2, 2), ownerA, 1), ownerA, 2).uv(0),
		"unknown kind":                slot(hdr.uv(5).uv(0).uv(0).uv(1), ownerA, 1).uv(0),
		"two writers":                 slot(slot(hdr.uv(uint64(KindRW)).uv(0).uv(1).uv(2), ownerA, 1), ownerB, 2).uv(0),
		"exclusive semaphore":         slot(hdr.uv(uint64(KindSemaphore)).uv(2).uv(1).uv(1), ownerA, 1).uv(0),
		"head waiter fits":            waiter(slot(sem(2, 1), ownerA, 1), ownerC),
		"holder also waits":           waiter(slot(slot(sem(2, 2), ownerA, 1), ownerB, 2), ownerA),
		"token shared with a mutex":   append(slot(sem(2, 1), ownerA, 1).uv(0)[:0:0], snapshotBuilder{snapshotVersionV5}.uv(100).uv(10).uv(0).uv(0).uv(2).key("a").uv(holdLease).owner(ownerB).uv(1).uv(200).uv(0).uv(0).key("k").uv(holdGroup).uv(uint64(KindSemaphore)).uv(2).uv(0).uv(1).owner(ownerA).uv(1).uv(holdLease).uv(200).uv(0).uv(0)...),
	} {
		m := groupMachine(t)
		before := m.Snapshot()
		assert.Error(t, m.Restore(in), name)
		assert.Equal(t, before, m.Snapshot(), name)
	}
}

// A semaphore slot whose session expires with a lock-delay stays taken for
// the delay, then goes to the next waiter; a destroy frees it at once.
func TestGroupSessionEnds(t *testing.T) {
	r := newRecorder()
	r.Apply(createSession(0, sessionS, 10*ms, 20*ms))
	r.Apply(createSession(0, sessionT, time.Second, 20*ms))
	r.Apply(Command{Op: OpAcquire, Stamp: 1 * ms, Key: "s", Owner: ownerA, Session: sessionS, Kind: KindSemaphore, Limit: 1})
	r.Apply(semAcquire(2*ms, "s", ownerB, 1, time.Second))
	_, events := r.apply(tick(10 * ms))
	require.Len(t, events, 2)
	assert.Equal(t, EventSessionExpired, events[0].Kind)
	assert.Equal(t, EventExpired, events[1].Kind)
	assert.Equal(t, ownerA, events[1].Owner)
	assert.Equal(t, StatusNotHeld, r.Apply(release(11*ms, "s", ownerA)).Status, "a lock-delay slot is nobody's")
	assert.Equal(t, StatusHeld, r.Apply(Command{Op: OpAcquire, Stamp: 11 * ms, Key: "s", Owner: ownerA, TTL: time.Second, Kind: KindSemaphore, Limit: 1}).Status)
	_, events = r.apply(tick(30 * ms))
	require.Len(t, events, 1)
	assert.Equal(t, EventGranted, events[0].Kind)
	assert.Equal(t, ownerB, events[0].Owner)

	r.Apply(Command{Op: OpAcquire, Stamp: 31 * ms, Key: "rw", Owner: ownerA, Session: sessionT, Kind: KindRW, Shared: true})
	r.Apply(Command{Op: OpAcquire, Stamp: 31 * ms, Key: "rw", Owner: ownerC, Session: sessionT, Kind: KindRW, Shared: true})
	r.Apply(rwAcquire(32*ms, "rw", ownerD, false, time.Second))
	res, events := r.apply(destroySession(33*ms, sessionT))
	assert.Equal(t, StatusReleased, res.Status)
	assert.Equal(t, 2, res.Waiters, "both reads released")
	require.Len(t, events, 1)
	assert.Equal(t, ownerD, events[0].Owner, "the writer gets the key in the destroy's command")
	require.NoError(t, checkInternals(r.Machine))
}

func TestForceReleaseEndsEveryHold(t *testing.T) {
	r := newRecorder()
	a := r.Apply(semAcquire(1*ms, "s", ownerA, 2, 0))
	b := r.Apply(semAcquire(1*ms, "s", ownerB, 2, 0))
	r.Apply(semAcquire(1*ms, "s", ownerC, 2, time.Second))
	res, events := r.apply(forceRelease(2*ms, "s"))
	assert.Equal(t, StatusReleased, res.Status)
	assert.Equal(t, max(a.Token, b.Token), res.Token)
	require.Len(t, events, 1)
	assert.Equal(t, ownerC, events[0].Owner)
	assert.Equal(t, StatusNotHeld, r.Apply(release(3*ms, "s", ownerA)).Status)
	require.NoError(t, checkInternals(r.Machine))
}

// TestDelayedSlotOwnerComesBackAsANewcomer: a slot kept by a lock-delay is
// nobody's, so its former owner acquiring again with a wait queues like
// anyone (as with a mutex's lock-delay), and is granted another slot of
// the semaphore while the delayed one still runs, under a fresh token.
func TestDelayedSlotOwnerComesBackAsANewcomer(t *testing.T) {
	r := newRecorder()
	r.Apply(createSession(0, sessionS, 10*ms, 50*ms))
	first := r.Apply(Command{Op: OpAcquire, Stamp: 1 * ms, Key: "s", Owner: ownerA, Session: sessionS, Kind: KindSemaphore, Limit: 2})
	require.Equal(t, StatusGranted, first.Status)
	require.Equal(t, StatusGranted, r.Apply(semAcquire(2*ms, "s", ownerB, 2, 0)).Status)
	r.Apply(tick(10 * ms)) // the session expires: A's slot is delayed until 60ms

	assert.Equal(t, StatusHeld, r.Apply(semAcquire(11*ms, "s", ownerA, 2, 0)).Status, "no room, no wait")
	q := r.Apply(semAcquire(11*ms, "s", ownerA, 2, time.Second))
	require.Equal(t, StatusQueued, q.Status, "the former owner of a delayed slot is a newcomer")
	assert.Equal(t, 1, q.Waiters)

	_, events := r.apply(release(12*ms, "s", ownerB))
	require.Len(t, events, 1)
	assert.Equal(t, EventGranted, events[0].Kind)
	assert.Equal(t, ownerA, events[0].Owner)
	assert.Greater(t, events[0].Token, first.Token)
	st := r.Lookup("s", 0)
	assert.Equal(t, 2, st.Holders, "A's new slot and the delayed one")
	assert.Equal(t, StatusReleased, r.Apply(release(13*ms, "s", ownerA)).Status, "A releases its new slot, not the delayed one")
	assert.Equal(t, 1, r.Lookup("s", 0).Holders)
	require.NoError(t, checkInternals(r.Machine))
}

// A read lists every hold of a group key in grant order with its token,
// end, metadata and mode (a lock-delay slot marked), and no owner; a
// mutex's read lists none and allocates nothing.
func TestKeyStateListsHolds(t *testing.T) {
	m := groupMachine(t)
	st := m.Lookup("sem", 0)
	require.Len(t, st.Holds, 3)
	assert.Equal(t, "", st.Holds[0].Meta)
	assert.True(t, st.Holds[1].Delayed, "B's session expired: its slot is a lock-delay")
	assert.Equal(t, "", st.Holds[1].Meta, "a lock-delay slot is nobody's")
	assert.Equal(t, 60*ms, st.Holds[1].ExpiresAt, "T's end (10ms) plus its 50ms lock-delay")
	assert.Equal(t, "pid=3", st.Holds[2].Meta)
	assert.False(t, st.Holds[2].Delayed)
	assert.Equal(t, 100*ms, st.Holds[2].ExpiresAt, "a session hold ends with its session")
	for i := 1; i < len(st.Holds); i++ {
		assert.Greater(t, st.Holds[i].Token, st.Holds[i-1].Token, "grant order is token order")
	}
	assert.Equal(t, st.Token, st.Holds[2].Token)
	assert.True(t, st.Owner.IsZero(), "a group read names no owner")

	rw := m.Lookup("rw", 0)
	require.Len(t, rw.Holds, 2)
	assert.True(t, rw.Holds[0].Shared && rw.Holds[1].Shared)
	w := m.Lookup("w", 0)
	require.Len(t, w.Holds, 1)
	assert.False(t, w.Holds[0].Shared, "a writer")

	m.Apply(acquire(20*ms, "mutex", ownerA, time.Second, 0))
	assert.Nil(t, m.Lookup("mutex", 0).Holds)
	allocs := testing.AllocsPerRun(100, func() { _ = m.Lookup("mutex", 0) })
	assert.Zero(t, allocs, "a mutex read allocates nothing")
}
