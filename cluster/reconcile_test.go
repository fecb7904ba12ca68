package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	autopilot "github.com/hashicorp/raft-autopilot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/internal/membership"
	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
)

// lockTraffic acquires and releases keys, one call at a time, on whichever
// node target holds, until stopped; it records every granted token in order.
type lockTraffic struct {
	target atomic.Pointer[Node]
	stopCh chan struct{}
	done   chan struct{}

	mu        sync.Mutex
	tokens    []uint64
	lastGrant time.Time
	maxGap    time.Duration
}

func startTraffic(t *testing.T, n *Node) *lockTraffic {
	lt := &lockTraffic{stopCh: make(chan struct{}), done: make(chan struct{}), lastGrant: time.Now()}
	lt.target.Store(n)
	go lt.run()
	t.Cleanup(lt.stop)
	return lt
}

func (lt *lockTraffic) run() {
	defer close(lt.done)
	for i := 0; ; i++ {
		select {
		case <-lt.stopCh:
			return
		default:
		}
		n := lt.target.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		owner := lock.NewOwner()
		key := fmt.Sprintf("traffic/%d", i%8)
		lease, err := n.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute})
		if err == nil {
			now := time.Now()
			lt.mu.Lock()
			lt.tokens = append(lt.tokens, lease.Token)
			lt.maxGap = max(lt.maxGap, now.Sub(lt.lastGrant))
			lt.lastGrant = now
			lt.mu.Unlock()
			_, _ = n.Release(ctx, key, owner)
		}
		cancel()
	}
}

func (lt *lockTraffic) stop() {
	select {
	case <-lt.stopCh:
	default:
		close(lt.stopCh)
	}
	<-lt.done
}

func (lt *lockTraffic) granted() int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return len(lt.tokens)
}

// check asserts that tokens strictly increased, in the order granted.
func (lt *lockTraffic) check(t *testing.T) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	require.NotEmpty(t, lt.tokens)
	for i := 1; i < len(lt.tokens); i++ {
		require.Greater(t, lt.tokens[i], lt.tokens[i-1], "fencing token %d not above the one granted before it", i)
	}
	t.Logf("%d grants, longest gap between two: %v", len(lt.tokens), lt.maxGap)
}

// requireGrantsResume waits until lt has granted more locks than now.
func (lt *lockTraffic) requireGrantsResume(t *testing.T) {
	t.Helper()
	before := lt.granted()
	require.Eventually(t, func() bool { return lt.granted() > before }, patience, 5*time.Millisecond, "no lock granted")
}

// liveVoters returns, from the leader's configuration, the voters that are
// running nodes of c, and all voters.
func liveVoters(t *testing.T, leader *Node, running []*Node) (live, all []string) {
	voters, _ := suffrages(t, leader)
	for _, v := range voters {
		if slices.ContainsFunc(running, func(n *Node) bool { return n != nil && n.ID() == v }) {
			live = append(live, v)
		}
	}
	return live, voters
}

// leaderOf returns the running node that leads with its term ready.
func leaderOf(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	var leader *Node
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if n != nil && n.leaderReady() {
				leader = n
				return true
			}
		}
		return false
	}, patience, 5*time.Millisecond, "no leader")
	return leader
}

// requireReadiness waits until n's Readiness is ready (or not) with the
// given failure tolerance.
func requireReadiness(t *testing.T, n *Node, ready bool, tolerance int) Readiness {
	t.Helper()
	var r Readiness
	if !assert.Eventually(t, func() bool {
		r = n.Readiness()
		return r.Ready == ready && r.Health.Known && r.Health.FailureTolerance == tolerance
	}, patience, 5*time.Millisecond) {
		t.Fatalf("%s: want ready=%v with failure tolerance %d; last: %+v", n.ID(), ready, tolerance, r)
	}
	return r
}

