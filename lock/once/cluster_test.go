package once_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/once"
)

// Three replicas of a job, each with a client on its own node of one cluster:
// each tick runs exactly once. The loops' clock is the fake one; the tick's
// lease (the window, 5 minutes, plus the skew) is counted by the cluster in
// real time, and each tick is a key of its own.
func TestThreeClusterNodesRunEachTickOnce(t *testing.T) {
	nodes := startCluster(t)
	clock := newFakeClock(base.Add(time.Second))
	r := newRuns()
	replicas(t, len(nodes), func(ctx context.Context, i int) error {
		return once.PerTick(ctx, lock.New(nodes[i]), "report", once.Every(5*time.Minute), func(ctx context.Context, tick once.Tick) error {
			r.add(i, tick)
			return nil
		}, once.WithClock(clock), failOnError(t))
	})

	for k := 1; k <= 3; k++ {
		clock.waitForSleepers(t, len(nodes)) // every replica waits for the next tick
		tick := base.Add(time.Duration(k) * 5 * time.Minute)
		clock.AdvanceTo(tick)
		clock.waitForSleepers(t, len(nodes)) // every replica has tried it
		assert.Len(t, r.of(tick), 1, "tick %v ran on replicas %v", tick, r.of(tick))
	}
	r.mu.Lock()
	ticks := append([]once.Tick(nil), r.ticks...)
	r.mu.Unlock()
	require.Len(t, ticks, 3)
	for i := 1; i < len(ticks); i++ {
		assert.Greater(t, ticks[i].Token, ticks[i-1].Token, "each tick's lock has a higher token")
	}
	for _, tick := range ticks {
		info, err := clusterFollower(t, nodes).Inspect(t.Context(), tick.Key)
		require.NoError(t, err)
		assert.True(t, info.Locked, "%s is kept until its window ends", tick.Key)
		assert.Equal(t, tick.Token, info.Token)
	}
}

// startCluster starts a three-node raftlock cluster on 127.0.0.1 with fast
// raft timings (n0 bootstraps, n1 and n2 join it) and returns its nodes once
// all of them know the same leader. The nodes close when the test ends.
func startCluster(t *testing.T) []*cluster.Node {
	t.Helper()
	var nodes []*cluster.Node
	for i := range 3 {
		cfg := cluster.DefaultConfig()
		cfg.NodeID = fmt.Sprintf("n%d", i)
		cfg.DataDir = t.TempDir()
		cfg.BindAddr = "127.0.0.1:0"
		cfg.HeartbeatTimeout = 150 * time.Millisecond
		cfg.ElectionTimeout = 150 * time.Millisecond
		cfg.LeaderLeaseTimeout = 100 * time.Millisecond
		cfg.CommitTimeout = 5 * time.Millisecond
		cfg.RequestTimeout = 5 * time.Second
		cfg.Logger = hclog.NewNullLogger()
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = []string{nodes[0].Addr()}
		}
		n, err := cluster.New(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
		if i == 0 {
			require.Eventually(t, n.IsLeader, patience, 5*time.Millisecond, "n0 elects itself")
		}
	}
	require.Eventually(t, func() bool {
		_, leader := nodes[0].Leader()
		for _, n := range nodes {
			if _, addr := n.Leader(); addr == "" || addr != leader {
				return false
			}
		}
		return true
	}, patience, 5*time.Millisecond, "the nodes agree on a leader")
	return nodes
}

// clusterFollower returns a node of nodes that does not lead.
func clusterFollower(t *testing.T, nodes []*cluster.Node) *cluster.Node {
	t.Helper()
	for _, n := range nodes {
		if !n.IsLeader() {
			return n
		}
	}
	require.FailNow(t, "every node leads")
	return nil
}
