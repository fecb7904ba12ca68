package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft-wal/types"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/internal/diskfault"
	"github.com/raftlock/raftlock/internal/faultnet"
	"github.com/raftlock/raftlock/lock"
)

// memCluster is a cluster of *cluster.Node in this process whose transports
// share one fault table, so a nemesis can cut or delay the traffic between
// chosen nodes: partitions that one loopback interface cannot make.
type memCluster struct {
	t        testing.TB
	faults   *faultnet.Faults
	setup    memSetup
	nodes    []*memNode
	restores atomic.Uint64 // snapshots restored by nodes since stopped
	undone   atomic.Uint64 // unsynced WAL writes undone by power losses
	// lossArmed, when not nil, is closed by the first leader's sync of an
	// unsynced write after powerLossAll armed it, once the power is gone.
	lossArmed atomic.Pointer[chan struct{}]
	// syncHold, when not nil, holds one node's syncs of writes not yet
	// durable (holdSyncs).
	syncHold atomic.Pointer[syncHold]
}

// syncHold holds the syncs of node's disk until release is closed.
type syncHold struct {
	node    *memNode
	once    sync.Once
	held    chan struct{} // closed when the first sync is held
	release chan struct{}
}

// holdSyncs makes every sync of n's disk that would make a write durable
// wait, from now until release is called; held is closed once one waits.
// The cluster must have been started with memSetup.powerLoss.
func (c *memCluster) holdSyncs(n *memNode) (held <-chan struct{}, release func()) {
	h := &syncHold{node: n, held: make(chan struct{}), release: make(chan struct{})}
	c.syncHold.Store(h)
	var once sync.Once
	return h.held, func() {
		once.Do(func() {
			c.syncHold.CompareAndSwap(h, nil)
			close(h.release)
		})
	}
}

// memNode is one node, running or not; its address and data directory stay
// the same across restarts.
type memNode struct {
	c    *memCluster
	idx  int
	cfg  cluster.Config
	logs *logRing

	mu    sync.Mutex // protects node, state and disk
	node  *cluster.Node
	state nodeState
	// disk is the WAL's file system of the node's current life when the
	// cluster's nodes can lose power (memSetup.powerLoss); nil otherwise.
	disk *diskfault.PowerLoss
}

// memSetup is what differs between the nodes of the scenarios' clusters.
type memSetup struct {
	// parallel[i] turns cluster.Config.LeaderWritesInParallel on for node
	// i (missing: off).
	parallel []bool
	// powerLoss puts every node's WAL segment files on a disk that can
	// lose power (powerLossAll), a new one at each start.
	powerLoss bool
}

// parallelFromSeed turns LeaderWritesInParallel on for each of n nodes or
// not, from the seed: the partition scenarios run with the switch on, off
// and mixed (as during a rolling change of it) across seeds, at no cost in
// time.
func parallelFromSeed(s settings, n int) []bool {
	rng := s.rng(6000)
	on := make([]bool, n)
	for i := range on {
		on[i] = rng.IntN(2) == 0
	}
	return on
}

// allParallel turns LeaderWritesInParallel on for all n nodes.
func allParallel(n int) []bool {
	on := make([]bool, n)
	for i := range on {
		on[i] = true
	}
	return on
}

// parallelNote says which nodes write in parallel, for a report's note.
func (c *memCluster) parallelNote() string {
	var on []string
	for _, n := range c.nodes {
		if n.cfg.LeaderWritesInParallel {
			on = append(on, n.cfg.NodeID)
		}
	}
	if len(on) == 0 {
		return "LeaderWritesInParallel off"
	}
	return "LeaderWritesInParallel on for " + strings.Join(on, ",")
}

// In-process raft timings: shorter than the agents' defaults, so that a
// short run sees many elections, and long enough for a race-enabled test
// binary running five nodes on two cores to keep a leader.
const (
	memHeartbeat = 300 * time.Millisecond
	memElection  = 300 * time.Millisecond
	// memSyncDelay is how long a sync of a WAL takes on the first node's
	// disk that can lose power, a few milliseconds as on an SSD; each next
	// node's disk is slower by as much again: a leader whose own sync
	// lags behind a follower's write and sync is what a lost unsynced
	// write can catch out.
	memSyncDelay = 2 * time.Millisecond
)

