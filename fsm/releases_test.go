package fsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRepeatedRelease: a release sent again after its answer was lost
// answers released only when this owner's release is what ended its hold
// on the key.
func TestRepeatedRelease(t *testing.T) {
	const ttl = 100 * ms
	for _, tt := range []struct {
		name string
		cmds []Command // from an empty machine; the last is the release under test
		want Status
	}{
		{"release, release again", []Command{
			acquire(0, "k", ownerA, ttl, 0), release(ms, "k", ownerA), release(2*ms, "k", ownerA),
		}, StatusReleased},
		{"the repeat after the key went to a waiter", []Command{
			acquire(0, "k", ownerA, ttl, 0), acquire(0, "k", ownerB, ttl, time.Second),
			release(ms, "k", ownerA), release(2*ms, "k", ownerA),
		}, StatusReleased},
		{"the repeat after the next holder released too", []Command{
			acquire(0, "k", ownerA, ttl, 0), release(ms, "k", ownerA),
			acquire(2*ms, "k", ownerB, ttl, 0), release(3*ms, "k", ownerB), release(4*ms, "k", ownerA),
		}, StatusReleased},
		{"the owner held the key again, and that lease expired", []Command{
			acquire(0, "k", ownerA, ttl, 0), release(ms, "k", ownerA),
			acquire(2*ms, "k", ownerA, ttl, 0), tick(2*ms + ttl), release(3*ms+ttl, "k", ownerA),
		}, StatusNotHeld},
		{"the owner's acquire again found the key held", []Command{
			acquire(0, "k", ownerA, ttl, 0), release(ms, "k", ownerA),
			acquire(2*ms, "k", ownerB, ttl, 0), acquire(3*ms, "k", ownerA, ttl, 0), release(4*ms, "k", ownerA),
		}, StatusNotHeld},
		{"the lease expired before the first release", []Command{
			acquire(0, "k", ownerA, ttl, 0), release(ttl, "k", ownerA), release(ttl+ms, "k", ownerA),
		}, StatusNotHeld},
		{"force-released before the first release", []Command{
			acquire(0, "k", ownerA, ttl, 0), forceRelease(ms, "k"), release(2*ms, "k", ownerA), release(3*ms, "k", ownerA),
		}, StatusNotHeld},
		{"canceled, not released", []Command{
			acquire(0, "k", ownerA, ttl, 0), cancelWait(ms, "k", ownerA), release(2*ms, "k", ownerA),
		}, StatusNotHeld},
		{"another key's release", []Command{
			acquire(0, "k", ownerA, ttl, 0), release(ms, "k", ownerA), release(2*ms, "other", ownerA),
		}, StatusNotHeld},
		{"another owner", []Command{
			acquire(0, "k", ownerA, ttl, 0), release(ms, "k", ownerA), release(2*ms, "k", ownerB),
		}, StatusNotHeld},
		{"a semaphore slot", []Command{
			semAcquire(0, "s", ownerA, 2, 0), semAcquire(0, "s", ownerB, 2, 0),
			release(ms, "s", ownerA), release(2*ms, "s", ownerA),
		}, StatusReleased},
		{"a multi-key grant, by the key released", []Command{
			acquireAll(0, ownerA, ttl, 0, "a", "b"), release(ms, "b", ownerA), release(2*ms, "b", ownerA),
		}, StatusReleased},
		{"a multi-key grant, by another of its keys", []Command{
			acquireAll(0, ownerA, ttl, 0, "a", "b"), release(ms, "b", ownerA), release(2*ms, "a", ownerA),
		}, StatusNotHeld},
		{"a multi-key grant expired, after a single-key one was released", []Command{
			acquire(0, "a", ownerA, ttl, 0), release(ms, "a", ownerA),
			acquireAll(2*ms, ownerA, ttl, 0, "a", "b"), tick(2*ms + ttl), release(3*ms+ttl, "a", ownerA),
		}, StatusNotHeld},
		{"just before the memory runs out", []Command{
			acquire(0, "k", ownerA, ttl, 0), release(ms, "k", ownerA), release(ms+ReleaseMemory-1, "k", ownerA),
		}, StatusReleased},
		{"once the memory ran out", []Command{
			acquire(0, "k", ownerA, ttl, 0), release(ms, "k", ownerA), release(ms+ReleaseMemory, "k", ownerA),
		}, StatusNotHeld},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := New(nil)
			for _, c := range tt.cmds[:len(tt.cmds)-1] {
				require.NotEqual(t, StatusInvalid, m.Apply(c).Status, "%+v", c)
			}
			before := m.Snapshot()
			got := m.Apply(tt.cmds[len(tt.cmds)-1])
			assert.Equal(t, tt.want, got.Status)
			if got.Status == StatusReleased {
				assert.Zero(t, got.Token, "a repeat names no token: the lease is over")
			}
			require.NoError(t, checkInternals(m))
			// The repeat changes nothing but the clock.
			again := New(nil)
			require.NoError(t, again.Restore(before))
			again.Apply(tick(got.Now))
			assert.Equal(t, again.Snapshot(), m.Snapshot())
		})
	}
}

