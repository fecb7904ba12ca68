package cluster

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// readSnapshot returns the snapshot's bytes whatever the size it was told:
// right, too small, too large, none.
func TestReadSnapshotWhateverTheSizeSaid(t *testing.T) {
	snap := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	for _, size := range []int64{int64(len(snap)), int64(len(snap)) - 1, int64(len(snap)) + 1, 1, 0, -1, 10 * int64(len(snap))} {
		// OneByteReader: every short read must be read on from, not taken for the end.
		got, err := readSnapshot(iotest.OneByteReader(bytes.NewReader(snap)), size)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(got, snap) {
			t.Fatalf("size %d: read %d bytes, want the snapshot's %d", size, len(got), len(snap))
		}
	}
	got, err := readSnapshot(bytes.NewReader(nil), 100)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty snapshot told 100 bytes: %d bytes, %v", len(got), err)
	}
}

// A read error is returned, not a shorter snapshot.
func TestReadSnapshotFailsWithItsReader(t *testing.T) {
	broken := errors.New("disk gone")
	for _, size := range []int64{0, 10, 1000} {
		r := io.MultiReader(bytes.NewReader(make([]byte, 100)), iotest.ErrReader(broken))
		if _, err := readSnapshot(r, size); !errors.Is(err, broken) {
			t.Fatalf("size %d: error %v, want %v", size, err, broken)
		}
	}
}

// A snapshot whose size raft told is decoded as it is read: the same
// state as from a buffer; a machine snapshot of a newer format still
// halts; a size that is not the snapshot's refuses the restore without
// halting and changes nothing.
func TestRestoreStreamsASizedSnapshot(t *testing.T) {
	src := newStateMachine(testLogger("sm"), nil)
	b, err := fsm.AppendBatch(nil, []fsm.Command{
		{Op: fsm.OpAcquire, Stamp: time.Second, Key: "a", Owner: fsm.Owner{1}, TTL: time.Hour},
		{Op: fsm.OpAcquire, Stamp: time.Second, Key: "b", Owner: fsm.Owner{2}, TTL: time.Hour},
	})
	require.NoError(t, err)
	src.ApplyBatch([]*raft.Log{{Index: 7, Term: 1, Type: raft.LogCommand, Data: b}})
	var buf bytes.Buffer
	s, err := src.Snapshot()
	require.NoError(t, err)
	require.NoError(t, s.(*snapshot).write(&buf))
	snap := buf.Bytes()

	restore := func(sm *stateMachine, snap []byte, size int) error {
		sm.snapshotSize.Store(int64(size))
		return sm.Restore(nopCloser{iotest.HalfReader(bytes.NewReader(snap))})
	}
	streamed, buffered := newStateMachine(testLogger("sm"), nil), newStateMachine(testLogger("sm"), nil)
	require.NoError(t, restore(streamed, snap, len(snap)))
	require.NoError(t, restore(buffered, snap, 0))
	for _, sm := range []*stateMachine{streamed, buffered} {
		applied, _ := sm.appliedIndex()
		assert.Equal(t, uint64(7), applied)
		assert.Equal(t, src.m.Snapshot(), sm.m.Snapshot())
	}

	for _, size := range []int{len(snap) - 1, len(snap) + 1, snapshotHeaderLen + 1} {
		sm := newStateMachine(testLogger("sm"), nil)
		before := sm.m.Snapshot()
		err := restore(sm, snap, size)
		require.ErrorIs(t, err, fsm.ErrBadEncoding, "size %d", size)
		assert.NoError(t, sm.haltError(), "size %d", size)
		assert.Equal(t, before, sm.m.Snapshot(), "size %d", size)
	}

	newer := append(bytes.Clone(snap[:snapshotHeaderLen]), 99, 0, 0)
	sm := newStateMachine(testLogger("sm"), nil)
	var halt *HaltError
	require.ErrorAs(t, restore(sm, newer, len(newer)), &halt)
	assert.Equal(t, uint64(7), halt.Index)
	assert.ErrorIs(t, sm.haltError(), fsm.ErrBadVersion)
}
