package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	autopilot "github.com/hashicorp/raft-autopilot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/internal/membership"
	"github.com/raftlock/raftlock/cluster/nodewire"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// A leader asked directly to add a node of another cluster (as a build
// that does not check on its own side asks) refuses it: the admission
// check runs on the leader, not only on the node that asks.
func TestLeaderRefusesJoinRequestOfAnotherCluster(t *testing.T) {
	var logs lockedBuffer
	z := newCluster(t, 1, func(c *Config) { c.Logger = capturedLogger(c.NodeID, &logs) })
	y := newCluster(t, 1, nil)
	leader, yNode := z.leader(), y.leader()
	yID := readIdentityFile(t, y.cfgs[0].DataDir).ClusterID

	for _, fresh := range []bool{false, true} {
		req := nodewire.Join{ID: "y", Addr: yNode.Addr(), ClusterID: yID, Empty: fresh}
		rep, err := leader.call(testCtx(t), leader.Addr(), nodewire.EncodeRequest(&req), nil)
		require.NoError(t, err)
		err = rep.Err()
		assert.ErrorIs(t, err, ErrWrongCluster, "fresh %v", fresh)
		if err != nil {
			assert.Contains(t, err.Error(), yID)
		}
	}
	assert.Contains(t, logs.String(), "refusing to add a node of another cluster")
	servers, err := leader.Servers()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"n0": leader.Addr()}, servers)
	assert.Equal(t, yID, readIdentityFile(t, y.cfgs[0].DataDir).ClusterID)
}

// The reconciler checks the members gossip shows before adding them: a
// node whose data dir belongs to another cluster is never added, nor one
// that tells no cluster ID; a fresh one is.
func TestReconcilerAddsOnlyAdmissibleMembers(t *testing.T) {
	var logs lockedBuffer
	z := newCluster(t, 1, func(c *Config) { c.Logger = capturedLogger(c.NodeID, &logs) })
	y := newCluster(t, 1, nil)
	old := newCluster(t, 1, nil)
	leader := z.leader()
	yID := readIdentityFile(t, y.cfgs[0].DataDir).ClusterID
	// Gossiping with nobody: it neither bootstraps nor joins, no cluster yet.
	fresh := startNode(t, gossipConfig(t, "fresh", anyGossipAddr, 0, []string{"127.0.0.1:1"}))

	self := membership.MemberView{ID: "n0", Addr: raft.ServerAddress(leader.Addr()), Status: autopilot.NodeAlive}
	shown := []membership.MemberView{
		self,
		{ID: "n0y", Addr: raft.ServerAddress(y.leader().Addr()), Status: autopilot.NodeAlive, ClusterID: yID},
		{ID: "n0old", Addr: raft.ServerAddress(old.leader().Addr()), Status: autopilot.NodeAlive, ClusterUntold: true},
		{ID: "fresh", Addr: raft.ServerAddress(fresh.Addr()), Status: autopilot.NodeAlive},
	}
	src := membership.MemberSource(func() []membership.MemberView { return shown })
	leader.hooks().SetMemberSource(src)
	leader.hooks().ReconcileMembers()

	requireServers(t, leader, "n0", "fresh")
	assert.Contains(t, logs.String(), "refusing to add a node of another cluster")
	assert.Contains(t, logs.String(), yID)
	servers, err := y.leader().Servers()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"n0": y.leader().Addr()}, servers, "y's node is still its own cluster's")
}

// The report, without gossip: a second process started under a live
// member's ID, with an empty data dir and Join, made the leader remove the
// live member and add the newcomer as a voter; in a 2-member cluster that
// cost the quorum. The newcomer is refused, named the live address, and
// the member keeps serving. (Three members: two with these test timings
// lose their leader now and then on a loaded host, which is not the point.)
func TestJoinUnderALiveMembersIDRefused(t *testing.T) {
	var logs lockedBuffer
	c := newCluster(t, 3, func(cfg *Config) { cfg.Logger = capturedLogger(cfg.NodeID, &logs) })
	leader := c.leader()
	real := c.nodes[1]
	before, err := leader.Servers()
	require.NoError(t, err)

	dup := testConfig(t, "n1")
	dup.Join = []string{leader.Addr()}
	dup.RequestTimeout = 3 * time.Second
	n, err := New(dup)
	if n != nil {
		n.Close()
	}
	require.Error(t, err, "a second n1 was added")
	assert.ErrorIs(t, err, ErrJoin)
	assert.Contains(t, err.Error(), "in use by a live member at "+real.Addr())
	assert.Contains(t, logs.String(), "refusing to add a node under the ID of a live member")

	after, err := leader.Servers()
	require.NoError(t, err)
	assert.Equal(t, before, after)
	acquire(t, real, "still-serving", time.Minute)
}

