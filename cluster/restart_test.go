package cluster

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
)

// Restarts with the same Config: whichever way a member was first started,
// and even after it left, it comes back as the same member.

// README's first node: Bootstrap, no Join. After leaving (what SIGTERM did
// by default) and starting again with the same Config, it used to wait
// forever for a leader that no longer counted it as a member.
func TestBootstrapNodeComesBackAfterLeaving(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	_, lease := acquire(t, c.leader(), "k", time.Hour)

	first := c.nodes[0]
	require.True(t, c.cfgs[0].Bootstrap)
	require.Empty(t, c.cfgs[0].Join)
	require.NoError(t, first.Leave(ctx))
	c.nodes[0] = nil
	requireServers(t, c.leader(), c.cfgs[1].NodeID, c.cfgs[2].NodeID)

	back := startNode(t, c.cfgs[0])
	c.nodes[0] = back
	requireAllVoters(t, c, "n0", "n1", "n2")
	requireHeld(t, back, "k", lease.Token)
}

// Three nodes bootstrapped together with Peers, every one leaving in turn
// (SIGINT to all of them, under the old default), then all started again
// with the same Configs: the last to leave used to lead alone, with the two
// others orphaned.
func TestPeersClusterComesBackWholeAfterEveryMemberLeft(t *testing.T) {
	c := newPeersCluster(t, 3)
	ctx := testCtx(t)
	_, lease := acquire(t, c.leader(), "k", time.Hour)

	for i, n := range c.nodes {
		require.NoError(t, n.Leave(ctx), "node %s leaves", n.ID())
		c.nodes[i] = nil
	}
	for i, cfg := range c.cfgs {
		c.nodes[i] = startNode(t, cfg)
	}
	requireAllVoters(t, c, "p0", "p1", "p2")
	for _, n := range c.nodes {
		requireHeld(t, n, "k", lease.Token)
	}
	_, next := acquire(t, c.nodes[0], "other", time.Minute)
	assert.Greater(t, next.Token, lease.Token, "tokens keep rising across the restart")
}

// The same with a plain stop (Close, what SIGTERM does now): nothing to
// heal, and nothing may shrink.
func TestPeersClusterComesBackWholeAfterStopAll(t *testing.T) {
	c := newPeersCluster(t, 3)
	_, lease := acquire(t, c.leader(), "k", time.Hour)
	for i := range c.nodes {
		c.stop(i)
	}
	for i, cfg := range c.cfgs {
		c.nodes[i] = startNode(t, cfg)
	}
	requireAllVoters(t, c, "p0", "p1", "p2")
	requireHeld(t, c.leader(), "k", lease.Token)
}

// With no leader, Leave cannot be granted: it fails after a few election
// timeouts with lock.ErrUnavailable instead of waiting out the request
// timeout, and the node stays open and a member.
func TestLeaveWithoutLeaderFailsFast(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.RequestTimeout = time.Minute })
	ctx := testCtx(t)
	c.stop(1)
	c.stop(2)
	alone := c.nodes[0]
	require.Eventually(t, func() bool { id, _ := alone.Leader(); return id == "" }, patience, 5*time.Millisecond)

	start := time.Now()
	err := alone.Leave(ctx)
	require.ErrorIs(t, err, lock.ErrUnavailable)
	assert.NoError(t, ctx.Err(), "Leave failed by itself, before the caller's context ended")
	assert.Less(t, time.Since(start), c.cfgs[0].RequestTimeout/2, "Leave did not wait out the request timeout")
	assert.False(t, alone.closed(), "a failed Leave leaves the node open")
	servers, err := alone.Servers()
	require.NoError(t, err)
	assert.Contains(t, servers, alone.ID())
}

// newPeersCluster starts size nodes that bootstrap together with Peers on
// fixed addresses, and waits for a leader.
func newPeersCluster(t *testing.T, size int) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	var peers []Peer
	for i := range size {
		cfg := testConfig(t, "p"+string(rune('0'+i)))
		holdBindAddr(t, &cfg)
		cfg.Bootstrap = true
		c.cfgs = append(c.cfgs, cfg)
		peers = append(peers, Peer{ID: cfg.NodeID, Addr: cfg.BindAddr})
	}
	for i := range c.cfgs {
		c.cfgs[i].Peers = peers
		c.nodes = append(c.nodes, startNode(t, c.cfgs[i]))
	}
	c.waitLeader()
	return c
}