func TestDeadVotersAreReplacedUnderTraffic(t *testing.T) {
	const deadVoterTimeout = time.Second
	c := newCluster(t, 5, func(cfg *Config) {
		cfg.DeadVoterTimeout = deadVoterTimeout
		cfg.DeadMemberTimeout = time.Hour
	})
	requireVoters(t, c, []string{"n0", "n1", "n2"}, []string{"n3", "n4"})
	for _, n := range c.nodes {
		requireReadiness(t, n, true, 1)
	}
	traffic := startTraffic(t, c.nodes[4]) // a non-voter, never stopped here
	traffic.requireGrantsResume(t)

	// Kill a voter that does not lead, then the leader: each time the
	// leader (a new one the second time) replaces the dead voter by a
	// non-voter, and locks keep being granted.
	for round, pick := range []func() *Node{
		func() *Node { // a voter that does not lead
			l := c.leader()
			voters, _ := suffrages(t, l)
			for _, v := range voters {
				if v != l.ID() && v != "n4" {
					return c.nodes[c.indexOf(v)]
				}
			}
			t.Fatal("no follower voter")
			return nil
		},
		func() *Node { return c.leader() },
	} {
		victim := pick()
		require.NotEqual(t, "n4", victim.ID())
		killedAt := time.Now()
		c.stop(c.index(victim))
		t.Logf("round %d: killed voter %s", round, victim.ID())

		// Until it is replaced the cluster tolerates no further failure:
		// no node is ready (the window is DeadVoterTimeout long at least).
		requireReadiness(t, c.nodes[4], false, 0)

		var live, all []string
		require.Eventually(t, func() bool {
			live, all = liveVoters(t, leaderOf(t, c.nodes), c.nodes)
			return len(live) == 3 && len(all) == 3
		}, 3*patience, 10*time.Millisecond, "round %d: want 3 live voters; last %v of %v", round, live, all)
		took := time.Since(killedAt)
		t.Logf("round %d: %s replaced after %v; voters %v", round, victim.ID(), took, all)
		assert.GreaterOrEqual(t, took, deadVoterTimeout, "replaced before DeadVoterTimeout")

		for _, n := range c.nodes {
			if n != nil {
				r := requireReadiness(t, n, true, 1)
				assert.Equal(t, 3, r.Health.HealthyVoters)
			}
		}
		traffic.requireGrantsResume(t)
	}
	traffic.stop()
	traffic.check(t)

	// The leaders say what they did and why (each keeps its own record;
	// the second replacement was made by a leader still running).
	var demotions, promotions int
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		for _, a := range n.Stats().ReconcileActions {
			switch a.Action {
			case ActionDemote:
				demotions++
				assert.Contains(t, a.Reason, "unhealthy")
			case ActionPromote:
				promotions++
				assert.Contains(t, a.Reason, "replaces voter")
			}
		}
	}
	assert.GreaterOrEqual(t, demotions, 1)
	assert.GreaterOrEqual(t, promotions, 1)
	l := c.leader()
	st := l.Stats()
	assert.Equal(t, 1, st.Health.FailureTolerance)
	for _, m := range st.Members {
		if c.nodes[c.indexOf(m.ID)] == nil {
			assert.Equal(t, "failed", m.Status, m.ID)
			assert.Equal(t, HealthUnhealthy, m.Health, m.ID)
		} else {
			assert.Equal(t, "alive", m.Status, m.ID)
		}
	}
}

