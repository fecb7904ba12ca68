package datadir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"

	"github.com/raftlock/raftlock/internal/benchknobs"
	"github.com/raftlock/raftlock/internal/diskfault"
)

// The log on disk.
//
// The default log store is hashicorp/raft-wal rather than raft-boltdb/v2
// (cluster.Config.LogStore), a decision made on measurements. hashicorp/raft writes a
// new entry to the leader's log before it replicates it, so a commit waits
// for two log writes in turn (leader, then a follower) and the cost of one
// write is most of a lock operation's latency. BoltDB pays two fdatasyncs
// and B+tree page rewrites per write; the WAL appends to a preallocated
// segment with one fdatasync, which halved a lock operation's latency and
// doubled throughput (README, "Performance", has the figures). Both fsync every
// write before raft counts it, so the safety argument is unchanged.
// LogStoreBoltDB stays available, and a DataDir keeps the format it was
// created with (naming the other one is a config error rather than an empty
// log). The WAL preallocates 64 MiB segment files (cluster.Config.WALSegmentSize).
// To move a member to the other format, take it out and bring it back
// empty: Leave (`raftlock leave` for an agent), remove its DataDir, start it
// with Join and the new LogStore; it is added again and sent a snapshot.
// Wiping a member without leaving first would erase its vote in the current
// term, which it could then cast twice, and the entries it had helped
// commit: so when a node with an empty DataDir joins under the ID of a
// member, the leader removes that member and adds the node again as a new
// server (committing the removal needs the others to hold the whole log).
//
// A log that lost or corrupted entries it had stored makes cluster.New fail with
// ErrLogDamaged, naming the file and what to do: a mark file in DataDir
// (log-mark) records how far the log reached, written (within 10 ms; flushed
// to the disk within a second, so that only a lost machine, not a killed
// process, can leave it behind) after each write of the log returned, and
// lowered (flushed at once) before raft deletes entries; the CRC of every
// committed WAL batch is checked at start (walcheck.go says what raft-wal
// recovers by itself and what it does not). A write that fails (a full
// disk) is retried in place; the WAL is opened again from disk when raft-wal
// cannot append after one, and Store.Fault (cluster.Stats.LogFault) says why
// while it lasts. The only voter waits for space as leader rather than
// stepping down (see Store.StoreLogs), and its lock calls fail at once with
// cluster.ErrLogFault. A data dir without room for one segment file is refused at
// start, naming the segment's size (noRoomForSegment).

// LogStore names the on-disk format of a node's raft log and stable store
// (its term and vote). Both fsync every write before raft counts it.
type LogStore string

const (
	// LogStoreWAL is hashicorp/raft-wal in DataDir/wal: segment files
	// appended with one fdatasync per write. A commit waits for a write on
	// the leader and on a follower in turn, so the write's cost is most of a
	// lock operation's latency; here it is about half of BoltDB's.
	LogStoreWAL LogStore = "wal"
	// LogStoreBoltDB is hashicorp/raft-boltdb/v2 in DataDir/raft.db: a B+tree
	// that pays two fdatasyncs and page rewrites for every write.
	LogStoreBoltDB LogStore = "boltdb"
)

// logStore is what raft keeps on disk besides snapshots: its log and its
// term and vote.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// Where each LogStore keeps the log in DataDir.
const (
	WALDirName     = "wal"
	BoltDBFileName = "raft.db"
)

