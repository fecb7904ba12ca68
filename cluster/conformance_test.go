package cluster

import (
	"testing"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/locktest"
)

// The suite keeps every subtest's keys apart, so one node serves them all.
func TestStoreConformanceSingleNode(t *testing.T) {
	n := newCluster(t, 1, nil).nodes[0]
	locktest.TestStore(t, func(*testing.T) lock.Store { return n })
}

// Through a follower every command is forwarded to the leader, every read
// too, and waiters are woken by the follower's own state machine.
func TestStoreConformanceThroughFollower(t *testing.T) {
	f := newCluster(t, 3, nil).follower()
	locktest.TestStore(t, func(*testing.T) lock.Store { return f })
}
