// Package clustertest starts raftlock clusters inside a test, as
// net/http/httptest starts servers: every node listens on 127.0.0.1 with a
// port of its own, keeps its state in the test's temporary directory, uses
// raft timings fast enough for tests, and is closed when the test ends.
//
//	c := clustertest.Start(t, 3, nil)
//	locks := lock.New(c.Follower(t)) // every node is a lock.Store
//
// Use it to test code that takes locks against a real cluster (forwarding,
// hand-offs across nodes, leader changes) rather than a memory store (package lock/memstore).
package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/cluster"
)

// Patience bounds every wait of this package for the cluster to settle.
const Patience = 10 * time.Second

// Config returns a node configuration for tests: NodeID id, a temporary
// DataDir, a free port on 127.0.0.1 and raft timeouts of 150ms, which elect
// a leader within a fraction of a second. It neither bootstraps nor joins.
func Config(t testing.TB, id string) cluster.Config {
	cfg := cluster.DefaultConfig()
	cfg.NodeID = id
	cfg.DataDir = t.TempDir()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.HeartbeatTimeout = 150 * time.Millisecond
	cfg.ElectionTimeout = 150 * time.Millisecond
	cfg.LeaderLeaseTimeout = 100 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.RequestTimeout = 5 * time.Second
	cfg.Logger = hclog.NewNullLogger()
	return cfg
}

// Cluster is a set of nodes started by Start.
type Cluster struct {
	Nodes []*cluster.Node
}

// Start starts size nodes named n0, n1, …: n0 bootstraps and the others join
// it. tweak, when not nil, adjusts each node's Config first. Start returns
// once every node knows the same leader; it fails the test if they do not
// within Patience. The nodes are closed when the test ends.
func Start(t testing.TB, size int, tweak func(*cluster.Config)) *Cluster {
	t.Helper()
	if size < 1 {
		t.Fatalf("clustertest: size must be at least 1, got %d", size)
	}
	c := &Cluster{}
	for i := range size {
		cfg := Config(t, fmt.Sprintf("n%d", i))
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = []string{c.Nodes[0].Addr()}
		}
		if tweak != nil {
			tweak(&cfg)
		}
		n, err := cluster.New(cfg)
		if err != nil {
			t.Fatalf("clustertest: starting %s: %v", cfg.NodeID, err)
		}
		t.Cleanup(func() { n.Close() })
		c.Nodes = append(c.Nodes, n)
		if i == 0 {
			// The others join through n0: it must lead with its term ready.
			ctx, cancel := context.WithTimeout(context.Background(), Patience)
			err := n.Ready(ctx)
			cancel()
			if err != nil {
				t.Fatalf("clustertest: waiting for n0 to elect itself: %v", err)
			}
		}
	}
	c.Leader(t)
	return c
}

// Leader waits until every node knows the same leader and returns it.
func (c *Cluster) Leader(t testing.TB) *cluster.Node {
	t.Helper()
	var leader *cluster.Node
	waitFor(t, "the nodes to agree on a leader", func() bool {
		leader = nil
		_, addr := c.Nodes[0].Leader()
		for _, n := range c.Nodes {
			if _, a := n.Leader(); a == "" || a != addr {
				return false
			}
			if n.Addr() == addr && n.IsLeader() {
				leader = n
			}
		}
		return leader != nil
	})
	return leader
}

// Follower returns a node that does not lead (after waiting for a leader).
func (c *Cluster) Follower(t testing.TB) *cluster.Node {
	t.Helper()
	leader := c.Leader(t)
	for _, n := range c.Nodes {
		if n != leader {
			return n
		}
	}
	t.Fatalf("clustertest: a cluster of %d has no follower", len(c.Nodes))
	return nil
}

// waitFor polls cond until it holds, failing the test after Patience.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("clustertest: gave up after %v waiting for %s", Patience, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