// startMemCluster starts n nodes that bootstrap one cluster together, all
// voters, and waits until it commits.
func startMemCluster(t testing.TB, n int) *memCluster {
	t.Helper()
	return startMemClusterSetup(t, n, memSetup{})
}

// startMemClusterSetup is startMemCluster with the nodes set up as setup
// says.
func startMemClusterSetup(t testing.TB, n int, setup memSetup) *memCluster {
	t.Helper()
	dir := t.TempDir()
	// Every node's port is bound here and held until the node starts, so
	// that Peers can name it and no other test takes it meanwhile.
	var lns []net.Listener
	var peers []cluster.Peer
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { ln.Close() }) // never handed over; else closed twice, harmlessly
		lns = append(lns, ln)
		peers = append(peers, cluster.Peer{ID: fmt.Sprintf("m%d", i+1), Addr: ln.Addr().String()})
	}
	c := &memCluster{t: t, faults: faultnet.NewFaults(), setup: setup}
	for i := range n {
		logs := newLogRing(1 << 20)
		cfg := cluster.DefaultConfig()
		cfg.NodeID = peers[i].ID
		cfg.DataDir = filepath.Join(dir, cfg.NodeID)
		cfg.BindAddr = peers[i].Addr
		cfg.Bootstrap, cfg.Peers = true, peers
		cfg.Voters = n
		cfg.HeartbeatTimeout, cfg.ElectionTimeout = memHeartbeat, memElection
		cfg.LeaderLeaseTimeout = memHeartbeat / 2
		cfg.CommitTimeout = 5 * time.Millisecond
		cfg.RequestTimeout = 5 * time.Second
		// Snapshots every few dozen entries and a short log tail, so that a
		// node back from a partition or a crash is often sent a snapshot
		// rather than the entries it missed: restores happen under load.
		cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 64, 500*time.Millisecond, 64
		cfg.WALSegmentSize = 16 << 10 // compaction drops whole segments: lagging members get snapshots
		cfg.LeaderWritesInParallel = i < len(setup.parallel) && setup.parallel[i]
		ep := c.faults.Endpoint()
		cfg.TransportDial, cfg.TransportListen = ep.Dial, heldListen(lns[i], ep)
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.NodeID, Output: logs, Level: hclog.Warn})
		c.nodes = append(c.nodes, &memNode{c: c, idx: i, cfg: cfg, logs: logs, state: nodeDown})
	}
	t.Cleanup(func() {
		c.faults.HealAll()
		var wg sync.WaitGroup
		for _, node := range c.nodes {
			wg.Add(1)
			go func() { defer wg.Done(); node.stop() }()
		}
		wg.Wait()
		if t.Failed() {
			for _, node := range c.nodes {
				t.Logf("node %s (%s) logs, last part:\n%s", node.cfg.NodeID, node.cfg.BindAddr, lastLines(node.logs.String(), 200))
			}
		}
	})
	for _, node := range c.nodes {
		require.NoError(t, node.start())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.waitReady(ctx), "the cluster elects a leader")
	return c
}

// heldListen is a TransportListen through ep that hands ln, bound before
// the node starts, to its first start, and binds the address anew at later
// ones (a restart at the same address: another test could take the port in
// the moment after the stop, which nothing here can avoid; start retries
// for a while).
func heldListen(ln net.Listener, ep *faultnet.Endpoint) func(network, addr string) (net.Listener, error) {
	var held atomic.Pointer[net.Listener]
	held.Store(&ln)
	return func(network, addr string) (net.Listener, error) {
		if l := held.Swap(nil); l != nil {
			return ep.Adopt(*l), nil
		}
		return ep.Listen(network, addr)
	}
}