func TestFiveVotersSurviveTwoKilledAtOnce(t *testing.T) {
	c := newCluster(t, 5, func(cfg *Config) {
		cfg.Voters = 5
		cfg.DeadVoterTimeout = 300 * time.Millisecond
		cfg.DeadMemberTimeout = time.Hour
	})
	all := []string{"n0", "n1", "n2", "n3", "n4"}
	requireVoters(t, c, all, nil)
	l := c.leader()
	requireReadiness(t, l, true, 2)

	var killed []int
	for i, n := range c.nodes {
		if n != l && len(killed) < 2 {
			killed = append(killed, i)
		}
	}
	for _, i := range killed {
		c.stop(i)
	}
	for _, n := range c.nodes {
		if n != nil {
			r := requireReadiness(t, n, false, 0)
			assert.Contains(t, r.Reason, "failure tolerance 0")
		}
	}
	// Three of five still make a quorum; with no non-voter to take their
	// places the dead voters keep their votes: demoting one would not add
	// a live voter, and the reconciler never goes below Voters that way.
	acquire(t, c.leader(), "still", time.Minute)
	assert.Never(t, func() bool {
		voters, _ := suffrages(t, c.leader())
		return !slices.Equal(voters, all)
	}, 10*c.cfgs[0].DeadVoterTimeout, 50*time.Millisecond, "a voter was demoted or removed")

	// One comes back: one more failure is tolerated again.
	c.restart(killed[0])
	for _, n := range c.nodes {
		if n != nil {
			requireReadiness(t, n, true, 1)
		}
	}
}

// A replica set of embedded nodes replaced one by one, as a rollout does:
// each old node killed (no Leave), a new one with a new name and an empty
// data dir started, and the next step taken only once the new one is
// ready. Locks keep being granted with growing tokens, and in the end the
// configuration holds the new members only, three of them voting.
func TestRollingReplacementGatedOnReadiness(t *testing.T) {
	tweak := func(cfg *Config) {
		cfg.DeadVoterTimeout = time.Second
		cfg.DeadMemberTimeout = 2 * time.Second
	}
	c := newCluster(t, 5, tweak)
	requireVoters(t, c, []string{"n0", "n1", "n2"}, []string{"n3", "n4"})
	for _, n := range c.nodes {
		requireReadiness(t, n, true, 1)
	}
	traffic := startTraffic(t, c.nodes[4])
	traffic.requireGrantsResume(t)

	var fresh []*Node
	t.Cleanup(func() { // says what the leaders did, should the test fail
		if t.Failed() {
			for _, n := range append(slices.Clone(c.nodes), fresh...) {
				if n == nil {
					continue
				}
				st := n.Stats()
				t.Logf("%s: %s, leader %s, health %+v, readiness %+v", n.ID(), st.State, st.LeaderID, st.Health, n.Readiness())
				for _, a := range st.ReconcileActions {
					t.Logf("%s: %s %s %s: %s", n.ID(), a.At.Format("15:04:05.000"), a.Action, a.ID, a.Reason)
				}
			}
		}
	})
	for i := range 5 {
		// Traffic goes to a node that is not about to go.
		if i == 0 {
			traffic.target.Store(c.nodes[4])
		} else {
			traffic.target.Store(fresh[i-1])
		}
		old := c.nodes[i].ID()
		c.stop(i)
		var join []string
		for _, n := range append(slices.Clone(c.nodes), fresh...) {
			if n != nil {
				join = append(join, n.Addr())
			}
		}
		cfg := testConfig(t, fmt.Sprintf("m%d", i))
		tweak(&cfg)
		cfg.Join = join
		m := startNode(t, cfg)
		fresh = append(fresh, m)
		start := time.Now()
		requireReadiness(t, m, true, 1)
		t.Logf("step %d: %s killed, %s ready after %v", i, old, m.ID(), time.Since(start))
		traffic.requireGrantsResume(t)
	}
	traffic.stop()
	traffic.check(t)

	newIDs := []string{"m0", "m1", "m2", "m3", "m4"}
	var voters, nonvoters []string
	require.Eventually(t, func() bool {
		voters, nonvoters = suffrages(t, leaderOf(t, fresh))
		members := slices.Sorted(slices.Values(append(slices.Clone(voters), nonvoters...)))
		return len(voters) == 3 && slices.Equal(members, newIDs)
	}, 3*patience, 10*time.Millisecond, "want only the new members, 3 voting; last voters %v, non-voters %v", voters, nonvoters)
}

// indexOf returns the index of the node with this ID in c (running or not).
func (c *testCluster) indexOf(id string) int {
	for i, cfg := range c.cfgs {
		if cfg.NodeID == id {
			return i
		}
	}
	c.t.Fatalf("no node %s", id)
	return -1
}