// OpenLogStore opens the log store in dir. An empty kind means the format
// the directory already holds, or LogStoreWAL for a fresh directory. A kind
// that disagrees with what the directory holds is refused: opening the other
// format would find an empty log, and a node with an empty log would take a
// snapshot's or a leader's word for everything it had promised. A
// walSegmentSize of 0 leaves raft-wal's default. wrapWAL, when not nil,
// wraps raft-wal's metadata store and segment files each time the WAL is
// opened (tests make them fail on demand).
func OpenLogStore(dir string, kind LogStore, walSegmentSize int, logger hclog.Logger, wrapWAL WALWrapper) (*Store, LogStore, error) {
	hasWAL, err := nonEmptyDir(filepath.Join(dir, WALDirName))
	if err != nil {
		return nil, "", err
	}
	hasBolt, err := fileExists(filepath.Join(dir, BoltDBFileName))
	if err != nil {
		return nil, "", err
	}
	var found LogStore
	switch {
	case hasWAL && hasBolt:
		return nil, "", configError("DataDir", "{DataDir} %s holds both a wal log (%s/) and a boltdb log (%s); remove the one that is not in use",
			dir, WALDirName, BoltDBFileName)
	case hasWAL:
		found = LogStoreWAL
	case hasBolt:
		found = LogStoreBoltDB
	}
	switch {
	case kind == "" && found == "":
		kind = LogStoreWAL
	case kind == "":
		kind = found
	case found != "" && kind != found:
		return nil, "", configError("LogStore", "{LogStore} is %q but {DataDir} %s holds a %s log: a %s log there would start empty; leave {LogStore} unset to use what the directory holds",
			kind, dir, found, kind)
	}

	switch kind {
	case LogStoreWAL:
		path := filepath.Join(dir, WALDirName)
		if err := os.MkdirAll(path, 0o700); err != nil {
			return nil, "", fmt.Errorf("cluster: %w", err)
		}
		split := newSyncSplit(path) // the same across reopens: a closed file syncs what it deferred
		open := func() (logStore, error) {
			if err := checkWAL(path, dir); err != nil {
				return nil, err
			}
			var meta types.MetaStore = splitMeta{MetaStore: &metadb.BoltMetaDB{}, split: split}
			var vfs types.VFS = privateVFS{walfs.New()}
			if benchknobs.LogSyncDelay > 0 || benchknobs.LogSynced != nil {
				vfs = slowSyncVFS{VFS: vfs, delay: benchknobs.LogSyncDelay, synced: benchknobs.LogSynced}
			}
			vfs = diskfault.Wrap(dir, vfs) // a test's disk that loses power, say
			files := types.SegmentFiler(segment.NewFiler(path, splitVFS{VFS: vfs, split: split}))
			if wrapWAL != nil {
				meta, files = wrapWAL(path, meta, files)
			}
			// A size of 0 leaves raft-wal's default.
			store, err := wal.Open(path, wal.WithLogger(logger.Named("wal")), wal.WithSegmentSize(walSegmentSize),
				wal.WithMetaStore(meta), wal.WithSegmentFiler(files))
			if err != nil {
				// wal.Open leaves wal-meta.db open (and locked) when it
				// fails: the next attempt would wait for it forever.
				meta.Close()
				return nil, fmt.Errorf("cluster: opening raft log %s: %w", path, err)
			}
			return store, nil
		}
		store, err := open()
		if errors.Is(err, syscall.ENOSPC) {
			return nil, "", noRoomForSegment(path, walSegmentSize, err)
		}
		if err != nil {
			return nil, "", err
		}
		g := newStore(store, open, path, logger)
		g.split = split
		return g, kind, nil
	case LogStoreBoltDB:
		path := filepath.Join(dir, BoltDBFileName)
		// NoSync stays false: a lock granted is a lock on disk.
		store, err := raftboltdb.New(raftboltdb.Options{Path: path})
		if err != nil {
			return nil, "", fmt.Errorf("cluster: opening raft log %s: %w", path, err)
		}
		return newStore(store, nil, path, logger), kind, nil
	}
	return nil, "", configError("LogStore", "unknown {LogStore} %q (want %q or %q)", kind, LogStoreWAL, LogStoreBoltDB)
}

// noRoomForSegment is the error of a WAL that cannot be opened because its
// file system has no room for a segment file, which raft-wal preallocates
// in full: it names the size needed and the field that sets it.
func noRoomForSegment(path string, segmentSize int, err error) error {
	if segmentSize == 0 {
		segmentSize = wal.DefaultSegmentSize // what 0 leaves
	}
	return configError("WALSegmentSize", "the raft log %s in {DataDir} needs room for a segment file of %d bytes (%s, preallocated in full; {WALSegmentSize} sets it) and its file system has less (%v): free space there, or set a smaller {WALSegmentSize} (at least 4096 bytes)",
		path, segmentSize, sizeInWords(segmentSize), err)
}

