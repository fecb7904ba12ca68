package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/internal/membership"
	"github.com/raftlock/raftlock/lock"
)

// patience bounds every wait for a condition in these tests: far longer
// than any election with the timings below, short enough to fail fast.
const patience = 10 * time.Second

// testLogger discards logs unless RAFTLOCK_TEST_LOG is set (raft is chatty,
// and logging through t.Log after a test ends would panic).
func testLogger(name string) hclog.Logger {
	var out io.Writer = io.Discard
	level := hclog.Off
	if os.Getenv("RAFTLOCK_TEST_LOG") != "" {
		out, level = os.Stderr, hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: out, Level: level})
}

// testConfig is a node config with fast raft timings for tests.
func testConfig(t testing.TB, id string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.DataDir = t.TempDir()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.HeartbeatTimeout = 150 * time.Millisecond
	cfg.ElectionTimeout = 150 * time.Millisecond
	cfg.LeaderLeaseTimeout = 100 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.RequestTimeout = 5 * time.Second
	cfg.Logger = testLogger(id)
	return cfg
}

// startNode starts a node and closes it when the test ends.
func startNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	n, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	return n
}

// testCluster is a set of nodes started by one test; configs are kept so a
// node can be restarted on its data dir and address.
type testCluster struct {
	t     testing.TB
	cfgs  []Config
	nodes []*Node // nil while stopped
}

// newCluster bootstraps node 0 and joins the others to it, then waits until
// every node knows the leader.
func newCluster(t testing.TB, size int, tweak func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	for i := range size {
		cfg := testConfig(t, fmt.Sprintf("n%d", i))
		if tweak != nil {
			tweak(&cfg)
		}
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = []string{c.nodes[0].Addr()}
		}
		n := startNode(t, cfg)
		cfg.BindAddr = n.Addr() // a restart comes back on the same address
		c.cfgs = append(c.cfgs, cfg)
		c.nodes = append(c.nodes, n)
		if i == 0 {
			c.waitLeader()
		}
	}
	c.waitLeader()
	return c
}

// waitLeader waits until one running node leads with its term ready and
// every running node knows it, and returns it.
func (c *testCluster) waitLeader() *Node {
	c.t.Helper()
	var leader *Node
	require.Eventually(c.t, func() bool {
		leader = nil
		for _, n := range c.nodes {
			if n != nil && n.leaderReady() {
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range c.nodes {
			if n == nil {
				continue
			}
			if _, addr := n.Leader(); addr != leader.Addr() {
				return false
			}
		}
		return true
	}, patience, 5*time.Millisecond, "no leader")
	return leader
}

func (c *testCluster) leader() *Node { return c.waitLeader() }

// follower returns a running node that does not lead.
func (c *testCluster) follower() *Node {
	c.t.Helper()
	l := c.waitLeader()
	for _, n := range c.nodes {
		if n != nil && n != l {
			return n
		}
	}
	c.t.Fatal("no follower")
	return nil
}

func (c *testCluster) index(n *Node) int {
	for i, m := range c.nodes {
		if m == n {
			return i
		}
	}
	c.t.Fatalf("node %s not in cluster", n.ID())
	return -1
}

// stop closes node i, keeping its data dir.
func (c *testCluster) stop(i int) {
	c.t.Helper()
	require.NoError(c.t, c.nodes[i].Close())
	c.nodes[i] = nil
}

// restart starts node i again on its data dir and address.
func (c *testCluster) restart(i int) *Node {
	c.t.Helper()
	cfg := c.cfgs[i]
	cfg.Bootstrap, cfg.Join = false, nil // existing state: neither is needed
	n := startNode(c.t, cfg)
	c.nodes[i] = n
	return n
}

// leaderReady reports whether this node leads with its log clock running.
func (n *Node) leaderReady() bool {
	t := n.term.Load()
	if t == nil {
		return false
	}
	select {
	case <-t.ready:
		return true
	default:
		return false
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return ctx
}

// acquire takes key for a new owner on s, failing the test on error.
func acquire(t testing.TB, s lock.Store, key string, ttl time.Duration) (lock.Owner, lock.Lease) {
	t.Helper()
	owner := lock.NewOwner()
	lease, err := s.Acquire(testCtx(t), lock.AcquireRequest{Key: key, Owner: owner, TTL: ttl})
	require.NoError(t, err)
	return owner, lease
}

// fakeClock is a Clock whose wall reading can be stepped and whose
// monotonic reading starts at an arbitrary origin (as on another host) but
// runs at the real rate.
type fakeClock struct {
	wallOffset atomic.Int64 // added to the real wall clock
	monoOrigin time.Duration
}

// Now strips Go's monotonic reading, so that subtracting two readings sees
// every step, as it would on a host whose clock was set.
func (c *fakeClock) Now() time.Time {
	return time.Now().Round(0).Add(time.Duration(c.wallOffset.Load()))
}

func (c *fakeClock) Monotonic() time.Duration {
	return c.monoOrigin + processClock.Monotonic()
}

func (c *fakeClock) step(d time.Duration) { c.wallOffset.Add(int64(d)) }

// hooks reaches into n's membership (package membership's TestHooks).
func (n *Node) hooks() membership.TestHooks { return n.membership.TestHooks() }
