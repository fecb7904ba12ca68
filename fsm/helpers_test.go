package fsm

import (
	"bytes"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Helpers shared by the tests of several files: fixture machines, older
// snapshot versions of a state, a restored copy, and a Freezer run to its
// end.

// fixtureMachine is a new machine that applied cmds, none of which may be
// answered with one of the refused statuses.
func fixtureMachine(tb testing.TB, cmds []Command, refused ...Status) *Machine {
	tb.Helper()
	m := New(nil)
	for _, c := range cmds {
		if r := m.Apply(c); slices.Contains(refused, r.Status) {
			tb.Fatalf("%+v: %v", c, r.Status)
		}
	}
	return m
}

// asV5 is snap, a version 6 snapshot that remembers no releases, as
// version 5 wrote the same state: without the release count.
func asV5(tb testing.TB, snap []byte) []byte {
	tb.Helper()
	d := decoder{b: snap}
	if d.byte() != snapshotVersion {
		tb.Fatalf("not a version %d snapshot", snapshotVersion)
	}
	d.uvarint() // now
	d.uvarint() // last token
	d.uvarint() // epoch
	for n := d.uvarint(); n > 0; n-- {
		d.owner()
		d.uvarint()
		d.uvarint()
		d.uvarint()
	}
	at := d.off
	if d.uvarint() != 0 || d.err != nil {
		tb.Fatalf("the snapshot remembers releases (or is malformed: %v)", d.err)
	}
	v5 := append(bytes.Clone(snap[:at]), snap[d.off:]...)
	v5[0] = snapshotVersionV5
	return v5
}

// snapshotV5 is m's state as SnapshotIn writes it for members that cannot
// restore version 6.
func snapshotV5(tb testing.TB, m *Machine) []byte {
	tb.Helper()
	b, err := m.SnapshotIn(snapshotVersionV5)
	require.NoError(tb, err)
	return b
}

// withoutReleases is m's snapshot with its remembered releases left out.
func withoutReleases(t *testing.T, m *Machine) []byte {
	t.Helper()
	c := New(nil)
	require.NoError(t, c.Restore(m.Snapshot()))
	c.released = releases{}
	return c.Snapshot()
}

// restoredCopy is a new machine restored from snap, m's snapshot: it
// passes the internal checks, writes snap again, and reads keys as m does.
func restoredCopy(t *testing.T, m *Machine, snap []byte, keys ...string) *Machine {
	t.Helper()
	c := New(nil)
	require.NoError(t, c.Restore(snap))
	require.NoError(t, checkInternals(c))
	assert.Equal(t, snap, c.Snapshot())
	for _, k := range keys {
		assert.Equal(t, m.Lookup(k, 0), c.Lookup(k, 0), k)
	}
	return c
}

// frozenBytes runs fz to its end a key at a time and returns all it wrote.
func frozenBytes(t *testing.T, fz *Freezer) []byte {
	t.Helper()
	var buf bytes.Buffer
	for {
		done, err := fz.Next(1)
		require.NoError(t, err)
		require.NoError(t, fz.Flush(&buf))
		if done {
			return buf.Bytes()
		}
	}
}