// start starts (or restarts) the node on its data directory. After a
// graceful leave it joins the others again.
func (n *memNode) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.node != nil {
		return nil
	}
	cfg := n.cfg
	if n.state == nodeLeft {
		cfg.Bootstrap, cfg.Peers = false, nil
		for _, o := range n.c.nodes {
			if o != n {
				cfg.Join = append(cfg.Join, o.cfg.BindAddr)
			}
		}
	}
	if n.c.setup.powerLoss {
		// A new disk for each life: the last one lost its power for good.
		disk := &diskfault.PowerLoss{FailAfter: true, SyncDelay: time.Duration(n.idx+1) * memSyncDelay}
		disk.BeforeSync = func() {
			if h := n.c.syncHold.Load(); h != nil && h.node == n {
				h.once.Do(func() { close(h.held) })
				<-h.release
				return
			}
			if n.c.lossArmed.Load() == nil {
				return // not now; and start holds n.mu while the node opens its WAL
			}
			if node := n.current(); node != nil && node.IsLeader() {
				n.c.loseArmed()
			}
		}
		remove := diskfault.Install(cfg.DataDir, func(v types.VFS) types.VFS { disk.VFS = v; return disk })
		n.c.t.Cleanup(remove)
		n.disk = disk
	}
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		var node *cluster.Node
		if node, err = cluster.New(cfg); err == nil {
			n.node, n.state = node, nodeUp
			return nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(250 * time.Millisecond) // the port is held by a connection in flight; it goes soon
	}
	return fmt.Errorf("starting %s: %w", cfg.NodeID, err)
}

// stop closes the node without leaving: to the others it has crashed.
func (n *memNode) stop() {
	n.mu.Lock()
	node := n.node
	n.node = nil
	if n.state != nodeLeft {
		n.state = nodeDown
	}
	n.mu.Unlock()
	if node != nil {
		n.c.restores.Add(node.Stats().Restores)
		node.Close()
	}
}

// leave takes the node out of the cluster gracefully (cluster.Node.Leave),
// asking again, as an operator would, while Leave fails saying the node is
// or may still be a member (no leader for a while: an election on a loaded
// host). A Leave that fails and leaves the node running outside its own
// configuration (an orphan: it serves nothing, nothing adds it back), and
// one that succeeds while the cluster keeps the node in its configuration,
// are errors.
func (n *memNode) leave(ctx context.Context) error {
	n.mu.Lock()
	node := n.node
	n.mu.Unlock()
	if node == nil {
		return errors.New("node is down")
	}
	restores := node.Stats().Restores
	for {
		err := node.Leave(ctx)
		if err == nil {
			break
		}
		if n.orphaned(node) {
			return fmt.Errorf("leave failed and left the node running outside the configuration, its own and the leader's: %w", err)
		}
		if !leaveRetryable(err) || ctx.Err() != nil {
			return err
		}
		fmt.Fprintf(n.logs, "--- harness: leave failed, asking again: %v\n", err)
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	n.c.restores.Add(restores)
	n.mu.Lock()
	n.node, n.state = nil, nodeLeft
	n.mu.Unlock()
	return pollUntil(ctx, 20*time.Millisecond, "left, but the leader's configuration keeps the node", func(context.Context) error {
		servers, leader, err := n.c.leaderServers()
		if err != nil {
			return err
		}
		if _, ok := servers[n.cfg.NodeID]; ok {
			return fmt.Errorf("leader %s: %v", leader, servers)
		}
		return nil
	})
}

// orphaned reports whether node, open, is in neither its own configuration
// nor the leader's. (One that is only in the leader's has yet to receive
// the entry that added it.)
func (n *memNode) orphaned(node *cluster.Node) bool {
	own, err := node.Servers()
	if err != nil || own[n.cfg.NodeID] != "" {
		return false
	}
	servers, _, err := n.c.leaderServers()
	return err == nil && servers[n.cfg.NodeID] == ""
}

// leaderServers returns the configuration of the running node that leads,
// and its ID.
func (c *memCluster) leaderServers() (map[string]string, string, error) {
	l := c.leader()
	var node *cluster.Node
	if l != nil {
		node = l.current()
	}
	if node == nil {
		return nil, "", errors.New("no leader")
	}
	servers, err := node.Servers()
	return servers, l.cfg.NodeID, err
}

// leaveRetryable reports whether a failed leave is worth asking again: it
// says the node is, or may still be, a member (cluster.Node.Leave), or
// that no leader could be reached.
func leaveRetryable(err error) bool {
	return errors.Is(err, lock.ErrUnavailable) || strings.Contains(err.Error(), "still a member")
}

func (n *memNode) current() *cluster.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.node
}

func (n *memNode) addr() string { return n.cfg.BindAddr }

// size and store make a memCluster a storeSet.
func (c *memCluster) size() int { return len(c.nodes) }

func (c *memCluster) store(i int) lock.Store {
	if node := c.nodes[i].current(); node != nil {
		return node
	}
	return nil
}

// leader returns the running node that leads, or nil.
func (c *memCluster) leader() *memNode {
	for _, n := range c.nodes {
		if node := n.current(); node != nil && node.IsLeader() {
			return n
		}
	}
	return nil
}

