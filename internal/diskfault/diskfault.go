// Package diskfault lets tests put a file layer under the raft log's WAL
// segment files of a node's data directory, from outside package
// cluster/datadir (the integration scenarios build nodes through
// cluster.Config, which has no field for it): a disk that loses power
// (PowerLoss). cluster/datadir consults Wrap each time it opens a WAL;
// production code never installs a layer, and with none installed Wrap
// changes nothing.
package diskfault

import (
	"errors"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft-wal/types"
)

var layers sync.Map // clean data dir → func(types.VFS) types.VFS

// Install makes every WAL opened afterwards in the data directory dataDir
// use the file system that wrap returns around the one it would use, until
// remove is called. One layer per data directory: tests running in
// parallel use their own directories.
func Install(dataDir string, wrap func(types.VFS) types.VFS) (remove func()) {
	key := filepath.Clean(dataDir)
	layers.Store(key, wrap)
	return func() { layers.Delete(key) }
}

// Wrap returns the file system the WAL in dataDir uses: vfs, or the layer
// a test installed around it.
func Wrap(dataDir string, vfs types.VFS) types.VFS {
	if w, ok := layers.Load(filepath.Clean(dataDir)); ok {
		return w.(func(types.VFS) types.VFS)(vfs)
	}
	return vfs
}

// ErrPowerLost is what the writes and syncs of a PowerLoss with FailAfter
// return once the power went.
var ErrPowerLost = errors.New("diskfault: the disk lost power")

// PowerLoss is a file system under the WAL's segment files that can lose
// power: LoseUnsynced undoes every write not synced since, as a machine
// that lost power forgets what its page cache held. Set VFS (the file
// system below) before use.
type PowerLoss struct {
	types.VFS
	// FailAfter makes writes and syncs after the power went fail with
	// ErrPowerLost; otherwise they do nothing and succeed. A node that goes
	// on running for a moment after the loss must not count a sync that
	// never happened (its leader would count itself in a commit quorum
	// with an entry it lost); a test that only closes the store after the
	// loss wants the close to succeed.
	FailAfter bool
	// SyncDelay is added to every sync: a disk whose fsync takes as long as
	// a real one's, rather than a temporary directory's in memory, so that
	// the writes not yet synced are there for a power loss to take.
	SyncDelay time.Duration
	// BeforeSync, when not nil, is called after SyncDelay and before the
	// sync of a file that holds writes not synced yet: a test makes the
	// power go at the moment a write was about to become durable.
	BeforeSync func()

	mu        sync.Mutex // protects the fields below and every file's undo and lost
	files     []*powerLossFile
	dead      bool
	undone    int
	synced    int
	failSyncs int   // FailSyncs: how many syncs are still to fail
	failErr   error // and with what
}

type powerLossFile struct {
	types.WritableFile
	disk *PowerLoss
	undo []undoWrite // the writes since the last sync, oldest first
	// lost are the writes whose sync failed (FailSyncs), oldest first: no
	// later sync makes them durable.
	lost []undoWrite
}

type undoWrite struct {
	off int64
	old []byte
}

func (d *PowerLoss) wrap(f types.WritableFile, err error) (types.WritableFile, error) {
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	pf := &powerLossFile{WritableFile: f, disk: d}
	d.files = append(d.files, pf)
	return pf, nil
}

func (d *PowerLoss) Create(dir, name string, size uint64) (types.WritableFile, error) {
	return d.wrap(d.VFS.Create(dir, name, size))
}

func (d *PowerLoss) OpenWriter(dir, name string) (types.WritableFile, error) {
	return d.wrap(d.VFS.OpenWriter(dir, name))
}

// afterLoss is what a write or sync returns once the power went.
func (d *PowerLoss) afterLoss() error {
	if d.FailAfter {
		return ErrPowerLost
	}
	return nil
}

func (f *powerLossFile) WriteAt(p []byte, off int64) (int, error) {
	f.disk.mu.Lock()
	defer f.disk.mu.Unlock()
	if f.disk.dead {
		if err := f.disk.afterLoss(); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	old := make([]byte, len(p))
	n, _ := f.WritableFile.ReadAt(old, off) // segment files are preallocated
	f.undo = append(f.undo, undoWrite{off: off, old: old[:n]})
	return f.WritableFile.WriteAt(p, off)
}

func (f *powerLossFile) Sync() error {
	time.Sleep(f.disk.SyncDelay) // before the lock: a write meanwhile is unsynced, as on a disk
	if f.disk.BeforeSync != nil {
		f.disk.mu.Lock()
		pending := len(f.undo) > 0 && !f.disk.dead
		f.disk.mu.Unlock()
		if pending {
			f.disk.BeforeSync()
		}
	}
	f.disk.mu.Lock()
	defer f.disk.mu.Unlock()
	if f.disk.dead {
		return f.disk.afterLoss()
	}
	if f.disk.failSyncs > 0 && len(f.undo) > 0 {
		f.disk.failSyncs--
		f.lost = append(f.lost, f.undo...)
		f.undo = nil
		return f.disk.failErr
	}
	if err := f.WritableFile.Sync(); err != nil {
		return err
	}
	if len(f.undo) > 0 {
		f.disk.synced++
	}
	f.undo = nil
	return nil
}

// Synced counts the syncs that made writes durable: a test waits for a
// node to have stored what it was sent, durably, by watching it grow.
func (d *PowerLoss) Synced() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.synced
}

// Unsynced says whether some write is not yet durable: a test that holds
// the next sync (BeforeSync) waits until none is, so that the sync it holds
// is the one of the write it makes next, not the end of an earlier one's.
func (d *PowerLoss) Unsynced() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.files {
		if len(f.undo) > 0 {
			return true
		}
	}
	return false
}

// FailSyncs makes the next n syncs of a file holding writes not yet synced
// fail with err, as a disk that reports an I/O error does. Like Linux after
// a failed writeback, which may mark the pages clean without writing them,
// no later sync makes those writes durable: a power loss undoes them,
// whatever was synced since.
func (d *PowerLoss) FailSyncs(n int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failSyncs, d.failErr = n, err
}

// Lost says whether the power went.
func (d *PowerLoss) Lost() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dead
}

// Undone counts the writes LoseUnsynced undid: a test of power losses
// that never undo anything tests nothing.
func (d *PowerLoss) Undone() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.undone
}

// LoseUnsynced makes the power go: every write not synced is undone, and
// later writes and syncs change nothing on disk.
func (d *PowerLoss) LoseUnsynced() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, f := range d.files {
		d.undone += len(f.undo) + len(f.lost)
		writes := append(f.lost, f.undo...) // oldest first: undone newest first
		for i := len(writes) - 1; i >= 0; i-- {
			if _, err := f.WritableFile.WriteAt(writes[i].old, writes[i].off); err != nil {
				return err
			}
		}
		f.undo, f.lost = nil, nil
	}
	return nil
}