func TestReadinessWithoutLeaderOrReport(t *testing.T) {
	cfg := testConfig(t, "solo")
	cfg.Bootstrap = true
	cfg.Voters = 3
	n := startNode(t, cfg)
	require.NoError(t, n.Ready(testCtx(t)))
	// One member of three wanted: it serves, but tolerates no failure. The
	// leader judges itself healthy from its first round on.
	r := requireReadiness(t, n, false, 0)
	assert.True(t, r.Health.Healthy, "the leader judges itself healthy: %+v", r)
	assert.False(t, r.Ready)
	assert.Contains(t, r.Reason, "failure tolerance 0")
	tol, known := n.FailureTolerance()
	assert.True(t, known)
	assert.Equal(t, 0, tol)

	// A cluster of one voter by design is ready once healthy.
	cfg1 := testConfig(t, "single")
	cfg1.Bootstrap = true
	cfg1.Voters = 1
	n1 := startNode(t, cfg1)
	requireReadiness(t, n1, true, 0)

	require.NoError(t, n.Close())
	r = n.Readiness()
	assert.False(t, r.Ready)
	assert.Equal(t, "node closed", r.Reason)
}

// Autopilot judges members only in a leader term that is ready: before,
// the leader's log may still end in the previous term.
func TestJudgingTermWaitsForTheTermToBeReady(t *testing.T) {
	assert.Nil(t, judgingTerm(nil, false), "not leading")
	term := newLeaderTerm(nil)
	assert.Nil(t, judgingTerm(term, false), "the term's first entry is not committed yet")
	close(term.ready)
	assert.Same(t, term, judgingTerm(term, false))
	assert.Nil(t, judgingTerm(term, true), "node closed")
}

// A leader judges itself healthy from its first round on. Its first round
// used to read the leader's log position before the term's first entry
// was appended and its own stats after: "on another term", unhealthy for
// a round (a few percent of fresh single-node clusters, more under load).
// A round this poll misses cannot fail the test, only weaken it; several
// fresh leaders make a regression likely to show.
func TestLeaderJudgesItselfHealthyFromItsFirstRound(t *testing.T) {
	for i := range 5 {
		cfg := testConfig(t, fmt.Sprintf("solo%d", i))
		cfg.Bootstrap = true
		cfg.Voters = 1
		n := startNode(t, cfg)
		self := raft.ServerID(n.ID())
		seen := map[*autopilot.State]bool{}
		var unhealthy []string
		require.Eventually(t, func() bool {
			s := n.hooks().AutopilotState()
			if s == nil || seen[s] {
				return false
			}
			seen[s] = true
			if srv := s.Servers[self]; srv == nil || !srv.Health.Healthy {
				unhealthy = append(unhealthy, fmt.Sprintf("round %d: %+v", len(seen), srv))
			}
			return len(seen) >= 2
		}, patience, time.Millisecond, "two rounds of %s", self)
		assert.Empty(t, unhealthy, "%s judged itself unhealthy", self)
		require.NoError(t, n.Close())
	}
}

// A member that gossip says left is removed at once; one back at a new
// address is updated. The gossip source is a fake here.
func TestGossipSourceLeftMemberIsRemoved(t *testing.T) {
	c := newCluster(t, 4, nil)
	requireVoters(t, c, []string{"n0", "n1", "n2"}, []string{"n3"})
	l := c.leader()
	src := membership.MemberSource(func() []membership.MemberView {
		var out []membership.MemberView
		for _, n := range c.nodes {
			if n == nil {
				continue
			}
			status := autopilot.NodeAlive
			if n.ID() == "n3" {
				status = autopilot.NodeLeft
			}
			out = append(out, membership.MemberView{ID: raft.ServerID(n.ID()), Addr: raft.ServerAddress(n.Addr()), Status: status})
		}
		return out
	})
	l.hooks().SetMemberSource(src)
	l.hooks().WakeReconciler()
	requireVoters(t, c, []string{"n0", "n1", "n2"}, nil)
	var removal ReconcileAction
	require.Eventually(t, func() bool { // recorded once the removal commits
		for _, a := range l.Stats().ReconcileActions {
			if a.Action == ActionRemove && a.ID == "n3" {
				removal = a
				return true
			}
		}
		return false
	}, patience, 5*time.Millisecond, "no removal of n3 recorded")
	assert.Contains(t, removal.Reason, "left")
}