// A copy of a live member's data dir, started at another address, asks (as
// every restart does) to be added back: the leader used to move the
// member's entry to the copy's address. It is refused and the member keeps
// its place.
func TestCopyOfALiveMembersDataDirRefused(t *testing.T) {
	testCopyOfALiveMembersDataDirRefused(t, false)
}

// The same, when the copy asks before the leader has heard from the member
// again: its heartbeats to the member's address failed while the member
// was stopped, and raft tells the leader they answer again only once its
// next heartbeat there succeeds (after a backoff of up to half a heartbeat
// timeout, more on a loaded host). The leader judged the member dead on
// that record and moved its entry to the copy's address; it now asks the
// member's address who answers there before it moves a member.
func TestCopyOfALiveMembersDataDirRefusedBeforeItsHeartbeatsResume(t *testing.T) {
	testCopyOfALiveMembersDataDirRefused(t, true)
}

func testCopyOfALiveMembersDataDirRefused(t *testing.T, staleHeartbeats bool) {
	var logs lockedBuffer
	c := newCluster(t, 3, func(cfg *Config) { cfg.Logger = capturedLogger(cfg.NodeID, &logs) })
	ctx := testCtx(t)
	_, lease := acquire(t, c.leader(), "k", time.Minute)
	f := c.follower()
	i := c.index(f)
	c.stop(i)
	copyDir := t.TempDir()
	require.NoError(t, os.CopyFS(copyDir, os.DirFS(c.cfgs[i].DataDir)))
	real := c.restart(i)
	c.waitLeader()

	if staleHeartbeats {
		c.leader().hooks().FailHeartbeats(raft.ServerID(real.ID()), time.Now().Add(-time.Minute))
	}
	cfg := c.cfgs[i]
	cfg.DataDir, cfg.BindAddr = filepath.Join(copyDir), "127.0.0.1:0"
	cfg.Bootstrap, cfg.Join = false, nil
	dup := startNode(t, cfg)
	refusal := "in use by a live member at " + real.Addr() + "; the node at " + dup.Addr()
	if !assert.Eventually(t, func() bool { return strings.Contains(logs.String(), refusal) }, patience, 10*time.Millisecond, "no refusal logged") {
		servers, err := c.leader().Servers()
		t.Fatalf("the leader's servers: %v, %v (the member is at %s, the copy at %s); the log's lines on %s:\n%s",
			servers, err, real.Addr(), dup.Addr(), real.ID(), linesWith(logs.String(), real.ID()))
	}
	// Refused, the copy is stopped before the checks below: raft knows a
	// voter by its ID, so a copy of a voter's data dir can still win an
	// election under that ID while the cluster lacks a leader (on a loaded
	// host, now and then), and then no node of c leads.
	require.NoError(t, dup.Close())

	servers, err := c.leader().Servers()
	require.NoError(t, err)
	assert.Equal(t, real.Addr(), servers[real.ID()], "the member's entry stays at its address")
	info, err := real.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, lease.Token, info.Token)
}

// A voter stopped and started again on its data dir at another address
// (another port, or a host that got a new IP) is moved there and keeps
// its vote: nothing answers at its old address, so the leader's question
// to it (answersAtConfigAddr) is no obstacle.
func TestMemberRestartedAtANewAddressKeepsItsVote(t *testing.T) {
	c := newCluster(t, 3, nil)
	_, lease := acquire(t, c.leader(), "k", time.Minute)
	i := c.index(c.follower())
	old := c.cfgs[i].BindAddr
	c.stop(i)
	cfg := c.cfgs[i]
	cfg.BindAddr = "127.0.0.1:0"
	moved := startNode(t, cfg)
	require.NotEqual(t, old, moved.Addr())

	require.Eventually(t, func() bool {
		for _, m := range c.leader().Stats().Members {
			if m.ID == moved.ID() {
				return m.Address == moved.Addr() && m.Suffrage == SuffrageVoter
			}
		}
		return false
	}, patience, 10*time.Millisecond, "the member's entry is not moved to %s as a voter", moved.Addr())
	info, err := moved.Inspect(testCtx(t), "k")
	require.NoError(t, err)
	assert.Equal(t, lease.Token, info.Token)
}