// sizeInWords is n bytes as people write it (64 MiB, 16 KiB, 1000 bytes).
func sizeInWords(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// WALWrapper wraps raft-wal's metadata store and segment files of the WAL
// in dir.
type WALWrapper func(dir string, meta types.MetaStore, files types.SegmentFiler) (types.MetaStore, types.SegmentFiler)

// Store lets Close wait for calls in progress, and ends any call that
// comes after it. raft's transport answers heartbeats on its own goroutines,
// outside raft's main loop, so Raft.Shutdown does not wait for them: one
// that passed raft's shutdown check can still persist a new term after the
// node has shut raft down. raft panics when that write fails, which would
// take the embedding application down on an ordinary Close. Such a late
// call gets no answer instead: its goroutine ends (runtime.Goexit runs its
// deferred calls, so the connection it serves is closed), and the peer
// counts an unanswered RPC as it would for a stopped node.
//
// It also keeps the log usable across write failures (a full disk): after a
// failed write of the log it opens the log again from what is on disk
// (raft-wal cannot append again in-process after some of them), records the
// failure for Stats and logs it while it lasts; and it keeps the log mark
// (logMark) in step with the log.
type Store struct {
	mu     sync.RWMutex // held for reading by every call, for writing by Close and reopen
	closed bool
	store  logStore // nil after a reopen failed (broken says why)
	broken error
	// reopen opens the log again from disk; nil when the store recovers
	// from a failed write by itself (raft-boltdb rolls the transaction back).
	reopen     func() (logStore, error)
	lastReopen time.Time // guarded by mu

	path   string
	logger hclog.Logger

	// mark and snapshots (what the snapshot store holds, newest first) are
	// set by TrackDurability before raft starts, and only read afterwards;
	// nil before.
	mark      *logMark
	snapshots func() []*raft.SnapshotMeta
	// raft is the raft that uses the store, set once raft runs (SetRaft);
	// nil before.
	raft atomic.Pointer[RaftState]
	// isSoleVoter is the node's test of whether it is the only voter (see
	// StoreLogs), set once raft runs; nil before.
	isSoleVoter atomic.Pointer[func() bool]

	faults writeFaults

	abandoned   chan struct{} // closed by Abandon
	abandonOnce sync.Once

	// split lets a write of the WAL be split from its sync (walsync.go);
	// nil for BoltDB, whose writes are whole.
	split *syncSplit
}

func newStore(store logStore, reopen func() (logStore, error), path string, logger hclog.Logger) *Store {
	return &Store{store: store, reopen: reopen, path: path, logger: logger, faults: writeFaults{path: path, logger: logger},
		abandoned: make(chan struct{})}
}

// reopenPace is the least time between two attempts to open a log that
// could not be opened again.
const reopenPace = 200 * time.Millisecond

// enter is called first by every method; the caller must call mu.RUnlock.
func (g *Store) enter() {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		runtime.Goexit()
	}
}

// use runs fn on the store. The log is opened again afterwards when fn was
// a write of the log (logWrite) that left raft-wal unable to append (a
// failed rotation or truncation: "segment is sealed"), or a deletion that
// failed (it may have failed halfway), or when the store is broken. Other
// failed writes leave raft-wal as it was before them: they are retried in
// place.
func (g *Store) use(logWrite bool, fn func(s logStore) error) error {
	err, _ := g.try(logWrite, fn)
	return err
}

// try is use, and also says whether the store was broken (fn did not run).
func (g *Store) try(logWrite bool, fn func(s logStore) error) (error, bool) {
	g.enter()
	s := g.store
	var err error
	if s == nil {
		err = g.broken
	} else {
		err = fn(s)
	}
	g.mu.RUnlock()
	if err != nil && g.reopen != nil && (s == nil || logWrite && errors.Is(err, wal.ErrSealed)) {
		g.reopenAfter(s)
	}
	return err, s == nil
}

