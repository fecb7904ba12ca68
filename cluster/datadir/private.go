package datadir

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
)

// The data dir holds every owner token (the proof of ownership) in the log
// and the snapshots, so everything the node writes there is private to the
// user it runs as, whatever the parent directory's mode or the umask. The
// libraries that write most of it do not ask: raft's file snapshot store
// creates its directories 0755 and files 0666 (less the umask), raft-wal its
// segments and wal-meta.db 0644. So at start the node removes group and
// other permissions from the data dir and what it keeps there (an older
// version's files, or directories someone created before; files it does
// not know are left alone), and from each file these libraries create later
// as soon as they create it: a snapshot's directory and files before
// anything is written into them, a new WAL segment before it is used. The
// process umask is left alone: the node is embedded in other programs.
//
// These are the modes of what the node creates in the data dir.
const (
	PrivateDirMode  fs.FileMode = 0o700
	PrivateFileMode fs.FileMode = 0o600
)

// makePrivate removes group and other permissions from root and everything
// under it (0755 becomes 0700, 0644 becomes 0600). Symbolic links are not
// followed. Entries that vanish meanwhile (a snapshot reaped) are skipped.
func makePrivate(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path != root {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cluster: making %s private: %w", path, err)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cluster: making %s private: %w", path, err)
		}
		perm := info.Mode().Perm()
		if perm&0o077 == 0 {
			return nil
		}
		if err := os.Chmod(path, perm&^0o077); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cluster: making %s private: %w", path, err)
		}
		return nil
	})
}

// dataDirEntries names what the node keeps in DataDir: MakePrivate
// makes these private, and nothing else a mistaken DataDir (a home
// directory, say) may hold. A new file in DataDir belongs here too.
var dataDirEntries = []string{
	"LOCK", // dirlock_unix.go
	IdentityFileName,
	logMarkFileName,
	WALDirName,
	BoltDBFileName,
	"snapshots", // raft's FileSnapshotStore
	GossipDirName,
}

// GossipDirName is the directory in DataDir of serf's snapshot of the
// gossip members (package cluster's gossip.go).
const GossipDirName = "gossip"

// MakePrivate makes dir and what the node keeps in it
// (dataDirEntries, whole trees) private; see PrivateDirMode. A data dir the
// node may not chmod (owned by another user, with write access granted to
// this one) is only warned about: what the node writes in it is private
// all the same.
func MakePrivate(dir string, logger hclog.Logger) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cluster: data dir: %w", err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(dir, perm&^0o077); err != nil {
			logger.Warn("data dir is readable by other users and cannot be made private; the files this node writes in it are private all the same",
				"dir", dir, "mode", perm.String(), "error", err, "what_to_do", "chmod 700 the data dir as its owner")
		}
	}
	for _, name := range dataDirEntries {
		path := filepath.Join(dir, name)
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := makePrivate(path); err != nil {
			return err
		}
	}
	return nil
}

// OpenSnapshotStore opens raft's file snapshot store in dir/snapshots,
// wrapped so that every snapshot it writes is private.
func OpenSnapshotStore(dir string, retain int, logger hclog.Logger) (*privateSnapshots, error) {
	path := filepath.Join(dir, "snapshots") // raft's name for it
	if err := os.Mkdir(path, PrivateDirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("cluster: opening snapshot store: %w", err)
	}
	if err := makePrivate(path); err != nil {
		return nil, err
	}
	store, err := raft.NewFileSnapshotStoreWithLogger(dir, retain, logger)
	if err != nil {
		return nil, fmt.Errorf("cluster: opening snapshot store: %w", err)
	}
	return &privateSnapshots{FileSnapshotStore: store, path: path, logger: logger}, nil
}

// privateSnapshots is raft's file snapshot store, whose Create makes the new
// snapshot's directory 0700 and its files 0600 before raft writes the state
// into them (the directory around them is private already).
type privateSnapshots struct {
	*raft.FileSnapshotStore
	path   string // the store's directory
	logger hclog.Logger
}

func (s *privateSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	// The store names the new directory itself; a walk of the (small)
	// store finds it whatever its name.
	if err := makePrivate(s.path); err != nil {
		sink.Cancel()
		return nil, err
	}
	return &summingSink{SnapshotSink: sink, store: s.path, logger: s.logger, sum: crc32.New(crc32.MakeTable(crc32.Castagnoli))}, nil
}

// privateVFS is raft-wal's file system, whose new segment files are 0600
// here (raft-wal creates them 0644).
type privateVFS struct{ *walfs.FS }

func (v privateVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(dir, name), PrivateFileMode); err != nil {
		// Remove it, so that raft-wal's next attempt can create it again.
		f.Close()
		os.Remove(filepath.Join(dir, name))
		return nil, fmt.Errorf("cluster: making %s private: %w", filepath.Join(dir, name), err)
	}
	return f, nil
}

// syncDir fsyncs a directory, so that a file renamed into it stays there
// after a crash.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // a directory cannot be opened for fsync there; renames are durable
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
