package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/cluster/clustertest"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// newSingleNodeCluster starts a one-node cluster on 127.0.0.1 with fast raft
// timings (and tweaks, if any), waits until it leads, and closes it when
// the test ends.
func newSingleNodeCluster(t *testing.T, tweaks ...func(*cluster.Config)) *cluster.Node {
	t.Helper()
	cfg := clustertest.Config(t, "solo")
	cfg.Bootstrap = true
	cfg.APIAddr = "http://solo.test:7070"
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	n, err := cluster.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	require.Eventually(t, func() bool {
		id, _ := n.Leader()
		return n.IsLeader() && id == "solo"
	}, 10*time.Second, 5*time.Millisecond, "the node elects itself")
	return n
}

func TestNodeStatusOfARealCluster(t *testing.T) {
	node := newSingleNodeCluster(t)
	// No Config.Cluster: the handler finds the node's status by itself.
	n := newTestNodeOver(t, node, Config{}, nil)
	ctx := context.Background()

	holder := lock.NewOwner()
	_, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: "jobs/a", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)
	waiter := lock.NewOwner()
	granted := make(chan error, 1)
	go func() {
		_, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: "jobs/a", Owner: waiter, TTL: time.Minute, Wait: 10 * time.Second})
		granted <- err
	}()
	require.Eventually(t, func() bool {
		info, err := node.Inspect(ctx, "jobs/a")
		return err == nil && info.Waiters == 1
	}, 10*time.Second, 2*time.Millisecond, "the second acquire queues")

	st, err := n.client.Cluster(ctx)
	require.NoError(t, err)
	require.NotNil(t, st.Locks)
	assert.Equal(t, api.LockStats{Held: 1, Waiters: 1}, *st.Locks)

	released, err := n.client.Release(ctx, "jobs/a", holder)
	require.NoError(t, err)
	require.True(t, released)
	select {
	case err := <-granted:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not handed the lock")
	}

	require.Eventually(t, func() bool { return node.Stats().Health.Known }, 10*time.Second, 2*time.Millisecond, "the leader checks its members' health")
	st, err = n.client.Cluster(ctx)
	require.NoError(t, err)
	require.NotNil(t, st.Health)
	assert.Equal(t, 0, st.Health.FailureTolerance, "one voter: no failure tolerated")
	assert.Equal(t, 1, st.Health.HealthyVoters)
	require.NotNil(t, st.Readiness)
	assert.False(t, st.Readiness.Ready, "Voters is 3 and one member exists")
	assert.Contains(t, st.Readiness.Reason, "failure tolerance 0")
	assert.Equal(t, "solo", st.NodeID)
	assert.Equal(t, api.RoleLeader, st.Role)
	assert.Equal(t, "solo", st.LeaderID)
	assert.Equal(t, node.Addr(), st.LeaderAddr)
	require.Len(t, st.Members, 1)
	assert.NotEmpty(t, st.Members[0].Version, "its own version")
	assert.Equal(t, []api.Member{{ID: "solo", Address: node.Addr(), Suffrage: api.SuffrageVoter, Leader: true, APIAddr: "http://solo.test:7070", Status: "alive", Health: "healthy",
		Version: st.Members[0].Version, Level: fsm.MaxCommandLevel}}, st.Members)
	assert.Positive(t, st.Term)
	assert.Positive(t, st.CommitIndex)
	assert.Positive(t, st.AppliedIndex)
	assert.Positive(t, st.LeaderChanges, "the node saw itself elected")
	assert.Positive(t, st.Commit.Count)
	assert.Positive(t, st.Commit.Total)
	assert.Positive(t, st.Apply.Count)
	require.NotNil(t, st.Locks)
	assert.Equal(t, api.LockStats{Held: 1, Waiters: 0, Handoffs: 1}, *st.Locks, "the waiter holds the key, handed over once")
	assert.NotEmpty(t, st.Raft)

	h, err := n.client.Health(ctx)
	require.NoError(t, err)
	assert.Equal(t, api.Health{Ready: true, NodeID: "solo", Role: api.RoleLeader, LeaderID: "solo", LeaderAddr: node.Addr()}, h)

	families := scrape(t, n)
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		m, err := sample(families, name, labels)
		require.NoError(t, err)
		if m.Counter != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	assert.Equal(t, 1.0, value("raftlock_cluster_is_leader", nil))
	assert.Equal(t, 1.0, value("raftlock_cluster_has_leader", nil))
	assert.Equal(t, 1.0, value("raftlock_cluster_members", map[string]string{"suffrage": api.SuffrageVoter}))
	assert.Equal(t, 0.0, value("raftlock_cluster_members", map[string]string{"suffrage": api.SuffrageNonvoter}))
	assert.Equal(t, 1.0, value("raftlock_locks_held", nil))
	assert.Equal(t, 0.0, value("raftlock_locks_waiters", nil))
	assert.Equal(t, 1.0, value("raftlock_locks_handoffs_total", nil))
	assert.Equal(t, 0.0, value("raftlock_locks_expired_total", nil))
	commit, err := sample(families, "raftlock_raft_commit_duration_seconds", nil)
	require.NoError(t, err)
	assert.Positive(t, commit.GetSummary().GetSampleCount())
	assert.Positive(t, commit.GetSummary().GetSampleSum())

	// The node lists its locks over HTTP now that it is a lock.Lister.
	locks, err := n.client.List(ctx, lock.ListRequest{Prefix: "jobs/"})
	require.NoError(t, err)
	require.Len(t, locks, 1)
	assert.Equal(t, "jobs/a", locks[0].Key)
	assert.True(t, locks[0].Locked)
	a := n.do(t, http.MethodGet, "/v1/locks?prefix=jobs/&limit=1", "")
	assert.Equal(t, http.StatusOK, a.status, a.raw)
}

