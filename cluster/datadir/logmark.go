package datadir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// logMarkFileName is the file in the data dir that records how far the raft
// log reached: see logMark.
const logMarkFileName = "log-mark"

// logMarkPace is the least time between two writes of the mark: a burst of
// commits costs the mark one pwrite per pace.
const logMarkPace = 10 * time.Millisecond

// logMarkSyncPace is the least time between two fdatasyncs of a raised mark.
// A raise is written at once but flushed to the disk at most this often: a
// flush per write competed with the log's own fsyncs for the disk and cost a
// loaded 3-node cluster on one disk about a sixth of its commits per second.
// A raise that is not yet flushed is lost only with the machine (power loss,
// kernel crash), not with the process (kill -9, a crash, an OOM kill: the
// page cache keeps it); then the mark on disk is an older, lower one: a
// weaker check at the next start, never a false one. Lowering is always
// flushed before it returns (see lower).
const logMarkSyncPace = time.Second

// The mark file holds two slots; each is written whole with one pwrite, the
// two in turn, so that a write torn by a crash spoils one
// slot and leaves the other, older value. A slot is
//
//	magic uint32 | seq uint64 | index uint64 | crc32c(magic..index) uint32
//
// little endian, and the valid slot with the higher seq is the mark.
const (
	logMarkMagic    = 0x6b6d6c72 // "rlmk"
	logMarkSlotSize = 24
)

var logMarkCRC = crc32.MakeTable(crc32.Castagnoli)

// logMark is a durable lower bound of how far the raft log reached: an index
// the log store held on disk when it said so (StoreLogs returned), lowered
// before raft deletes entries legitimately (a follower's conflicting suffix,
// or the whole log after a snapshot install). At start, a log that ends
// below it (counting the latest snapshot) has lost entries it had
// acknowledged: the node refuses to start rather than grant again locks and
// fencing tokens it may have granted.
//
// The mark is written after the log store returned, never before, so that a
// crash in between leaves a mark below the log, not above it; it is written
// by its own goroutine, at most once per logMarkPace, so that committing
// waits for no extra fsync. Lowering is synchronous and happens before the
// deletion.
type logMark struct {
	path   string
	logger hclog.Logger
	// target is the value to record: raised after each write of the log,
	// lowered before a deletion. Atomic, so that raising it costs the
	// commit path no lock.
	target atomic.Uint64

	writeMu sync.Mutex // serialises writes of the file, and reads of target for them
	f       *os.File
	seq     uint64 // seq of the newest valid slot
	slot    int    // the slot that holds it
	written uint64 // the index it holds
	failed  bool   // the last write failed (logged once until one succeeds)
	// synced is the index the file holds on disk for sure (flushed), and
	// lastSync when it was last flushed.
	synced   uint64
	lastSync time.Time
	started  bool // run was started (set before any concurrent use)

	wake chan struct{} // buffered 1: target moved up
	stop chan struct{}
	done chan struct{}
}

// errLogMarkDamaged says both slots of the mark file are unreadable.
var errLogMarkDamaged = errors.New("cluster: log mark file is damaged")

// openLogMark opens (or creates) the mark file in dir and returns the index
// it holds; found is false when the file is new or empty (a fresh data dir,
// or one written by a version that kept no mark).
func openLogMark(dir string, logger hclog.Logger) (m *logMark, index uint64, found bool, err error) {
	path := dir + string(os.PathSeparator) + logMarkFileName
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, false, fmt.Errorf("cluster: opening %s: %w", path, err)
	}
	m = &logMark{path: path, logger: logger, f: f, slot: 1,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	var buf [2 * logMarkSlotSize]byte
	n, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, 0, false, fmt.Errorf("cluster: reading %s: %w", path, err)
	}
	if n == 0 {
		return m, 0, false, nil
	}
	valid := false
	for i := range 2 {
		seq, idx, ok := decodeLogMarkSlot(buf[i*logMarkSlotSize : (i+1)*logMarkSlotSize])
		if ok && (!valid || seq > m.seq) {
			valid, m.seq, m.slot, m.written = true, seq, i, idx
		}
	}
	if !valid {
		f.Close()
		return nil, 0, false, fmt.Errorf("%w: %s holds no valid record of how far the raft log reached, so the node cannot tell whether its log is whole", errLogMarkDamaged, path)
	}
	m.target.Store(m.written)
	m.synced = m.written
	return m, m.written, true, nil
}

