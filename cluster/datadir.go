package cluster

import (
	"errors"

	"github.com/raftlock/raftlock/cluster/datadir"
	"github.com/raftlock/raftlock/cluster/internal/membership"
)

// The node's data dir (its lock, identity file, raft log and stable store,
// snapshots) is package datadir's; these are its names that users of this
// package see.

// LogStore names the on-disk format of a node's raft log and stable store
// (its term and vote). Both fsync every write before raft counts it.
type LogStore = datadir.LogStore

const (
	// LogStoreWAL is hashicorp/raft-wal in DataDir/wal: segment files
	// appended with one fdatasync per write. A commit waits for a write on
	// the leader and on a follower in turn, so the write's cost is most of a
	// lock operation's latency; here it is about half of BoltDB's.
	LogStoreWAL = datadir.LogStoreWAL
	// LogStoreBoltDB is hashicorp/raft-boltdb/v2 in DataDir/raft.db: a B+tree
	// that pays two fdatasyncs and page rewrites for every write.
	LogStoreBoltDB = datadir.LogStoreBoltDB
)

var (
	// ErrLogDamaged says the node's raft log lost or corrupted entries it
	// had stored, or files it needs: the node refuses to start. The error
	// names the file and says what to do.
	ErrLogDamaged = datadir.ErrLogDamaged
	// ErrWrongNode: the data dir belongs to another node (its identity file
	// names another NodeID). It also matches ErrInvalidConfig.
	ErrWrongNode = datadir.ErrWrongNode
)

// walTestFiles, when set, lets tests wrap raft-wal's metadata store and
// segment files to make them fail on demand.
var walTestFiles datadir.WALWrapper

// dataDirError is err from package datadir as this package reports it: a
// setting at fault as a *ConfigError, a data dir of another node matching
// ErrInvalidConfig too.
func dataDirError(err error) error {
	if ce, ok := errors.AsType[*datadir.ConfigError](err); ok {
		return configError(ce.Field, ce.Format, ce.Args...)
	}
	if errors.Is(err, datadir.ErrWrongNode) {
		return &membership.IdentityError{Msg: err.Error(), Sentinels: []error{ErrWrongNode, ErrInvalidConfig}}
	}
	return err
}
