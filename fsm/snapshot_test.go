package fsm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// populated returns a machine with held keys, queues and a moved clock.
func populated(t *testing.T) *Machine {
	t.Helper()
	m := New(nil)
	for _, c := range []Command{
		acquire(1*ms, "b", ownerA, 10*ms, 0),
		acquire(2*ms, "a", ownerB, 20*ms, 0),
		acquire(3*ms, "a", ownerC, 5*ms, 40*ms),
		acquire(3*ms, "a", ownerA, 6*ms, 30*ms),
		acquire(4*ms, "c", ownerD, 10*ms, 0),
		release(5*ms, "c", ownerD),
		acquire(6*ms, "\x00bin", ownerD, time.Hour, 0),
	} {
		require.NotEqual(t, StatusInvalid, m.Apply(c).Status)
	}
	return m
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	for name, m := range map[string]*Machine{"empty": New(nil), "populated": populated(t)} {
		t.Run(name, func(t *testing.T) {
			snap := m.Snapshot()
			r := New(nil)
			require.NoError(t, r.Restore(snap))
			assert.Equal(t, snap, r.Snapshot())
			assert.Equal(t, m.Now(), r.Now())
			assert.Equal(t, m.Len(), r.Len())
			assert.Equal(t, m.LastToken(), r.LastToken())
			next, ok := m.NextDeadline()
			rnext, rok := r.NextDeadline()
			assert.Equal(t, ok, rok)
			assert.Equal(t, next, rnext)
			require.NoError(t, checkInternals(r))
			assert.Equal(t, holders(m), holders(r))
		})
	}
}

func TestSnapshotIsDeterministic(t *testing.T) {
	// Map iteration order is random in Go: repeated snapshots of one state,
	// and of that state rebuilt from a snapshot (with keys inserted in
	// sorted order instead), must still be byte-identical.
	m := New(nil)
	for i := range 300 {
		key := string([]byte{byte('a' + i%26), byte('a' + i/26)})
		m.Apply(acquire(time.Duration(i)*ms, key, numberedOwner(i), time.Hour, 0))
		if i%3 == 0 {
			m.Apply(acquire(time.Duration(i)*ms, key, numberedOwner(i+1000), time.Hour, time.Hour))
		}
	}
	first := m.Snapshot()
	for range 5 {
		require.Equal(t, first, m.Snapshot())
	}
	r := New(nil)
	require.NoError(t, r.Restore(first))
	assert.Equal(t, first, r.Snapshot())
}

func TestRestoreReplacesState(t *testing.T) {
	m := populated(t)
	require.NoError(t, m.Restore(New(nil).Snapshot()))
	assert.Zero(t, m.Len())
	assert.Zero(t, m.Now())
	_, ok := m.NextDeadline()
	assert.False(t, ok)
	assert.Equal(t, KeyState{}, m.Lookup("a", 0))
}

// snapshotBuilder writes snapshots field by field, to reach states a
// machine never produces.
type snapshotBuilder []byte

func (s snapshotBuilder) uv(v uint64) snapshotBuilder { return appendUvarint(s, v) }
func (s snapshotBuilder) key(k string) snapshotBuilder {
	return append(appendUvarint(s, uint64(len(k))), k...)
}
func (s snapshotBuilder) owner(o Owner) snapshotBuilder { return append(s, o[:]...) }

// header: version 2 (the rejections below are of version 2 records), now 100, last token 10, epoch 1, n keys.
func header(n uint64) snapshotBuilder {
	return snapshotBuilder{snapshotVersionV2}.uv(100).uv(10).uv(1).uv(n)
}

// lease appends a key record without waiters.
func (s snapshotBuilder) lease(k string, o Owner, token, expires uint64) snapshotBuilder {
	return s.key(k).owner(o).uv(token).uv(expires).uv(0)
}

