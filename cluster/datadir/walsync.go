package datadir

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft-wal/types"
)

// A WAL write split from its sync, for a leader that writes in parallel
// with replicating (internal/raft, doc.go: Store.StoreLogsNoSync, then
// Store.SyncLogs).
//
// raft-wal (v0.4.2) writes a batch with one pwrite to the segment file,
// then calls the file's Sync, and only once Sync returned makes the batch
// readable (its segment writer's commit index). A segment file whose Sync
// is deferred therefore makes a batch readable at once, from the page
// cache, and durable when it is synced later. syncSplit wraps the segment
// files and defers the Syncs made during a StoreLogsNoSync; the deferred
// files are synced:
//
//   - by SyncLogs;
//   - before the next StoreLogsNoSync writes: so at most the last batch is
//     ever unsynced. raft-wal's recovery at open drops a torn final batch
//     (its commit frame's CRC fails) but reads past a damaged earlier one,
//     which checkWAL then refuses as damage; with two unsynced batches a
//     power loss could keep the later one and tear the earlier;
//   - by any Sync that is not deferred (a follower's StoreLogs, a deletion):
//     a whole write is durable with everything before it;
//   - before wal-meta.db commits (a seal, a new segment, a truncation),
//     which must never name data not on disk;
//   - when the file is closed.
//
// A failed sync of a deferred write is final (failed): every later sync
// and write fails with it. The batch is readable from the page cache, but
// after a failed fsync Linux may mark its pages clean without writing them,
// so a later fsync of the same file would succeed without making them
// durable (PostgreSQL's "fsyncgate"); answering it as durable could lose an
// acknowledged entry. etcd stops the member on a failed WAL sync for the
// same reason, and so does the node (Store.Failed).
type syncSplit struct {
	mu        sync.Mutex // held across fsyncs: a write waits for a sync in flight
	deferring bool       // a StoreLogsNoSync is writing
	dirty     map[*splitFile]struct{}
	failed    error         // the first failed sync of a deferred write; then final
	failedCh  chan struct{} // closed when failed is set

	// What SyncLogs may record in the log mark (Store.SyncLogs): written
	// is the last index StoreLogsNoSync stored; truncations counts the
	// deletions of the log's end, after which written no longer holds.
	markMu      sync.Mutex
	written     uint64
	truncations uint64

	path string // the WAL's directory, for the failure's message
}

// stored records that StoreLogsNoSync stored logs through index.
func (s *syncSplit) stored(index uint64) {
	s.markMu.Lock()
	s.written = index
	s.markMu.Unlock()
}

// deleting records a deletion of the entries from min to max: one that
// takes the last entry StoreLogsNoSync stored takes the log's end.
func (s *syncSplit) deleting(min, max uint64) {
	s.markMu.Lock()
	if min <= s.written && s.written <= max {
		s.written = min - 1
		s.truncations++
	}
	s.markMu.Unlock()
}

func newSyncSplit(path string) *syncSplit {
	return &syncSplit{dirty: make(map[*splitFile]struct{}), failedCh: make(chan struct{}), path: path}
}

// deferSyncs runs write with the segment files' Syncs deferred, after
// syncing what an earlier deferred write left. The lock is not held during
// write: raft-wal's StoreLogs may wait there for a rotation whose
// wal-meta.db commit syncs (splitMeta). A Sync another goroutine makes
// meanwhile (the rotation's) is deferred too, and synced by the commit that
// follows it.
func (s *syncSplit) deferSyncs(write func() error) error {
	s.mu.Lock()
	err := s.syncLocked(nil)
	s.deferring = err == nil
	s.mu.Unlock()
	if err != nil {
		return err
	}
	defer func() {
		s.mu.Lock()
		s.deferring = false
		s.mu.Unlock()
	}()
	return write()
}

// sync makes every deferred write durable.
func (s *syncSplit) sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncLocked(nil)
}