// waitReady waits until every running node knows the same running leader
// and a write commits.
func (c *memCluster) waitReady(ctx context.Context) error {
	return pollUntil(ctx, 20*time.Millisecond, "cluster not ready", c.ready)
}

func (c *memCluster) ready(ctx context.Context) error {
	l := c.leader()
	if l == nil {
		return errors.New("no leader")
	}
	for _, n := range c.nodes {
		node := n.current()
		if node == nil {
			continue
		}
		if _, addr := node.Leader(); addr != l.addr() {
			return fmt.Errorf("%s thinks the leader is %q, not %s", n.cfg.NodeID, addr, l.addr())
		}
	}
	return probeWrite(ctx, l.current())
}

// cut makes the bytes of every node in from unable to reach every node in to.
func (c *memCluster) cut(from, to []*memNode) {
	for _, a := range from {
		for _, b := range to {
			if a != b {
				c.faults.Cut(a.addr(), b.addr())
			}
		}
	}
}

// drop makes the bytes of every node in from silently vanish on their way
// to every node in to.
func (c *memCluster) drop(from, to []*memNode) {
	for _, a := range from {
		for _, b := range to {
			if a != b {
				c.faults.Drop(a.addr(), b.addr())
			}
		}
	}
}

// partition splits the nodes into groups that cannot talk to each other;
// the connections between them fail at once.
func (c *memCluster) partition(groups ...[]*memNode) {
	for i, g := range groups {
		for j, h := range groups {
			if i != j {
				c.cut(g, h)
			}
		}
	}
}

// blackhole splits the nodes into groups whose traffic to each other
// vanishes silently: calls between them wait for their timeouts.
func (c *memCluster) blackhole(groups ...[]*memNode) {
	for i, g := range groups {
		for j, h := range groups {
			if i != j {
				c.drop(g, h)
			}
		}
	}
}

func (c *memCluster) heal() { c.faults.HealAll() }

// snapshotRestores counts the snapshots the nodes restored, at start-up or
// sent by a leader, since the cluster started.
func (c *memCluster) snapshotRestores() uint64 {
	total := c.restores.Load()
	for _, n := range c.nodes {
		if node := n.current(); node != nil {
			total += node.Stats().Restores
		}
	}
	return total
}

// others lists the nodes other than n.
func (c *memCluster) others(n *memNode) []*memNode {
	var out []*memNode
	for _, o := range c.nodes {
		if o != n {
			out = append(out, o)
		}
	}
	return out
}

// powerLossAll makes every node lose power at once: every write to their
// WALs not synced is undone, and from that moment no write or sync of
// theirs succeeds (diskfault.PowerLoss.FailAfter) and no message leaves
// any of them (each is cut off from the others); then they stop. The
// power goes at the moment a leader is about to sync a write, the one
// moment when a leader writing in parallel holds an entry that only its
// followers' disks keep (or after a second without such a sync). The
// cluster must have been started with memSetup.powerLoss.
func (c *memCluster) powerLossAll() error {
	fired := make(chan struct{})
	c.lossArmed.Store(&fired)
	select {
	case <-fired:
	case <-time.After(time.Second):
		c.loseArmed()
	}
	for _, n := range c.nodes {
		c.cut([]*memNode{n}, c.others(n))
	}
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.stop() }()
	}
	wg.Wait()
	c.heal()
	return nil
}

// loseArmed makes every running node's disk lose its power, once per
// arming by powerLossAll.
func (c *memCluster) loseArmed() {
	fired := c.lossArmed.Swap(nil)
	if fired == nil {
		return
	}
	defer close(*fired)
	c.losePower()
}

// losePower makes every running node's disk lose its power: what they
// wrote and did not sync is gone, and no later write or sync of theirs
// succeeds.
func (c *memCluster) losePower() {
	for _, n := range c.nodes {
		n.mu.Lock()
		if n.node != nil { // a node down already synced what it wrote when it stopped
			if err := n.disk.LoseUnsynced(); err != nil {
				c.t.Errorf("%s losing power: %v", n.cfg.NodeID, err)
			}
			c.undone.Add(uint64(n.disk.Undone()))
		}
		n.mu.Unlock()
	}
}

// startAll starts every node that is not running.
func (c *memCluster) startAll() error {
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.start())
	}
	return errors.Join(errs...)
}
