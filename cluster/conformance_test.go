package cluster

import (
	"testing"
	"time"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/locktest"
)

// Leases the suite lets run out go through raft (and, for a follower, the
// forwarding RPC) on a machine that runs other packages' tests at the same
// time: 500ms leaves room for a slow fsync without slowing the suite much.
var conformance = locktest.Options{ShortTTL: 500 * time.Millisecond}

// The suite keeps every subtest's keys apart, so one node serves them all.
func TestStoreConformanceSingleNode(t *testing.T) {
	n := newCluster(t, 1, nil).nodes[0]
	locktest.TestStoreWith(t, func(*testing.T) lock.Store { return n }, conformance)
}

// Through a follower every command is forwarded to the leader, every read
// too, and waiters are woken by the follower's own state machine.
func TestStoreConformanceThroughFollower(t *testing.T) {
	f := newCluster(t, 3, nil).follower()
	locktest.TestStoreWith(t, func(*testing.T) lock.Store { return f }, conformance)
}
