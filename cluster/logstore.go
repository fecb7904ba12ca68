package cluster

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
)

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

const (
	walDirName     = "wal"
	boltDBFileName = "raft.db"
)

// openLogStore opens the log store in dir. An empty kind means the format
// the directory already holds, or LogStoreWAL for a fresh directory. A kind
// that disagrees with what the directory holds is refused: opening the other
// format would find an empty log, and a node with an empty log would take a
// snapshot's or a leader's word for everything it had promised.
func openLogStore(dir string, kind LogStore, walSegmentSize int, logger hclog.Logger) (*guardedStore, LogStore, error) {
	hasWAL, err := nonEmptyDir(filepath.Join(dir, walDirName))
	if err != nil {
		return nil, "", err
	}
	hasBolt, err := fileExists(filepath.Join(dir, boltDBFileName))
	if err != nil {
		return nil, "", err
	}
	var found LogStore
	switch {
	case hasWAL && hasBolt:
		return nil, "", fmt.Errorf("%w: data dir %s holds both a wal log (%s/) and a boltdb log (%s); remove the one that is not in use",
			ErrInvalidConfig, dir, walDirName, boltDBFileName)
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
		return nil, "", fmt.Errorf("%w: LogStore is %q but data dir %s holds a %s log: a %s log there would start empty; leave LogStore unset to use what the directory holds",
			ErrInvalidConfig, kind, dir, found, kind)
	}

	switch kind {
	case LogStoreWAL:
		path := filepath.Join(dir, walDirName)
		if err := os.MkdirAll(path, 0o700); err != nil {
			return nil, "", fmt.Errorf("cluster: %w", err)
		}
		// A size of 0 leaves raft-wal's default.
		store, err := wal.Open(path, wal.WithLogger(logger.Named("wal")), wal.WithSegmentSize(walSegmentSize),
			wal.WithSegmentFiler(privateSegmentFiler(path)))
		if err != nil {
			return nil, "", fmt.Errorf("cluster: opening raft log %s: %w", path, err)
		}
		return &guardedStore{store: store}, kind, nil
	case LogStoreBoltDB:
		path := filepath.Join(dir, boltDBFileName)
		// NoSync stays false: a lock granted is a lock on disk.
		store, err := raftboltdb.New(raftboltdb.Options{Path: path})
		if err != nil {
			return nil, "", fmt.Errorf("cluster: opening raft log %s: %w", path, err)
		}
		return &guardedStore{store: store}, kind, nil
	}
	return nil, "", fmt.Errorf("%w: unknown LogStore %q (want %q or %q)", ErrInvalidConfig, kind, LogStoreWAL, LogStoreBoltDB)
}

// guardedStore lets Close wait for calls in progress, and ends any call that
// comes after it. raft's transport answers heartbeats on its own goroutines,
// outside raft's main loop, so Raft.Shutdown does not wait for them: one
// that passed raft's shutdown check can still persist a new term after the
// node has shut raft down. raft panics when that write fails, which would
// take the embedding application down on an ordinary Close. Such a late
// call gets no answer instead: its goroutine ends (runtime.Goexit runs its
// deferred calls, so the connection it serves is closed), and the peer
// counts an unanswered RPC as it would for a stopped node.
type guardedStore struct {
	mu     sync.RWMutex // held for reading by every call, for writing by Close
	closed bool
	store  logStore
}

// enter is called first by every method; the caller must call mu.RUnlock.
func (g *guardedStore) enter() {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		runtime.Goexit()
	}
}

func (g *guardedStore) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	return g.store.Close()
}

// IsMonotonic tells raft whether the log refuses gaps between indexes
// (raft-wal does), so that restoring a snapshot resets the log rather than
// leaving a gap.
func (g *guardedStore) IsMonotonic() bool {
	m, ok := g.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (g *guardedStore) FirstIndex() (uint64, error) {
	g.enter()
	defer g.mu.RUnlock()
	return g.store.FirstIndex()
}

func (g *guardedStore) LastIndex() (uint64, error) {
	g.enter()
	defer g.mu.RUnlock()
	return g.store.LastIndex()
}

func (g *guardedStore) GetLog(index uint64, log *raft.Log) error {
	g.enter()
	defer g.mu.RUnlock()
	return g.store.GetLog(index, log)
}

func (g *guardedStore) StoreLog(log *raft.Log) error {
	g.enter()
	defer g.mu.RUnlock()
	return g.store.StoreLog(log)
}

func (g *guardedStore) StoreLogs(logs []*raft.Log) error {
	g.enter()
	defer g.mu.RUnlock()
	return g.store.StoreLogs(logs)
}

func (g *guardedStore) DeleteRange(min, max uint64) error {
	g.enter()
	defer g.mu.RUnlock()
	return g.store.DeleteRange(min, max)
}

func (g *guardedStore) Set(key, val []byte) error {
	g.enter()
	defer g.mu.RUnlock()
	return g.store.Set(key, val)
}

func (g *guardedStore) Get(key []byte) ([]byte, error) {
	g.enter()
	defer g.mu.RUnlock()
	return g.store.Get(key)
}

func (g *guardedStore) SetUint64(key []byte, val uint64) error {
	g.enter()
	defer g.mu.RUnlock()
	return g.store.SetUint64(key, val)
}

func (g *guardedStore) GetUint64(key []byte) (uint64, error) {
	g.enter()
	defer g.mu.RUnlock()
	return g.store.GetUint64(key)
}

func nonEmptyDir(path string) (bool, error) {
	entries, err := os.ReadDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cluster: %w", err)
	}
	return len(entries) > 0, nil
}

func fileExists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cluster: %w", err)
	}
	return true, nil
}