// A voter cut off from the others (alive, but raft cannot reach it) is
// replaced like a dead one; healed, it serves again as a non-voter.
func TestPartitionedVoterIsReplaced(t *testing.T) {
	c, faults := newFaultyCluster(t, 4, func(cfg *Config) {
		cfg.DeadVoterTimeout = 500 * time.Millisecond
		cfg.DeadMemberTimeout = time.Hour
	})
	requireVoters(t, c, []string{"n0", "n1", "n2"}, []string{"n3"})
	l := c.leader()
	var cut *Node
	for _, n := range c.nodes[:3] {
		if n != l {
			cut = n
			break
		}
	}
	for _, n := range c.nodes {
		if n != cut {
			faults.Cut(n.Addr(), cut.Addr())
			faults.Cut(cut.Addr(), n.Addr())
		}
	}
	want := slices.DeleteFunc([]string{"n0", "n1", "n2", "n3"}, func(id string) bool { return id == cut.ID() })
	others := slices.DeleteFunc(slices.Clone(c.nodes), func(n *Node) bool { return n == cut })
	require.Eventually(t, func() bool { // (requireVoters wants every node to agree on the leader)
		v, nv := suffrages(t, leaderOf(t, others))
		return slices.Equal(v, want) && slices.Equal(nv, []string{cut.ID()})
	}, patience, 10*time.Millisecond, "the cut-off voter is not replaced")
	acquire(t, leaderOf(t, others), "during", time.Minute)
	r := cut.Readiness()
	assert.False(t, r.Ready, "cut off, it cannot be ready: %+v", r)

	faults.HealAll()
	requireReadiness(t, cut, true, 1)
	acquire(t, cut, "after", time.Minute)
	requireVoters(t, c, want, []string{cut.ID()})
}

// A member that gossip sees alive at another address than raft has (back
// after a restart on a new IP) gets its address updated, its suffrage kept.
func TestGossipSourceNewAddressIsUpdated(t *testing.T) {
	c := newCluster(t, 4, nil)
	requireVoters(t, c, []string{"n0", "n1", "n2"}, []string{"n3"})
	l := c.leader()
	// n3 is gone from its old address (a member is moved only once that is
	// seen failed: admission.go), and back at one where nobody listens:
	// only the configuration is looked at.
	c.stop(3)
	const newAddr = "127.0.0.1:1"
	src := membership.MemberSource(func() []membership.MemberView {
		out := []membership.MemberView{{ID: "n3", Addr: newAddr, Status: autopilot.NodeAlive}}
		for _, n := range c.nodes {
			if n != nil {
				out = append(out, membership.MemberView{ID: raft.ServerID(n.ID()), Addr: raft.ServerAddress(n.Addr()), Status: autopilot.NodeAlive})
			}
		}
		return out
	})
	l.hooks().SetMemberSource(src)
	l.hooks().WakeReconciler()
	require.Eventually(t, func() bool {
		servers, err := l.Servers()
		return err == nil && servers["n3"] == newAddr
	}, patience, 5*time.Millisecond, "n3's address not updated")
	_, nonvoters := suffrages(t, l)
	assert.Equal(t, []string{"n3"}, nonvoters, "suffrage kept")
	require.Eventually(t, func() bool {
		for _, a := range l.Stats().ReconcileActions {
			if a.Action == ActionUpdateAddress && a.ID == "n3" {
				return true
			}
		}
		return false
	}, patience, 5*time.Millisecond, "no address update recorded: %+v", l.Stats().ReconcileActions)
}
