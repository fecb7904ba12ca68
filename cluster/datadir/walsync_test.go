package datadir

import (
	"bytes"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/types"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/internal/diskfault"
)

// powerLoss makes disk lose power: every write not synced since is undone.
func powerLoss(t *testing.T, disk *diskfault.PowerLoss) {
	require.NoError(t, disk.LoseUnsynced())
}

// openWALOnPowerLossDisk opens a WAL store in dir whose segment files can
// lose power.
func openWALOnPowerLossDisk(t *testing.T, dir string, segmentSize int) (*Store, *diskfault.PowerLoss) {
	return openWALOnPowerLossDiskWrapped(t, dir, segmentSize, nil)
}

func openWALOnPowerLossDiskWrapped(t *testing.T, dir string, segmentSize int, wrap func(*diskfault.PowerLoss) WALWrapper) (*Store, *diskfault.PowerLoss) {
	t.Helper()
	disk := &diskfault.PowerLoss{}
	defer diskfault.Install(dir, func(v types.VFS) types.VFS { disk.VFS = v; return disk })()
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
			powerLoss(t, disk)
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
	powerLoss(t, disk)
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
	lossAfterSeal := func(disk *diskfault.PowerLoss) WALWrapper {
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
	disk *diskfault.PowerLoss
	lost chan struct{} // closed when the power went
}

func (m *lossAfterSealMeta) CommitState(state types.PersistentState) error {
	if m.disk.Lost() {
		return nil // lost with the power
	}
	if err := m.MetaStore.CommitState(state); err != nil {
		return err
	}
	if len(state.Segments) > 1 {
		defer close(m.lost)
		return m.disk.LoseUnsynced()
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
	powerLoss(t, disk)
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
			powerLoss(t, disk)
			require.NoError(t, g.Close()) // writes the mark as it stands

			g, _ = openWALOnPowerLossDisk(t, dir, 0)
			defer g.Close()
			require.NoError(t, track(g), "the mark claims more than the log kept")
			requireLog(t, g, tc.last, 100)
		})
	}
}

// A failed sync of a batch written without its sync is final: the disk may
// report the next sync as successful without having written the batch (as
// Linux may after a failed writeback), so the log refuses every later sync
// and write rather than let an entry that is not on disk be acknowledged.
func TestFailedSyncOfAnUnsyncedBatchIsFinal(t *testing.T) {
	dir := t.TempDir()
	g, disk := openWALOnPowerLossDisk(t, dir, 0)
	require.NoError(t, g.StoreLogs(sizedEntries(1, 3, 100)))
	require.NoError(t, g.StoreLogsNoSync(sizedEntries(4, 4, 100)))
	disk.FailSyncs(1, syscall.EIO)
	err := g.SyncLogs()
	require.ErrorIs(t, err, ErrSyncFailed)
	require.ErrorIs(t, err, syscall.EIO)
	select {
	case <-g.Failed():
	default:
		t.Fatal("Failed is not closed after a failed sync")
	}
	require.ErrorIs(t, g.FailedError(), ErrSyncFailed)

	// The disk syncs again; the log still refuses.
	require.ErrorIs(t, g.SyncLogs(), ErrSyncFailed)
	require.ErrorIs(t, g.StoreLogsNoSync(sizedEntries(5, 5, 100)), ErrSyncFailed)
	require.ErrorIs(t, g.StoreLogs(sizedEntries(5, 5, 100)), ErrSyncFailed)
	powerLoss(t, disk)
	require.NoError(t, g.Close())

	g, _ = openWALOnPowerLossDisk(t, dir, 0)
	defer g.Close()
	requireLog(t, g, 3, 100)
}