// reopenAfter closes failed (if it is still the store) and opens the log
// again, re-reading what is durable.
func (g *Store) reopenAfter(failed logStore) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.store != failed {
		return // closed, or another call already reopened it
	}
	if failed == nil && time.Since(g.lastReopen) < reopenPace {
		return
	}
	g.lastReopen = time.Now()
	if failed != nil {
		if err := failed.Close(); err != nil {
			g.logger.Warn("closing the raft log after a failed write", "path", g.path, "error", err)
		}
		g.store = nil
	}
	s, err := g.reopen()
	if err != nil {
		g.broken = fmt.Errorf("cluster: raft log %s was closed after a failed write and cannot be opened again yet: %w", g.path, err)
		g.faults.failed(g.broken)
		return
	}
	g.store, g.broken = s, nil
}

func (g *Store) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	var errs []error
	if g.store != nil {
		errs = append(errs, g.store.Close())
	}
	if g.mark != nil {
		errs = append(errs, g.mark.close())
	}
	return errors.Join(errs...)
}

// IsMonotonic tells raft whether the log refuses gaps between indexes
// (raft-wal does), so that restoring a snapshot resets the log rather than
// leaving a gap.
func (g *Store) IsMonotonic() bool {
	return g.reopen != nil // only raft-wal is reopened, and only it is monotonic
}

func (g *Store) FirstIndex() (i uint64, err error) {
	err = g.use(false, func(s logStore) (err error) { i, err = s.FirstIndex(); return err })
	return i, err
}

func (g *Store) LastIndex() (i uint64, err error) {
	err = g.use(false, func(s logStore) (err error) { i, err = s.LastIndex(); return err })
	return i, err
}

func (g *Store) GetLog(index uint64, log *raft.Log) error {
	return g.use(false, func(s logStore) error { return s.GetLog(index, log) })
}

func (g *Store) StoreLog(log *raft.Log) error {
	return g.StoreLogs([]*raft.Log{log})
}

// StoreLogs writes logs; once the store said they are on disk, the mark
// may record them.
//
// A write that fails for want of space is returned to raft, which then
// counts the entries as not stored: a follower refuses the append (the
// leader sends it again), a leader steps down so that a member whose disk
// has room can lead. The only voter has no such member: raft (v1.7.3)
// would step it down and it would elect itself again at once, an election
// each heartbeat timeout for as long as the disk stays full, none of which
// can commit. So while this node is the only voter (soleVoter), the write
// waits for space instead, and is tried again every reopenPace: the node
// stays leader, commits again by itself as soon as the write succeeds, and
// meanwhile says why it cannot (Store.Fault, which the node reports).
func (g *Store) StoreLogs(logs []*raft.Log) error {
	return g.storeLogs(logs, false)
}

// StoreLogsNoSync writes logs as StoreLogs does, readable at once but
// durable only once SyncLogs returned (walsync.go); the mark records them
// then. With BoltDB it is StoreLogs. The leader's write in parallel with
// replicating uses it (internal/raft, doc.go).
func (g *Store) StoreLogsNoSync(logs []*raft.Log) error {
	return g.storeLogs(logs, g.split != nil)
}

// SyncLogs makes every log StoreLogsNoSync wrote before it durable.
func (g *Store) SyncLogs() error {
	if g.split == nil {
		return nil
	}
	g.split.markMu.Lock()
	last, truncations := g.split.written, g.split.truncations // before the sync, which covers them
	g.split.markMu.Unlock()
	if err := g.use(false, func(logStore) error { return g.split.sync() }); err != nil {
		g.faults.failed(err)
		return err
	}
	if g.mark == nil || last == 0 {
		return nil
	}
	// An end deleted meanwhile (a former leader's conflicting entries)
	// may have taken last with it: the mark waits for the next sync.
	g.split.markMu.Lock()
	defer g.split.markMu.Unlock()
	if g.split.truncations == truncations {
		g.mark.raise(last)
	}
	return nil
}