// The report, with gossip: the member of a one-node cluster Y, stopped and
// started again on its data dir with RetryJoin pointing at cluster Z, was
// added to Z by Z's reconciler ("alive member not in the raft
// configuration"), which replaced Y's log and its locks, while Y logged
// that it was not joining. Neither side takes the other in: each says so,
// and Y keeps its lock and its cluster.
func TestRetryJoinIntoAnotherClusterDoesNotAbsorb(t *testing.T) {
	var zLogs, yLogs lockedBuffer
	z := twoNodeGossipCluster(t, func(c *Config) { c.Logger = capturedLogger(c.NodeID, &zLogs) })
	zServers, err := z[0].Servers()
	require.NoError(t, err)

	yc := gossipConfig(t, "y", anyGossipAddr, 0, nil)
	yc.Bootstrap = true
	yc.Logger = capturedLogger("y", &yLogs)
	y := startNode(t, yc)
	_, lease := acquire(t, y, "y/precious", 24*time.Hour)
	yID := y.ident.ClusterID()
	yc.BindAddr = y.Addr()
	require.NoError(t, y.Close())

	yc.Bootstrap = false
	yc.RetryJoin = []string{z[0].GossipAddr(), z[1].GossipAddr()}
	y = startNode(t, yc)
	require.Eventually(t, func() bool {
		return strings.Contains(zLogs.String(), "belongs to another raft cluster") && strings.Contains(yLogs.String(), "belongs to another raft cluster")
	}, gossipPatience, 20*time.Millisecond, "a refusal is not logged on both sides; z:\n%s\ny:\n%s", &zLogs, &yLogs)

	info, err := y.Inspect(testCtx(t), "y/precious")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, lease.Token, info.Token)
	assert.Equal(t, identity{NodeID: "y", ClusterID: yID}, readIdentityFile(t, yc.DataDir))
	for _, n := range z {
		servers, err := n.Servers()
		require.NoError(t, err)
		assert.Equal(t, zServers, servers)
		for _, m := range n.hooks().GossipMembers() {
			assert.NotEqual(t, raft.ServerID("y"), m.ID, "%s gossips with y", n.ID())
		}
	}
	assert.NotContains(t, yLogs.String(), "not joining them", "the old, false line")
}

// A voter whose process is gone comes back at a new address with an empty
// data dir: gossip shows it alive there, telling no cluster of its own. It
// lost the voter's log and vote, so the reconciler does not move it in as
// that voter (the node asks to join, saying it is fresh, and the leader
// replaces the entry then). A member back elsewhere on its own data dir,
// which tells the cluster's ID, is moved as before.
func TestReconcilerDoesNotMoveAFreshNodeIntoAVotersPlace(t *testing.T) {
	c := newCluster(t, 3, nil)
	leader := c.leader()
	i := slices.IndexFunc(c.nodes, func(n *Node) bool { return n != leader })
	goneID, oldAddr := c.nodes[i].ID(), c.nodes[i].Addr()
	c.stop(i)
	require.Eventually(t, func() bool {
		for _, m := range leader.hooks().KnownMembers() {
			if string(m.ID) == goneID {
				return m.HeartbeatsFailed
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the leader sees %s failed at its old address", goneID)

	const newAddr = "127.0.0.1:1"
	show := func(clusterID string) {
		var shown []membership.MemberView
		for _, n := range c.nodes {
			if n != nil { // nil: stopped
				shown = append(shown, membership.MemberView{ID: raft.ServerID(n.ID()), Addr: raft.ServerAddress(n.Addr()), Status: autopilot.NodeAlive})
			}
		}
		shown = append(shown, membership.MemberView{ID: raft.ServerID(goneID), Addr: newAddr, Status: autopilot.NodeAlive, ClusterID: clusterID})
		src := membership.MemberSource(func() []membership.MemberView { return shown })
		leader.hooks().SetMemberSource(src)
		leader.hooks().ReconcileMembers()
	}

	show("") // an empty data dir: no cluster yet
	servers, err := leader.Servers()
	require.NoError(t, err)
	assert.Equal(t, oldAddr, servers[goneID], "a fresh node is not moved into the voter's place")

	show(readIdentityFile(t, leader.cfg.DataDir).ClusterID) // its own data dir
	require.Eventually(t, func() bool {
		servers, err := leader.Servers()
		return err == nil && servers[goneID] == newAddr
	}, 10*time.Second, 10*time.Millisecond, "a member back elsewhere on its data dir is moved")
}

// linesWith returns the lines of log that contain s, for a failure message.
func linesWith(log, s string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