func decodeLogMarkSlot(b []byte) (seq, index uint64, ok bool) {
	if len(b) < logMarkSlotSize || binary.LittleEndian.Uint32(b[0:4]) != logMarkMagic {
		return 0, 0, false
	}
	if crc32.Checksum(b[:20], logMarkCRC) != binary.LittleEndian.Uint32(b[20:24]) {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(b[4:12]), binary.LittleEndian.Uint64(b[12:20]), true
}

// start runs the writer goroutine; stop with close.
func (m *logMark) start() {
	m.started = true
	go m.run()
}

// raise records that the log held index on disk. Cheap: it never waits.
func (m *logMark) raise(index uint64) {
	for {
		cur := m.target.Load()
		if index <= cur {
			return
		}
		if m.target.CompareAndSwap(cur, index) {
			break
		}
	}
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// lower makes the mark at most index, on disk, before it returns; called
// before the log deletes entries above index.
func (m *logMark) lower(index uint64) error {
	for {
		cur := m.target.Load()
		if cur <= index || m.target.CompareAndSwap(cur, index) {
			break
		}
	}
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	if m.written <= index && m.synced <= index {
		return nil
	}
	// Flushed before the deletion, whatever the pace: a raised mark still
	// on disk after the deletion would make an honest log look truncated.
	return m.writeLocked(m.target.Load(), true)
}

func (m *logMark) run() {
	defer close(m.done)
	var syncTimer <-chan time.Time // set while a written mark waits for its flush
	for {
		select {
		case <-m.wake:
		case <-syncTimer:
		case <-m.stop:
			return
		}
		syncTimer = nil
		if m.flush(false) {
			syncTimer = time.After(logMarkSyncPace)
		}
		// Pace: the commits of the next logMarkPace share one write.
		t := time.NewTimer(logMarkPace)
		select {
		case <-t.C:
		case <-m.stop:
			t.Stop()
			return
		}
	}
}

// flush writes target if it moved, and flushes it to the disk when the last
// flush is logMarkSyncPace old or always is set. It reports whether the
// file holds a mark not yet flushed.
func (m *logMark) flush(always bool) (unsynced bool) {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	v := m.target.Load()
	sync := always || time.Since(m.lastSync) >= logMarkSyncPace
	if v != m.written || sync && m.synced != m.written {
		// A failure leaves the older, lower mark: a weaker check, never a
		// false one. The next raise tries again.
		_ = m.writeLocked(v, sync)
	}
	return m.synced != m.written
}

// writeLocked writes index to the slot not holding the newest value, and
// flushes the file to the disk if sync is set. The caller holds writeMu.
func (m *logMark) writeLocked(index uint64, sync bool) error {
	var b [logMarkSlotSize]byte
	binary.LittleEndian.PutUint32(b[0:4], logMarkMagic)
	binary.LittleEndian.PutUint64(b[4:12], m.seq+1)
	binary.LittleEndian.PutUint64(b[12:20], index)
	binary.LittleEndian.PutUint32(b[20:24], crc32.Checksum(b[:20], logMarkCRC))
	slot := 1 - m.slot
	var err error
	if index != m.written {
		_, err = m.f.WriteAt(b[:], int64(slot*logMarkSlotSize))
	}
	if err == nil && sync {
		err = fdatasync(m.f)
	}
	if err != nil {
		if !m.failed {
			m.logger.Warn("cannot record how far the raft log reached; the check at the next start will be weaker until a write succeeds", "file", m.path, "error", err)
		}
		m.failed = true
		return fmt.Errorf("cluster: writing %s: %w", m.path, err)
	}
	m.failed = false
	if index != m.written {
		m.seq++
		m.slot = slot
		m.written = index
	}
	if sync {
		m.synced, m.lastSync = index, time.Now()
	}
	return nil
}

// close stops the writer, writes the latest target and closes the file.
func (m *logMark) close() error {
	close(m.stop)
	if m.started {
		<-m.done
	}
	m.flush(true)
	return m.f.Close()
}

// TrackDurability checks, before raft starts, that the log reaches as far as
// the mark in dataDir says it did (counting the latest snapshot), then keeps
// the mark in step with the log. It also removes snapshot directories that
// failed snapshots left, and returns snaps wrapped so that a failing snapshot
// removes its own. cluster.New calls it once, before raft.NewRaft.
func (g *Store) TrackDurability(dataDir string, snaps raft.SnapshotStore) (raft.SnapshotStore, error) {
	snapDir := filepath.Join(dataDir, "snapshots") // raft's FileSnapshotStore layout
	removeTempSnapshots(snapDir, "", g.logger)
	snapshots := func() []*raft.SnapshotMeta {
		list, _ := snaps.List() // newest first
		return list
	}
	m, mark, found, err := openLogMark(dataDir, g.logger)
	if err != nil {
		if errors.Is(err, errLogMarkDamaged) {
			return nil, damagedLogError(dataDir, err.Error()+" (if the log is known to be whole, removing this file lets the node start)")
		}
		return nil, err
	}
	last, err := g.LastIndex()
	if err != nil {
		m.close()
		return nil, fmt.Errorf("cluster: reading raft log %s: %w", g.path, err)
	}
	if snap := latestSnapshotIndex(snapshots()); found && max(last, snap) < mark {
		m.close()
		return nil, damagedLogError(dataDir, fmt.Sprintf("the raft log %s ends at index %d and the latest snapshot at index %d, but this node had stored entries up to index %d (recorded in %s)",
			g.path, last, snap, mark, m.path))
	}
	g.mark, g.snapshots = m, snapshots
	m.start()
	return tidySnapshots{SnapshotStore: snaps, dir: snapDir, logger: g.logger}, nil
}

// latestSnapshotIndex is the index of the newest of snapshots (as raft's
// snapshot store lists them); 0 if there is none.
func latestSnapshotIndex(snapshots []*raft.SnapshotMeta) uint64 {
	if len(snapshots) == 0 {
		return 0
	}
	return snapshots[0].Index
}

// tidySnapshots removes the temporary directory of a snapshot that failed:
// raft's FileSnapshotStore leaves it when Create or Close fails (a full disk
// leaves one per attempt).
type tidySnapshots struct {
	raft.SnapshotStore
	dir    string
	logger hclog.Logger
}

func (s tidySnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		// raft names it term-index-milliseconds.tmp.
		removeTempSnapshots(s.dir, fmt.Sprintf("%d-%d-", term, index), s.logger)
		return nil, err
	}
	return tidySink{SnapshotSink: sink, dir: filepath.Join(s.dir, sink.ID()+".tmp"), logger: s.logger}, nil
}

type tidySink struct {
	raft.SnapshotSink
	dir    string
	logger hclog.Logger
}

func (s tidySink) Close() error {
	err := s.SnapshotSink.Close()
	if err != nil {
		if rmErr := os.RemoveAll(s.dir); rmErr != nil {
			s.logger.Warn("cannot remove the directory of a failed snapshot", "path", s.dir, "error", rmErr, "what_to_do", "remove it by hand")
		}
	}
	return err
}

// removeTempSnapshots removes the *.tmp directories in dir whose name starts
// with prefix.
func removeTempSnapshots(dir, prefix string, logger hclog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasSuffix(e.Name(), ".tmp") && strings.HasPrefix(e.Name(), prefix) {
			path := filepath.Join(dir, e.Name())
			if err := os.RemoveAll(path); err != nil {
				logger.Warn("cannot remove the directory of a failed snapshot", "path", path, "error", err, "what_to_do", "remove it by hand")
			}
		}
	}
}