// syncLocked syncs the dirty files and also (when not nil) f.
func (s *syncSplit) syncLocked(f *splitFile) error {
	if s.failed != nil {
		return s.failed
	}
	for d := range s.dirty {
		if err := d.WritableFile.Sync(); err != nil {
			s.failed = &SyncFailedError{Path: s.path, Err: err}
			close(s.failedCh)
			return s.failed
		}
		delete(s.dirty, d)
	}
	if f != nil {
		return f.WritableFile.Sync()
	}
	return nil
}

// splitFile is a segment file whose Sync syncSplit may defer.
type splitFile struct {
	types.WritableFile
	split *syncSplit
}

// Sync is deferred during a StoreLogsNoSync; otherwise it syncs the
// deferred writes too.
func (f *splitFile) Sync() error {
	f.split.mu.Lock()
	defer f.split.mu.Unlock()
	if f.split.deferring {
		f.split.dirty[f] = struct{}{}
		return nil
	}
	return f.split.syncLocked(f)
}

func (f *splitFile) Close() error {
	f.split.mu.Lock()
	defer f.split.mu.Unlock()
	if _, dirty := f.split.dirty[f]; dirty && f.split.failed == nil {
		delete(f.split.dirty, f)
		if err := f.WritableFile.Sync(); err != nil {
			f.WritableFile.Close()
			return err
		}
	}
	return f.WritableFile.Close()
}

// splitVFS gives raft-wal splitFiles.
type splitVFS struct {
	types.VFS
	split *syncSplit
}

func (v splitVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return &splitFile{WritableFile: f, split: v.split}, nil
}

func (v splitVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return &splitFile{WritableFile: f, split: v.split}, nil
}

// splitMeta syncs the deferred writes before wal-meta.db commits.
type splitMeta struct {
	types.MetaStore
	split *syncSplit
}

func (m splitMeta) CommitState(state types.PersistentState) error {
	if err := m.split.sync(); err != nil {
		return err
	}
	return m.MetaStore.CommitState(state)
}

// slowSyncVFS models a slower disk for the benchmark (benchknobs): each
// sync of a segment file takes delay longer, and is reported to synced.
type slowSyncVFS struct {
	types.VFS
	delay  time.Duration
	synced func(time.Duration)
}

func (v slowSyncVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return slowSyncFile{WritableFile: f, vfs: v}, nil
}

func (v slowSyncVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return slowSyncFile{WritableFile: f, vfs: v}, nil
}

type slowSyncFile struct {
	types.WritableFile
	vfs slowSyncVFS
}

func (f slowSyncFile) Sync() error {
	start := time.Now()
	time.Sleep(f.vfs.delay)
	err := f.WritableFile.Sync()
	if f.vfs.synced != nil {
		f.vfs.synced(time.Since(start))
	}
	return err
}

// ErrSyncFailed matches the error of a raft log whose disk failed to sync a
// write (SyncFailedError).
var ErrSyncFailed = errors.New("the disk failed to sync the raft log")

// SyncFailedError is the final error of a raft log whose disk failed to
// make a written batch durable: the log takes no more writes, and the node
// stops rather than acknowledge entries that may not be on disk.
type SyncFailedError struct {
	Path string // the WAL's directory
	Err  error  // what the sync returned
}

func (e *SyncFailedError) Error() string {
	return fmt.Sprintf("cluster: the disk failed to sync the raft log in %s (%v): entries it had written may not be on disk, "+
		"and after a failed sync the system may report a later one as successful without writing them, so this member "+
		"stopped rather than acknowledge them; check the disk (the kernel log says more), then start the member again "+
		"with the same data dir: it keeps what is on disk and the leader sends it the rest", e.Path, e.Err)
}

func (e *SyncFailedError) Is(target error) bool { return target == ErrSyncFailed }

func (e *SyncFailedError) Unwrap() error { return e.Err }
