package datadir

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/types"
	"github.com/stretchr/testify/require"
)

// powerLossVFS is a file system under the WAL's segment files that can
// lose power: every write not synced since is then undone, as a machine
// that lost power forgets what its page cache held, and later writes and
// syncs do nothing.
type powerLossVFS struct {
	types.VFS
	mu    sync.Mutex
	files []*powerLossFile
	dead  bool
}

type powerLossFile struct {
	types.WritableFile
	vfs  *powerLossVFS
	undo []undoWrite // the writes since the last sync, oldest first
}

type undoWrite struct {
	off int64
	old []byte
}

func (v *powerLossVFS) wrap(f types.WritableFile, err error) (types.WritableFile, error) {
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	pf := &powerLossFile{WritableFile: f, vfs: v}
	v.files = append(v.files, pf)
	return pf, nil
}

func (v *powerLossVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	return v.wrap(v.VFS.Create(dir, name, size))
}

func (v *powerLossVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	return v.wrap(v.VFS.OpenWriter(dir, name))
}

func (f *powerLossFile) WriteAt(p []byte, off int64) (int, error) {
	f.vfs.mu.Lock()
	defer f.vfs.mu.Unlock()
	if f.vfs.dead {
		return len(p), nil
	}
	old := make([]byte, len(p))
	n, _ := f.WritableFile.ReadAt(old, off) // segment files are preallocated
	f.undo = append(f.undo, undoWrite{off: off, old: old[:n]})
	return f.WritableFile.WriteAt(p, off)
}

func (f *powerLossFile) Sync() error {
	f.vfs.mu.Lock()
	defer f.vfs.mu.Unlock()
	if f.vfs.dead {
		return nil
	}
	if err := f.WritableFile.Sync(); err != nil {
		return err
	}
	f.undo = nil
	return nil
}

func (v *powerLossVFS) powerLoss(t *testing.T) {
	require.NoError(t, v.loseUnsynced())
}

func (v *powerLossVFS) loseUnsynced() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.dead = true
	for _, f := range v.files {
		for i := len(f.undo) - 1; i >= 0; i-- {
			if _, err := f.WritableFile.WriteAt(f.undo[i].old, f.undo[i].off); err != nil {
				return err
			}
		}
		f.undo = nil
	}
	return nil
}

// openWALOnPowerLossDisk opens a WAL store in dir whose segment files can
// lose power.
func openWALOnPowerLossDisk(t *testing.T, dir string, segmentSize int) (*Store, *powerLossVFS) {
	return openWALOnPowerLossDiskWrapped(t, dir, segmentSize, nil)
}

func openWALOnPowerLossDiskWrapped(t *testing.T, dir string, segmentSize int, wrap func(*powerLossVFS) WALWrapper) (*Store, *powerLossVFS) {
	t.Helper()
	disk := &powerLossVFS{}
	wrapWALVFS = func(v types.VFS) types.VFS { disk.VFS = v; return disk }
	defer func() { wrapWALVFS = nil }()
	var wrapWAL WALWrapper
	if wrap != nil {
		wrapWAL = wrap(disk)
	}
	g, _, err := OpenLogStore(dir, LogStoreWAL, segmentSize, hclog.NewNullLogger(), wrapWAL)
	require.NoError(t, err)
	return g, disk
}

func sizedEntries(from, to uint64, size int) []*raft.Log {
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, size)})
	}
	return logs
}

// requireLog checks that g holds entries 1..last as sizedEntries made them.
func requireLog(t *testing.T, g *Store, last uint64, size int) {
	t.Helper()
	got, err := g.LastIndex()
	require.NoError(t, err)
	require.Equal(t, last, got)
	for _, want := range sizedEntries(1, last, size) {
		var l raft.Log
		require.NoError(t, g.GetLog(want.Index, &l))
		require.Equal(t, want.Data, l.Data, "entry %d", want.Index)
	}
}

// A batch written without its sync is readable at once, lost at a power
// loss before SyncLogs, and kept after it.
func TestStoreLogsNoSyncIsDurableOnlyOnceSynced(t *testing.T) {
	for _, synced := range []bool{false, true} {
		t.Run(fmt.Sprintf("synced=%v", synced), func(t *testing.T) {
			dir := t.TempDir()
			g, disk := openWALOnPowerLossDisk(t, dir, 0)
			require.NoError(t, g.StoreLogs(sizedEntries(1, 3, 100)))
			require.NoError(t, g.StoreLogsNoSync(sizedEntries(4, 4, 100)))
			requireLog(t, g, 4, 100) // readable before its sync
			if synced {
				require.NoError(t, g.SyncLogs())
			}
			disk.powerLoss(t)
			require.NoError(t, g.Close())

			g, _ = openWALOnPowerLossDisk(t, dir, 0)
			defer g.Close()
			if synced {
				requireLog(t, g, 4, 100)
			} else {
				requireLog(t, g, 3, 100)
			}
		})
	}
}