func (g *Store) storeLogs(logs []*raft.Log, noSync bool) error {
	write := func(s logStore) error { return s.StoreLogs(logs) }
	if noSync {
		write = func(s logStore) error { return g.split.deferSyncs(func() error { return s.StoreLogs(logs) }) }
	}
	for {
		err, broken := g.try(true, write)
		if err == nil {
			break
		}
		g.faults.failed(err)
		if !g.waitsForSpace(err, broken) {
			return err
		}
		g.pause()
	}
	g.faults.succeeded()
	if len(logs) == 0 {
		return nil
	}
	if noSync {
		g.split.stored(logs[len(logs)-1].Index)
	} else if g.mark != nil {
		g.mark.raise(logs[len(logs)-1].Index)
	}
	return nil
}

// waitsForSpace reports whether a write of the log that failed with err
// (broken: the log could not be opened again after an earlier failure)
// waits and is tried again rather than failing: a want of space, while
// this node is the only voter.
func (g *Store) waitsForSpace(err error, broken bool) bool {
	if !broken && !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, wal.ErrSealed) {
		return false
	}
	return g.soleVoter()
}

// soleVoter reports whether this node is the only voter (see StoreLogs);
// false until the node told the store how to tell (SetSoleVoter).
func (g *Store) soleVoter() bool {
	f := g.isSoleVoter.Load()
	return f != nil && (*f)()
}

// SetSoleVoter gives the store the node's test of whether it is the only
// voter; raft's goroutines may already be writing.
func (g *Store) SetSoleVoter(f func() bool) {
	g.isSoleVoter.Store(&f)
}

// pause waits reopenPace before a write is tried again; when the node
// closes meanwhile (Abandon), the calling goroutine ends without an
// answer, as a call after Close does.
func (g *Store) pause() {
	t := time.NewTimer(reopenPace)
	select {
	case <-t.C:
	case <-g.abandoned:
		t.Stop()
		runtime.Goexit()
	}
}

// DeleteRange deletes logs; when the deletion takes the log's last index
// away (a follower's conflicting suffix, or the whole log after a snapshot
// install), the mark is lowered on disk first, so that a crash right after
// the deletion does not make an honest log look truncated. Entries past an
// installed snapshot that agree with it stay (keptPastSnapshot).
func (g *Store) DeleteRange(min, max uint64) error {
	var deleting logStore
	err := g.use(true, func(s logStore) error {
		if g.snapshots != nil {
			var err error
			if max, err = g.keptPastSnapshot(s, min, max); err != nil || max < min {
				return err
			}
		}
		if g.split != nil {
			g.split.deleting(min, max)
		}
		if g.mark != nil {
			if err := g.lowerMarkFor(s, min, max); err != nil {
				return err
			}
		}
		deleting = s
		return s.DeleteRange(min, max)
	})
	if err != nil {
		g.faults.failed(err)
		if deleting != nil && g.reopen != nil && !errors.Is(err, wal.ErrSealed) {
			g.reopenAfter(deleting) // (use reopened it after ErrSealed)
		}
	}
	return err
}