func TestRestoreRejects(t *testing.T) {
	queued := func(w ...snapshotBuilder) snapshotBuilder {
		s := header(1).key("k").owner(ownerA).uv(1).uv(200).uv(uint64(len(w)))
		for _, x := range w {
			s = append(s, x...)
		}
		return s
	}
	waiter := func(o Owner, ttl, deadline uint64) snapshotBuilder {
		return snapshotBuilder{}.owner(o).uv(ttl).uv(deadline).uv(1)
	}
	okWaiter := waiter(ownerB, uint64(ms), 150)
	valid := queued(okWaiter)
	require.NoError(t, New(nil).Restore(valid), "the base case is valid")

	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrBadEncoding},
		{"bad version", append([]byte{snapshotVersion + 1}, valid[1:]...), ErrBadVersion},
		{"trailing bytes", append(valid, 0), ErrBadEncoding},
		{"truncated", valid[:len(valid)-1], ErrBadEncoding},
		{"now beyond MaxStamp", snapshotBuilder{snapshotVersionV2}.uv(uint64(MaxStamp) + 1).uv(0).uv(0).uv(0), ErrStampRange},
		{"waiter epoch after the machine's", queued(snapshotBuilder{}.owner(ownerB).uv(uint64(ms)).uv(150).uv(2)), ErrBadEncoding},
		{"key count beyond the bytes", header(2).lease("k", ownerA, 1, 200), ErrBadEncoding},
		{"huge key count", header(1 << 50), ErrBadEncoding},
		{"keys out of order", header(2).lease("b", ownerA, 1, 200).lease("a", ownerA, 2, 200), ErrBadEncoding},
		{"duplicate key", header(2).lease("a", ownerA, 1, 200).lease("a", ownerB, 2, 200), ErrBadEncoding},
		{"empty key", header(1).lease("", ownerA, 1, 200), ErrEmptyKey},
		{"zero holder", header(1).lease("k", Owner{}, 1, 200), ErrZeroOwner},
		{"token zero", header(1).lease("k", ownerA, 0, 200), ErrBadEncoding},
		{"token beyond the counter", header(1).lease("k", ownerA, 11, 200), ErrBadEncoding},
		{"token granted twice", header(2).lease("a", ownerA, 3, 200).lease("b", ownerA, 3, 200), ErrBadEncoding},
		{"lease already over", header(1).lease("k", ownerA, 1, 100), ErrBadEncoding},
		{"lease longer than MaxTTL", header(1).lease("k", ownerA, 1, 100+uint64(MaxTTL)+1), ErrBadEncoding},
		{"too many waiters", header(1).key("k").owner(ownerA).uv(1).uv(200).uv(MaxWaiters + 1), ErrBadEncoding},
		{"waiter count beyond the bytes", queued(okWaiter)[:len(valid)-len(okWaiter)], ErrBadEncoding},
		{"zero waiter", queued(waiter(Owner{}, uint64(ms), 150)), ErrZeroOwner},
		{"holder also waits", queued(waiter(ownerA, uint64(ms), 150)), ErrBadEncoding},
		{"owner waits twice", queued(okWaiter, okWaiter), ErrBadEncoding},
		{"waiter ttl below MinTTL", queued(waiter(ownerB, uint64(MinTTL)-1, 150)), ErrTTLRange},
		{"waiter ttl above MaxTTL", queued(waiter(ownerB, uint64(MaxTTL)+1, 150)), ErrTTLRange},
		{"wait already over", queued(waiter(ownerB, uint64(ms), 100)), ErrBadEncoding},
		{"wait longer than MaxWait", queued(waiter(ownerB, uint64(ms), 100+uint64(MaxWait)+1)), ErrBadEncoding},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := populated(t)
			before := m.Snapshot()
			next, _ := m.NextDeadline()
			err := m.Restore(tt.in)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.Equal(t, before, m.Snapshot(), "state unchanged")
			after, _ := m.NextDeadline()
			assert.Equal(t, next, after)
			assert.NoError(t, checkInternals(m))
		})
	}
}

func TestRestoreKeepsObserverAndQueueOrder(t *testing.T) {
	var events []Event
	m := New(func(e Event) { events = append(events, e) })
	require.NoError(t, m.Restore(populated(t).Snapshot()))
	// "a" is held by B until 22ms with C then A queued.
	res := m.Apply(release(7*ms, "a", ownerB))
	assert.Equal(t, StatusReleased, res.Status)
	assert.Equal(t, 1, res.Waiters)
	require.Len(t, events, 1)
	assert.Equal(t, Event{Kind: EventGranted, Key: "a", Owner: ownerC, Token: 5, ExpiresAt: 12 * ms, At: 7 * ms}, events[0])
}

// A frozen state encodes to what Snapshot gave at the moment of the freeze,
// however the machine moves on.
func TestFrozenStateIsIndependentOfLaterApplies(t *testing.T) {
	m := populated(t)
	for i := range 5000 {
		m.Apply(acquire(7*ms, fmt.Sprintf("bulk/%05d", i), numberedOwner(i), time.Hour, 0))
	}
	want := m.Snapshot()
	f := m.freeze(snapshotVersion)

	m.Apply(release(8*ms, "a", ownerB))                         // hands a to its first waiter
	m.Apply(acquire(9*ms, "b", ownerD, time.Minute, time.Hour)) // queues on b
	m.Apply(acquire(10*ms, "new", ownerA, time.Minute, 0))
	m.Apply(release(11*ms, "bulk/00000", numberedOwner(0)))
	require.NotEqual(t, want, m.Snapshot())

	assert.Equal(t, len(want), f.size())
	assert.Equal(t, want, f.appendTo(nil))
}