// TestRepeatedSessionDestroy: as a release, a destroy sent again answers
// released only when it was a destroy that ended the session.
func TestRepeatedSessionDestroy(t *testing.T) {
	m := New(nil)
	m.Apply(createSession(0, sessionS, 10*ms, 0))
	require.Equal(t, StatusReleased, m.Apply(destroySession(ms, sessionS)).Status)
	assert.Equal(t, StatusReleased, m.Apply(destroySession(2*ms, sessionS)).Status, "a repeat")

	// Created again under the same ID, then expired: not ended by a destroy.
	m.Apply(createSession(3*ms, sessionS, 10*ms, 0))
	m.Apply(tick(13 * ms))
	assert.Equal(t, StatusNoSession, m.Apply(destroySession(14*ms, sessionS)).Status)

	m.Apply(createSession(15*ms, sessionT, 10*ms, 0))
	m.Apply(tick(25 * ms))
	assert.Equal(t, StatusNoSession, m.Apply(destroySession(26*ms, sessionT)).Status, "expired before its destroy")
	require.NoError(t, checkInternals(m))
}

// TestReleasesRememberedAreBounded: at most MaxRememberedReleases, the
// oldest forgotten first.
func TestReleasesRememberedAreBounded(t *testing.T) {
	m := New(nil)
	n := MaxRememberedReleases + 1
	for i := range n {
		o := numberedOwner(i)
		m.Apply(acquire(time.Duration(i), "k", o, time.Hour, 0))
		require.Equal(t, StatusReleased, m.Apply(release(time.Duration(i), "k", o)).Status)
	}
	assert.Equal(t, MaxRememberedReleases, m.released.len())
	assert.Equal(t, StatusNotHeld, m.Apply(release(time.Duration(n), "k", numberedOwner(0))).Status, "the oldest is forgotten")
	assert.Equal(t, StatusReleased, m.Apply(release(time.Duration(n), "k", numberedOwner(1))).Status)
	require.NoError(t, checkInternals(m))

	// Log time forgets them all, and the snapshot with them.
	m.Apply(tick(time.Duration(n) + ReleaseMemory))
	assert.Zero(t, m.released.len())
	asV5(t, m.Snapshot()) // fails the test unless the snapshot has no releases
	assert.Equal(t, StatusNotHeld, m.Apply(release(time.Duration(n)+ReleaseMemory, "k", numberedOwner(1))).Status)
}

// releasedMachine remembers three releases: of key b by B, of key a by A,
// and the destroy of session S.
func releasedMachine(t *testing.T) *Machine {
	t.Helper()
	return fixtureMachine(t, []Command{
		acquire(0, "a", ownerA, time.Second, 0),
		acquire(0, "b", ownerB, time.Second, 0),
		createSession(0, sessionS, time.Second, 0),
		release(ms, "b", ownerB),
		release(2*ms, "a", ownerA),
		destroySession(3*ms, sessionS),
	}, StatusInvalid)
}

// TestReleasesSnapshot: the remembered releases are in the snapshot, so a
// replica restored from it answers a repeat as the one that applied the
// release; a snapshot of version 5 restores remembering none.
func TestReleasesSnapshot(t *testing.T) {
	m := releasedMachine(t)
	snap := m.Snapshot()
	restored := restoredCopy(t, m, snap)
	for _, c := range []Command{release(4*ms, "a", ownerA), release(4*ms, "b", ownerB), destroySession(4*ms, sessionS), release(4*ms, "a", ownerB)} {
		assert.Equal(t, m.Apply(c), restored.Apply(c), "%+v", c)
	}

	// A freeze copied while releases come and go gives the bytes of its start.
	snap = m.Snapshot()
	fz := m.StartFreeze()
	m.Apply(acquire(5*ms, "a", ownerA, time.Second, 0)) // forgets a's release
	m.Apply(acquire(5*ms, "c", ownerC, time.Second, 0))
	m.Apply(release(6*ms, "c", ownerC))
	m.Apply(tick(ms + ReleaseMemory)) // forgets b's
	assert.Equal(t, snap, frozenBytes(t, fz))

	// Version 5 has no releases: a machine restored from one answers a
	// repeat of a release from before it not held.
	v5 := New(nil)
	require.NoError(t, v5.Restore(asV5(t, withoutReleases(t, m))))
	assert.Equal(t, StatusNotHeld, v5.Apply(release(7*ms, "c", ownerC)).Status)
	assert.Equal(t, StatusReleased, m.Apply(release(7*ms, "c", ownerC)).Status, "as the machine that applied it does not")
}