// keptPastSnapshot returns the last index to delete of a deletion from min
// to max: max, except when it would take entries past the snapshot raft
// last installed or restored (its last applied index) along with the
// entries the snapshot replaces, while the log holds the snapshot's last
// entry with the snapshot's term. Then the deletion stops before that entry.
//
// Only one deletion by raft (v1.7.3) looks like that: after installing a
// snapshot sent by the leader, raft empties a log that refuses gaps
// (IsMonotonic, raft-wal) whatever it holds, yet goes on believing the log
// ends where it ended, and the snapshot's end can lie before that (the
// leader sent it after losing track of how far this follower's log reached).
// A leader whose log ends there too (a new one, elected with the same
// entries) then appends after that end, and once it commits, raft reads the
// entries past the snapshot to apply them, finds none, and panics ("log not
// found"). Raft's own rule for a snapshot install is to keep the entries
// past it when the log holds its last entry with its term; those entries
// agree with the leader's up to there, and any conflict after it is
// resolved by raft's appends as usual. A log whose entry there disagrees, or
// that starts after it, is emptied as raft asks. Raft's other deletions
// never reach past its last applied index from before it: compaction stops
// at a snapshot, which is at most that index, and a conflicting suffix
// starts after the entries committed, which include the applied ones.
func (g *Store) keptPastSnapshot(s logStore, min, max uint64) (uint64, error) {
	r := g.raftState()
	if r == nil {
		return max, nil
	}
	last, err := s.LastIndex()
	if err != nil || last == 0 || max < last {
		return max, err
	}
	snapIndex := r.AppliedIndex()
	if snapIndex == 0 || min > snapIndex || snapIndex >= last {
		return max, nil
	}
	snapshots := g.snapshots()
	i := slices.IndexFunc(snapshots, func(m *raft.SnapshotMeta) bool { return m.Index == snapIndex })
	if i < 0 {
		return max, nil
	}
	snapTerm := snapshots[i].Term
	var entry raft.Log
	switch err := s.GetLog(snapIndex, &entry); {
	case errors.Is(err, raft.ErrLogNotFound):
		return max, nil
	case err != nil:
		return 0, err
	case entry.Term != snapTerm:
		return max, nil
	}
	g.logger.Info("keeping the raft log past an installed snapshot", "snapshot_index", snapIndex, "last_index", last)
	return snapIndex - 1, nil
}

func (g *Store) lowerMarkFor(s logStore, min, max uint64) error {
	first, err := s.FirstIndex()
	if err != nil {
		return err
	}
	last, err := s.LastIndex()
	if err != nil {
		return err
	}
	if last == 0 || max < last || min > last {
		return nil // the last index stays
	}
	keep := min - 1 // a suffix goes: the log then ends at min-1
	if min <= first {
		// The whole log goes; raft stored the snapshot that replaces it
		// before deleting it.
		keep = latestSnapshotIndex(g.snapshots())
	}
	return g.mark.lower(keep)
}

// The stable store (term and vote) is written by raft, which panics when a
// write fails. While the log cannot be opened again, or the disk is full,
// such a write waits and retries until it succeeds, or until the node
// closes: the node can neither vote nor lead meanwhile anyway, and a panic
// would take the embedding application down.
func (g *Store) stableWrite(fn func(s logStore) error) error {
	for {
		err, broken := g.try(false, fn)
		if err == nil {
			g.faults.stableSucceeded()
			return nil
		}
		if !broken && !errors.Is(err, syscall.ENOSPC) {
			return err
		}
		if broken {
			g.faults.failed(err)
		} else {
			g.faults.stableFailed(err)
		}
		if broken {
			g.mu.RLock()
			reopened := g.store != nil
			g.mu.RUnlock()
			if reopened {
				continue // write now
			}
		}
		g.pause() // as for a call after Close: no answer, no panic
	}
}

// Abandon ends the waits of stableWrite and StoreLogs: the node is closing. Call it before
// raft.Shutdown, which waits for raft's goroutines.
func (g *Store) Abandon() {
	g.abandonOnce.Do(func() { close(g.abandoned) })
}

func (g *Store) Set(key, val []byte) error {
	return g.stableWrite(func(s logStore) error { return s.Set(key, val) })
}

func (g *Store) Get(key []byte) (v []byte, err error) {
	err = g.use(false, func(s logStore) (err error) { v, err = s.Get(key); return err })
	return v, err
}

func (g *Store) SetUint64(key []byte, val uint64) error {
	return g.stableWrite(func(s logStore) error { return s.SetUint64(key, val) })
}

func (g *Store) GetUint64(key []byte) (v uint64, err error) {
	err = g.use(false, func(s logStore) (err error) { v, err = s.GetUint64(key); return err })
	return v, err
}

// writeFaults remembers a failing log store while it fails, and says so in
// the node's log, at most once per writeFaultLogEvery.
type writeFaults struct {
	path   string
	logger hclog.Logger

	// failing is set while err is: every lock call asks (Store.Fault),
	// and most ask while writes succeed.
	failing atomic.Bool

	mu     sync.Mutex
	err    error // nil while writes succeed
	since  time.Time
	logged time.Time
	// stable: the fault is only that writes of the term or vote failed (no
	// write of the log failed since it began), so a term or vote write that
	// succeeds ends it; an idle follower may get no log write for long.
	stable bool
}