// At most the last batch is ever unsynced: a write without its sync first
// syncs the one before it, so that a power loss can only tear the final
// batch, the one raft-wal's recovery drops. Across segment rotations too
// (wal-meta.db never names a seal whose data is not on disk).
func TestStoreLogsNoSyncLeavesAtMostTheLastBatchUnsynced(t *testing.T) {
	dir := t.TempDir()
	g, disk := openWALOnPowerLossDisk(t, dir, 4096) // a few entries a segment
	const last, size = 40, 300
	for i := uint64(1); i <= last; i++ {
		require.NoError(t, g.StoreLogsNoSync(sizedEntries(i, i, size)))
	}
	disk.powerLoss(t)
	require.NoError(t, g.Close())

	g, _ = openWALOnPowerLossDisk(t, dir, 4096)
	defer g.Close()
	requireLog(t, g, last-1, size)
}

// The power goes right after wal-meta.db recorded the seal a write without
// its sync made: the sealed segment's data, index included, was synced
// before the record.
func TestStoreLogsNoSyncSyncsBeforeASealIsRecorded(t *testing.T) {
	dir := t.TempDir()
	lost := make(chan struct{})
	lossAfterSeal := func(disk *powerLossVFS) WALWrapper {
		return func(_ string, meta types.MetaStore, files types.SegmentFiler) (types.MetaStore, types.SegmentFiler) {
			return &lossAfterSealMeta{MetaStore: meta, disk: disk, lost: lost}, files
		}
	}
	g, _ := openWALOnPowerLossDiskWrapped(t, dir, 4096, lossAfterSeal)
	require.NoError(t, g.StoreLogs(sizedEntries(1, 3, 300)))
	// Past the segment's end: this write seals it.
	require.NoError(t, g.StoreLogsNoSync([]*raft.Log{{Index: 4, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{4}, 4096)}}))
	<-lost // the rotation recorded the seal, then the power went
	require.NoError(t, g.Close())

	g, _ = openWALOnPowerLossDisk(t, dir, 4096)
	defer g.Close()
	last, err := g.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(4), last)
	for _, want := range sizedEntries(1, 3, 300) {
		var l raft.Log
		require.NoError(t, g.GetLog(want.Index, &l))
		require.Equal(t, want.Data, l.Data)
	}
	var l raft.Log
	require.NoError(t, g.GetLog(4, &l))
	require.Equal(t, bytes.Repeat([]byte{4}, 4096), l.Data)
}

// lossAfterSealMeta loses power once wal-meta.db recorded a second
// segment; its later commits are lost with it.
type lossAfterSealMeta struct {
	types.MetaStore
	disk *powerLossVFS
	lost chan struct{} // closed when the power went
}

func (m *lossAfterSealMeta) CommitState(state types.PersistentState) error {
	m.disk.mu.Lock()
	dead := m.disk.dead
	m.disk.mu.Unlock()
	if dead {
		return nil // lost with the power
	}
	if err := m.MetaStore.CommitState(state); err != nil {
		return err
	}
	if len(state.Segments) > 1 {
		defer close(m.lost)
		return m.disk.loseUnsynced()
	}
	return nil
}

// A whole write (a follower's) makes the unsynced batch before it durable
// too.
func TestStoreLogsSyncsWhatNoSyncLeft(t *testing.T) {
	dir := t.TempDir()
	g, disk := openWALOnPowerLossDisk(t, dir, 0)
	require.NoError(t, g.StoreLogsNoSync(sizedEntries(1, 2, 100)))
	require.NoError(t, g.StoreLogs(sizedEntries(3, 3, 100)))
	disk.powerLoss(t)
	require.NoError(t, g.Close())

	g, _ = openWALOnPowerLossDisk(t, dir, 0)
	defer g.Close()
	requireLog(t, g, 3, 100)
}

// The log mark records only what a sync made durable: a power loss that
// takes an unsynced batch, or a sync after the batch it would cover
// was deleted (a former leader's conflicting entry), leaves a log the next
// start accepts, while a synced batch is held to.
func TestLogMarkFollowsSyncsNotUnsyncedWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, g *Store)
		last uint64
	}{
		{"unsynced", func(t *testing.T, g *Store) {
			require.NoError(t, g.StoreLogsNoSync(sizedEntries(4, 4, 100)))
		}, 3},
		{"synced", func(t *testing.T, g *Store) {
			require.NoError(t, g.StoreLogsNoSync(sizedEntries(4, 4, 100)))
			require.NoError(t, g.SyncLogs())
		}, 4},
		{"deleted before its sync", func(t *testing.T, g *Store) {
			require.NoError(t, g.StoreLogsNoSync(sizedEntries(4, 4, 100)))
			require.NoError(t, g.DeleteRange(4, 4))
			require.NoError(t, g.SyncLogs())
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			track := func(g *Store) error {
				snaps, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
				require.NoError(t, err)
				_, err = g.TrackDurability(dir, snaps)
				return err
			}
			g, disk := openWALOnPowerLossDisk(t, dir, 0)
			require.NoError(t, track(g))
			require.NoError(t, g.StoreLogs(sizedEntries(1, 3, 100)))
			tc.run(t, g)
			disk.powerLoss(t)
			require.NoError(t, g.Close()) // writes the mark as it stands

			g, _ = openWALOnPowerLossDisk(t, dir, 0)
			defer g.Close()
			require.NoError(t, track(g), "the mark claims more than the log kept")
			requireLog(t, g, tc.last, 100)
		})
	}
}