// TestSnapshotInVersion5: for members that cannot restore version 6, the
// state is written in version 5: deterministically, without the remembered
// releases, so a machine restored from it remembers none and answers their
// repeats not held; version 6 of the same state keeps them. A Freezer
// writes the same bytes in either version, and versions this build does not
// write are refused.
func TestSnapshotInVersion5(t *testing.T) {
	m := releasedMachine(t)
	c := acquire(4*ms, "c", ownerC, time.Second, 0)
	require.NotEqual(t, StatusInvalid, m.Apply(c).Status, "%+v", c)
	require.Equal(t, 3, m.released.len())

	v5, err := m.SnapshotIn(5)
	require.NoError(t, err)
	assert.Equal(t, byte(5), v5[0])
	again, err := m.SnapshotIn(5)
	require.NoError(t, err)
	assert.Equal(t, v5, again, "deterministic")
	assert.Equal(t, asV5(t, withoutReleases(t, m)), v5, "version 6 without the releases")
	v6, err := m.SnapshotIn(6)
	require.NoError(t, err)
	assert.Equal(t, byte(6), v6[0])
	assert.Equal(t, m.Snapshot(), v6)

	from5, from6 := New(nil), New(nil)
	require.NoError(t, from5.Restore(v5))
	require.NoError(t, from6.Restore(v6))
	require.NoError(t, checkInternals(from5))
	assert.Zero(t, from5.released.len(), "version 5 remembers none")
	assert.Equal(t, 3, from6.released.len())
	assert.Equal(t, v5, snapshotV5(t, from5), "the state is the rest")
	for _, c := range []Command{release(5*ms, "a", ownerA), release(5*ms, "b", ownerB)} {
		assert.Equal(t, StatusNotHeld, from5.Apply(c).Status, "%+v from version 5", c)
		assert.Equal(t, StatusReleased, from6.Apply(c).Status, "%+v from version 6", c)
	}
	assert.Equal(t, StatusNoSession, from5.Apply(destroySession(5*ms, sessionS)).Status)
	assert.Equal(t, StatusReleased, from6.Apply(destroySession(5*ms, sessionS)).Status)

	// A Freezer in version 5 writes SnapshotIn's bytes of its start.
	fz, err := m.StartFreezeIn(5)
	require.NoError(t, err)
	m.Apply(release(6*ms, "c", ownerC))
	m.Apply(acquire(6*ms, "a", ownerA, time.Second, 0))
	assert.Equal(t, v5, frozenBytes(t, fz))

	for _, v := range []int{0, 4, 7} {
		_, err := m.SnapshotIn(v)
		assert.ErrorIs(t, err, ErrBadVersion, "version %d", v)
		_, err = m.StartFreezeIn(v)
		assert.ErrorIs(t, err, ErrBadVersion, "version %d", v)
	}
}

func TestRestoreRejectsBadReleases(t *testing.T) {
	// header: version 6, now, last token 10, epoch 0, no sessions, the
	// releases, and one key "k" held by A.
	const now = uint64(ReleaseMemory) + 1000
	snap := func(rel ...snapshotBuilder) snapshotBuilder {
		s := snapshotBuilder{snapshotVersion}.uv(now).uv(10).uv(0).uv(0).uv(uint64(len(rel)))
		for _, r := range rel {
			s = append(s, r...)
		}
		return s.uv(1).key("k").uv(holdLease).owner(ownerA).uv(1).uv(now + 1000).uv(0).uv(0)
	}
	rel := func(key string, o Owner, at uint64) snapshotBuilder {
		return snapshotBuilder{}.key(key).owner(o).uv(at)
	}
	valid := snap(rel("j", ownerA, now-100), rel("k", ownerB, now-50), rel("", sessionS, now))
	m := New(nil)
	require.NoError(t, m.Restore(valid), "the base case is valid")
	require.NoError(t, checkInternals(m))
	assert.Equal(t, []byte(valid), m.Snapshot())
	old := now - uint64(ReleaseMemory)
	for name, in := range map[string]snapshotBuilder{
		"out of order":                snap(rel("k", ownerB, now-50), rel("j", ownerA, now-100)),
		"after now":                   snap(rel("j", ownerA, now+1)),
		"forgotten by now":            snap(rel("j", ownerA, old)),
		"twice":                       snap(rel("j", ownerA, now-100), rel("j", ownerA, now-50)),
		"zero owner":                  snap(rel("j", Owner{}, now-100)),
		"the owner holds it again":    snap(rel("k", ownerA, now-100)),
		"a key too long":              snap(rel(string(make([]byte, MaxKeyLen+1)), ownerA, now-100)),
		"more records than its bytes": append(snapshotBuilder{snapshotVersion}.uv(now).uv(10).uv(0).uv(0), appendUvarint(nil, 1000)...),
	} {
		assert.ErrorIs(t, New(nil).Restore(in), ErrBadEncoding, name)
	}
	live := snapshotBuilder{snapshotVersion}.uv(now).uv(10).uv(0).uv(1).owner(sessionS).uv(uint64(time.Second)).uv(now + 1000).uv(0).
		uv(1).key("").owner(sessionS).uv(now - 100).uv(0)
	assert.ErrorIs(t, New(nil).Restore(live), ErrBadEncoding, "a destroy remembered for a live session")
}