// holdBindAddr binds a 127.0.0.1 port for cfg's node now, sets BindAddr to
// it and hands the listener to the node's first start (TransportListen), so
// that other nodes' Peers can name the address before the node starts
// without another test (tests and packages run in parallel) taking the port
// meanwhile. A later start on cfg (a restart at the same address) binds it
// anew: another test could take it in the moment after Close, which nothing
// here can avoid.
func holdBindAddr(t testing.TB, cfg *Config) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() }) // never handed over; else closed twice, harmlessly
	var held atomic.Pointer[net.Listener]
	held.Store(&ln)
	listen := cfg.TransportListen
	if listen == nil {
		listen = net.Listen
	}
	cfg.BindAddr = ln.Addr().String()
	cfg.TransportListen = func(network, addr string) (net.Listener, error) {
		if l := held.Swap(nil); l != nil {
			return *l, nil
		}
		return listen(network, addr)
	}
}

// requireAllVoters waits until the leader's configuration is exactly ids, all
// voters, and every running node knows that leader.
func requireAllVoters(t *testing.T, c *testCluster, ids ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var leader *Node
		for _, n := range c.nodes {
			if n != nil && n.leaderReady() {
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		members := leader.Stats().Members
		if len(members) != len(ids) {
			return false
		}
		for i, m := range members {
			if m.ID != ids[i] || m.Suffrage != SuffrageVoter {
				return false
			}
		}
		return true
	}, 2*patience, 10*time.Millisecond, "voters %v", ids)
}

// requireHeld waits until n answers that key is held with token.
func requireHeld(t *testing.T, n *Node, key string, token uint64) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := n.Inspect(testCtx(t), key)
		return err == nil && info.Locked && info.Token == token
	}, 2*patience, 10*time.Millisecond, "%s holds %q with token %d", n.ID(), key, token)
}

// A removal that cannot commit (the new configuration lacks a quorum, so
// the leader steps down) leaves the leaving node with no leader: Leave ends
// promptly, rather than holding its caller (a stopping agent) for the
// request timeout. Once the removal has reached the leaving node, which
// it usually has (the leader sends it to the member it removes), Leave
// closes it (see TestLeaveClosesWhenItsRemovalArrivesButNotTheAnswer);
// else Leave fails, as the node may still be a member, once no leader has
// been known for a few election timeouts.
func TestLeaveGivesUpWhenTheLeaderIsLostMidway(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.RequestTimeout = time.Minute })
	ctx := testCtx(t)
	leader := c.leader()
	var followers []int
	for i, n := range c.nodes {
		if n != leader {
			followers = append(followers, i)
		}
	}
	leaving := c.nodes[followers[1]]
	// A member (not one that has yet to receive the configuration that
	// added it: see Leave).
	requireServers(t, leaving, "n0", "n1", "n2")
	c.stop(followers[0])

	start := time.Now()
	err := leaving.Leave(ctx)
	assert.NoError(t, ctx.Err(), "Leave ended by itself, before the caller's context ended")
	assert.Less(t, time.Since(start), c.cfgs[0].RequestTimeout/2, "Leave did not wait out the request timeout")
	if err == nil {
		assert.True(t, leaving.closed(), "Leave succeeded: the node is closed")
		return
	}
	require.ErrorIs(t, err, lock.ErrUnavailable)
	assert.ErrorContains(t, err, "may still be a member")
	assert.False(t, leaving.closed(), "a failed Leave leaves the node open")
	servers, serr := leaving.Servers()
	require.NoError(t, serr)
	assert.Contains(t, servers, leaving.ID(), "a node that Leave left open is in its configuration")
}

// The removal of a leaving node commits and reaches it, but the leader's
// answer to it is lost. Out of the configuration, the node hears no leader
// any more, and the forwarded request gives up. Leave closes the node as
// one that left. Before, Leave failed without saying that the node might no
// longer be a member, and left it running outside the configuration, where
// it serves nothing and nothing adds it back.
func TestLeaveClosesWhenItsRemovalArrivesButNotTheAnswer(t *testing.T) {
	c, faults := newFaultyCluster(t, 3, nil)
	ctx := testCtx(t)
	leader, leaving := c.leader(), c.follower()
	requireServers(t, leaving, "n0", "n1", "n2") // a member, as Leave begins
	others := []string{}
	for _, n := range c.nodes {
		if n != leaving {
			others = append(others, n.ID())
		}
	}
	// raft on the leader reports the removal of the leaving node right
	// after appending it and telling the replication to that node to send
	// it, before it can commit it (its main loop commits). A blocking
	// observer holds the leader there until the entry has reached the
	// leaving node; then the leader's answers to that node are cut.
	removed := make(chan raft.Observation)
	obs := raft.NewObserver(removed, true, func(o *raft.Observation) bool {
		p, ok := o.Data.(raft.PeerObservation)
		return ok && p.Removed && p.Peer.ID == raft.ServerID(leaving.ID())
	})
	leader.raft.RegisterObserver(obs)
	deregistered := make(chan struct{})
	t.Cleanup(func() { leader.raft.DeregisterObserver(obs); close(deregistered) })
	reached := make(chan bool, 1)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		deadline := time.After(patience / 2)
		out := leaving.removedFromConfiguration()
		for !out {
			select {
			case <-tick.C:
				out = leaving.removedFromConfiguration()
				continue
			case <-deadline:
			}
			break
		}
		faults.Cut(leader.Addr(), leaving.Addr())
		reached <- out
		select { // until raft, blocked in the observer, cannot be
		case <-removed:
		case <-deregistered:
		}
	}()

	err := leaving.Leave(ctx)
	require.True(t, <-reached, "the removal reached the leaving node before the cut")
	if err != nil {
		servers, serr := leaving.Servers()
		require.NoError(t, serr)
		require.Contains(t, servers, leaving.ID(), "Leave failed (%v), and left the node running outside its configuration", err)
		require.ErrorContains(t, err, "may still be a member")
		return
	}
	assert.True(t, leaving.closed(), "Leave succeeded: the node is closed")
	requireServers(t, leader, others...)
}