func TestNodeStatusOfNilNodeIsNil(t *testing.T) {
	assert.Nil(t, NodeStatus(nil))
}

// Every node of a three-node cluster shows, through GET /v1/cluster, each
// member's raftlock version and command level: without gossip (members
// tell them in the info exchange) and with it (their gossip tags). All
// run one build here, so none is marked below the leader's level.
func TestClusterShowsMembersVersionsAndLevels(t *testing.T) {
	t.Run("without gossip", func(t *testing.T) {
		checkMembersBuilds(t, clustertest.Start(t, 3, nil).Nodes)
	})
	t.Run("with gossip", func(t *testing.T) {
		var nodes []*cluster.Node
		for i := range 3 {
			cfg := clustertest.Config(t, fmt.Sprintf("n%d", i))
			cfg.GossipBindAddr = "127.0.0.1:0"
			if i == 0 {
				cfg.Bootstrap = true
			} else {
				cfg.RetryJoin = []string{nodes[0].GossipAddr()}
			}
			n, err := cluster.New(cfg)
			require.NoError(t, err)
			t.Cleanup(func() { n.Close() })
			nodes = append(nodes, n)
		}
		checkMembersBuilds(t, nodes)
		for _, m := range nodes[0].Stats().Members {
			assert.Equal(t, cluster.GossipAlive, m.Gossip, "%s is known to gossip", m.ID)
		}
	})
}

// checkMembersBuilds waits until each node's /v1/cluster lists the three
// members, each with the version the node answering shows for itself and
// this build's command level, none marked.
func checkMembersBuilds(t *testing.T, nodes []*cluster.Node) {
	t.Helper()
	for _, node := range nodes {
		n := newTestNodeOver(t, node, Config{}, nil)
		var got []api.Member
		require.Eventually(t, func() bool {
			st, err := n.client.Cluster(context.Background())
			if err != nil || len(st.Members) != len(nodes) {
				return false
			}
			got = st.Members
			var self api.Member
			for _, m := range st.Members {
				if m.ID == st.NodeID {
					self = m
				}
			}
			if self.Version == "" {
				return false
			}
			for _, m := range st.Members {
				if m.Version != self.Version || m.Level != fsm.MaxCommandLevel || m.BelowLeaderLevel {
					return false
				}
			}
			return true
		}, 20*time.Second, 10*time.Millisecond, "members as %s shows them: %+v", node.ID(), &got)
	}
}

// GET /v1/cluster asked of a follower shows each member's status and
// health as the leader judges them (a follower judges none): a member
// stopped shows failed and unhealthy there, as on the leader.
func TestClusterOnAFollowerShowsTheLeadersJudgement(t *testing.T) {
	c := clustertest.Start(t, 3, func(cfg *cluster.Config) { cfg.DeadVoterTimeout = time.Hour })
	stopped := c.Follower(t)
	require.NoError(t, stopped.Close())
	// Both that remain are asked, and the one that does not lead must
	// answer: an election meanwhile (a loaded machine's heartbeats come
	// late) may swap their roles.
	var survivors []*testNode
	for _, node := range c.Nodes {
		if node != stopped {
			survivors = append(survivors, newTestNodeOver(t, node, Config{}, nil))
		}
	}

	judged := func(members []api.Member) map[string]string {
		out := map[string]string{}
		for _, m := range members {
			out[m.ID] = m.Status + "/" + m.Health
		}
		return out
	}
	want := map[string]string{"n0": "alive/healthy", "n1": "alive/healthy", "n2": "alive/healthy"}
	want[stopped.ID()] = "failed/unhealthy"
	var st, leaders api.ClusterStatus
	require.Eventually(t, func() bool {
		var follower bool
		for _, n := range survivors {
			got, err := n.client.Cluster(context.Background())
			switch {
			case err != nil:
				return false
			case got.Role == api.RoleFollower:
				st, follower = got, true
			case got.Role == api.RoleLeader:
				leaders = got
			}
		}
		return follower && assert.ObjectsAreEqual(want, judged(st.Members)) && assert.ObjectsAreEqual(want, judged(leaders.Members))
	}, 20*time.Second, 10*time.Millisecond, "the members as a follower shows them: %+v; as the leader does: %+v", &st.Members, &leaders.Members)
	require.NotNil(t, st.Health, "with the leader's report they came in")
}