// latestMachine has something of every kind the latest snapshot version
// writes: groupMachine's sessions, semaphore, read/write keys, lock-delayed
// slot and waiters, then a multi-key grant with metadata, a waiting set
// with a reserved key and a waiter behind it, waiters of an older epoch,
// a plain lease, and a remembered release and session destroy.
func latestMachine(tb testing.TB) *Machine {
	tb.Helper()
	m := groupMachine(tb)
	o := numberedOwner
	held := acquireAll(12*ms, o(1), 50*ms, 0, "h/1", "h/2")
	held.Meta = "job=1"
	for _, c := range []Command{
		held,
		acquire(12*ms, "x", o(2), 20*ms, 0),
		acquireAll(12*ms, o(3), 20*ms, time.Second, "h/2", "x", "y"),
		acquire(12*ms, "y", o(4), 20*ms, time.Second),
		newTerm(13 * ms),
		acquire(13*ms, "plain", o(5), time.Second, 0),
		acquire(13*ms, "gone", o(6), time.Second, 0),
		release(14*ms, "gone", o(6)),
		createSession(14*ms, o(7), time.Second, 0),
		destroySession(15*ms, o(7)),
	} {
		if r := m.Apply(c); r.Status == StatusInvalid || r.Status == StatusNoSession || r.Status == StatusHeld {
			tb.Fatalf("%+v: %v", c, r.Status)
		}
	}
	return m
}

// A version 6 snapshot, written by the build that introduced the fixture,
// restores to the same state and writes the same bytes: the fixture pins
// the format for every later build.
func TestSnapshotFixtureV6(t *testing.T) {
	m := latestMachine(t)
	require.NoError(t, checkInternals(m))
	require.True(t, m.Lookup("y", 0).Reserved)
	snap := m.Snapshot()
	path := filepath.Join("testdata", "snapshot-v6.bin")
	if os.Getenv("FSM_UPDATE_FIXTURES") != "" {
		require.NoError(t, os.WriteFile(path, snap, 0o644))
	}
	fixture, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, snap, fixture, "the fixture is latestMachine's state")
	r := restoredCopy(t, m, fixture, "sem", "rw", "w", "h/1", "h/2", "x", "y", "plain", "gone")
	assert.Equal(t, StatusReleased, r.Apply(release(16*ms, "gone", numberedOwner(6))).Status, "the release is remembered")
}

// A restore names the smallest token granted twice, whichever repeat it
// read first, with the counter close enough for a bitmap (header: last
// token 10) and too far for one.
func TestRestoreNamesSmallestTokenTwice(t *testing.T) {
	keys := func(s snapshotBuilder) snapshotBuilder {
		return s.lease("a", ownerA, 5, 200).lease("b", ownerA, 2, 200).lease("c", ownerB, 5, 200).lease("d", ownerB, 2, 200)
	}
	err := New(nil).Restore(keys(header(4)))
	require.ErrorIs(t, err, ErrBadEncoding)
	assert.ErrorContains(t, err, "token 2 granted twice")
	far := snapshotBuilder{snapshotVersionV2}.uv(100).uv(1 << 20).uv(1).uv(4)
	err = New(nil).Restore(keys(far))
	require.ErrorIs(t, err, ErrBadEncoding)
	assert.ErrorContains(t, err, "token 2 granted twice")
}

func TestTokenTwice(t *testing.T) {
	for _, c := range []struct {
		tokens []uint64
		last   uint64
		twice  uint64
	}{
		{nil, 0, 0},
		{[]uint64{3, 1, 2}, 3, 0},
		{[]uint64{5, 9, 5, 2, 9}, 9, 5},                   // bitmap, then the smallest repeated
		{[]uint64{1 << 40, 7, 1 << 40}, 1 << 41, 1 << 40}, // last too far for a bitmap
		{[]uint64{7, 1 << 40}, 1 << 41, 0},
	} {
		got, twice := tokenTwice(slices.Clone(c.tokens), c.last)
		assert.Equal(t, c.twice != 0, twice, "%v", c.tokens)
		assert.Equal(t, c.twice, got, "%v", c.tokens)
	}
}
