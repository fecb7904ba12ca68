package cluster

import "github.com/raftlock/raftlock/cluster/datadir"

// What these tests read and write in a data dir, named by package datadir.
type identity = datadir.Identity

var writeIdentity = datadir.WriteIdentity

const (
	identityFileName = datadir.IdentityFileName
	walDirName       = datadir.WALDirName
	walMetaFileName  = datadir.WALMetaFileName
	boltDBFileName   = datadir.BoltDBFileName
	gossipDirName    = datadir.GossipDirName
)

// Frame types and sizes of raft-wal's segment format (segment/format.go),
// for tests that damage a segment the way a disk would.
const (
	walFrameInvalid = 0
	walFrameEntry   = 1
	walFrameCommit  = 3

	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
)