const writeFaultLogEvery = 10 * time.Second

func (f *writeFaults) failed(err error) {
	f.record(err, false)
}

// stableFailed records a failed write of the term or vote.
func (f *writeFaults) stableFailed(err error) {
	f.record(err, true)
}

func (f *writeFaults) record(err error, stable bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.err == nil {
		f.since = now
		f.stable = stable
	} else if !stable {
		f.stable = false
	}
	f.err = err
	f.failing.Store(true)
	if now.Sub(f.logged) < writeFaultLogEvery {
		return
	}
	f.logged = now
	hint := f.hintLocked()
	f.logger.Error("raft log writes fail: this node cannot commit, replicate or vote until one succeeds",
		"path", f.path, "since", f.since.UTC().Format(time.RFC3339), "error", err, "what_to_do", hint)
}

// hintLocked says what to do about the current failure.
func (f *writeFaults) hintLocked() string {
	if errors.Is(f.err, syscall.ENOSPC) {
		return "the disk is full: free space on the file system of " + f.path + "; the node retries by itself, no restart is needed"
	}
	return "find the cause in the error; the node retries by itself"
}

func (f *writeFaults) succeeded() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endLocked()
}

// stableSucceeded records a write of the term or vote that succeeded: it
// ends a fault made only of such writes, not one where the log failed.
func (f *writeFaults) stableSucceeded() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stable {
		f.endLocked()
	}
}

func (f *writeFaults) endLocked() {
	if f.err == nil {
		return
	}
	f.logger.Info("raft log writes succeed again", "path", f.path, "after", time.Since(f.since).Round(time.Millisecond))
	f.err, f.logged, f.stable = nil, time.Time{}, false
	f.failing.Store(false)
}

// Fault describes the current failure of the log's writes; "" while
// writes succeed.
func (g *Store) Fault() string { return g.faults.fault() }

// Failed is closed once the disk failed to make a batch durable that had
// been written without its sync (SyncLogs, or the sync before the next
// write): the log then refuses every write for good, and the node stops
// (SyncFailedError says why). Never closed for BoltDB, whose writes are
// whole: a failed one is retried in place.
func (g *Store) Failed() <-chan struct{} {
	if g.split == nil {
		return nil
	}
	return g.split.failedCh
}

// FailedError is the *SyncFailedError once Failed is closed; nil before.
func (g *Store) FailedError() error {
	if g.split == nil {
		return nil
	}
	select {
	case <-g.split.failedCh:
		return g.split.failed // set before the channel closed, never after
	default:
		return nil
	}
}

// DescribeFault is Fault, and what to do about it; "", "" while writes
// succeed.
func (g *Store) DescribeFault() (fault, hint string) { return g.faults.describe() }

// fault describes the current write failure; "" while writes succeed.
func (f *writeFaults) fault() string {
	fault, _ := f.describe()
	return fault
}

// describe is fault, and what to do about it; "", "" while writes succeed.
func (f *writeFaults) describe() (fault, hint string) {
	if !f.failing.Load() {
		return "", ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		return "", ""
	}
	return fmt.Sprintf("raft log %s: writes fail since %s: %v", f.path, f.since.UTC().Format(time.RFC3339), f.err), f.hintLocked()
}

func nonEmptyDir(path string) (bool, error) {
	entries, err := os.ReadDir(path)
	if exists, err := existence(err); !exists {
		return false, err
	}
	return len(entries) > 0, nil
}

func fileExists(path string) (bool, error) {
	_, err := os.Stat(path)
	return existence(err)
}

// existence reads the error of a look at a path (os.Stat, os.ReadDir):
// whether the path exists, or the error (wrapped) when that cannot be
// told. A path that does not exist is not an error.
func existence(err error) (bool, error) {
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cluster: %w", err)
	}
	return true, nil
}