// Members leaving at the same time (every agent stopped at once with
// -leave-on-terminate): whichever is last may find itself the only voter
// when its removal reaches the leader. raft cannot remove the last voter;
// the removal is a no-op success, so that node closes at once, as the last
// member of a cluster does, instead of retrying until its context ends.
func TestLeaveOfTheLastVoterCloses(t *testing.T) {
	c := newCluster(t, 2, func(cfg *Config) { cfg.RequestTimeout = time.Minute })
	ctx := testCtx(t)
	leader := c.leader()
	// The leader's own view of the last voter, reached as a follower's
	// removal would reach it.
	require.NoError(t, c.nodes[c.index(c.follower())].Leave(ctx))
	requireServers(t, leader, leader.ID())
	require.NoError(t, leader.membership.RemoveServer(ctx, leader.ID()))
	servers, err := leader.Servers()
	require.NoError(t, err)
	assert.Contains(t, servers, leader.ID(), "the last voter stays in the configuration")
}

// A leader never appends its own removal. If it did and stopped before a
// follower had the entry (every member stopping at once with
// -leave-on-terminate), it would come back out of its own configuration,
// never campaign, and refuse its peers' votes with its longer log: no
// election could ever succeed. A leaving leader hands leadership over
// first (Leave); the removal of the leader itself is refused and changes
// nothing.
func TestLeaderDoesNotRemoveItself(t *testing.T) {
	c := newPeersCluster(t, 3)
	ctx := testCtx(t)
	leader := c.leader()
	err := leader.membership.RemoveServer(ctx, leader.ID())
	require.ErrorIs(t, err, errLeaderRemovesItself)
	requireServers(t, leader, "p0", "p1", "p2")
	assert.True(t, leader.IsLeader(), "refusing changed nothing")

	// Leave on the leader hands leadership over, then the new leader
	// removes it.
	require.NoError(t, leader.Leave(ctx))
	c.nodes[c.index(leader)] = nil
	next := c.waitLeader()
	assert.NotEqual(t, leader.ID(), next.ID())
	servers, err := next.Servers()
	require.NoError(t, err)
	assert.NotContains(t, servers, leader.ID(), "the old leader left")
	assert.Len(t, servers, 2)
}

// Leave waits for a leader for leaveLeaderWait, also while it asks for the
// removal: a forwarded request gives up sooner (LeaderWait), and then
// Leave asks again once a leader is known. Before, an election that took
// longer than LeaderWait (on a loaded host, after a leader's crash) failed
// the Leave.
func TestLeaveOutlastsAnElectionLongerThanLeaderWait(t *testing.T) {
	c, faults := newFaultyCluster(t, 3, nil)
	ctx := testCtx(t)
	leaving := c.follower()
	leaderWait := leaving.leaderWait()
	outage := 3 * leaderWait
	require.Less(t, outage+time.Second, leaving.leaveLeaderWait())
	// Nobody hears anybody for the outage: no leader, no election.
	isolate := func() {
		for _, a := range c.nodes {
			for _, b := range c.nodes {
				if a != b {
					faults.Cut(a.Addr(), b.Addr())
				}
			}
		}
	}
	isolate()
	healed := time.AfterFunc(outage, faults.HealAll)
	t.Cleanup(func() { healed.Stop() })

	start := time.Now()
	require.NoError(t, leaving.Leave(ctx))
	assert.Greater(t, time.Since(start), leaderWait, "the outage outlasted a forwarded request's wait for a leader")
	assert.True(t, leaving.closed())
	var others []string
	for _, n := range c.nodes {
		if n != leaving {
			others = append(others, n.ID())
		}
	}
	c.nodes[c.index(leaving)] = nil
	requireServers(t, c.waitLeader(), others...)
}
