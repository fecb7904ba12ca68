package apiserver

import (
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata with what the code answers now")

// fixedStats is a node's Stats with every field /v1/cluster shows set to
// something that tells it apart, so that a renamed field, a changed unit or
// a lost copy changes the JSON.
func fixedStats() (cluster.Stats, cluster.Readiness) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 800_000_000, time.UTC)
	st := cluster.Stats{
		ID: "n1", Addr: "127.0.0.1:7001",
		State:      "Follower",
		LeaderID:   "n2",
		LeaderAddr: "127.0.0.1:7002",
		Members: []cluster.Member{
			{ID: "n1", Address: "127.0.0.1:7001", APIAddr: "https://n1.test:8300", Suffrage: cluster.SuffrageVoter, Gossip: cluster.GossipAlive, Version: "v1.4.0", Level: 3, BelowLeaderLevel: true},
			{ID: "n2", Address: "127.0.0.1:7002", APIAddr: "https://n2.test:8300", Suffrage: cluster.SuffrageVoter, Leader: true, Gossip: cluster.GossipAlive,
				Status: "alive", Health: cluster.HealthHealthy, Version: "v1.5.0", Level: 4},
			{ID: "n3", Address: "127.0.0.1:7003", Suffrage: cluster.SuffrageNonvoter, Gossip: cluster.GossipFailed, Status: "failed", Health: cluster.HealthUnhealthy},
			{ID: "n4", Address: "127.0.0.1:7004", Suffrage: "staging"},
		},
		Term:          7,
		CommitIndex:   120,
		AppliedIndex:  118,
		LeaderChanges: 3,
		Quotas: cluster.Quotas{
			Locks:    cluster.QuotaUsage{Limit: 1000, Used: 4, Refused: 2},
			Sessions: cluster.QuotaUsage{Used: 6},
			Waiters:  cluster.QuotaUsage{Limit: 50, Used: 2, Refused: 11},
		},
		Keys: 4, Waiters: 2, Handoffs: 9, Expired: 5,
		LastToken: 77, LogTime: time.Hour, WallTime: at, LocalWaiters: 1, Restores: 2,
		LogStore: cluster.LogStoreWAL,
		LogFault: "write raft-wal: no space left on device",
		Halted:   "entry 119: command level 9 unknown",
		Health:   cluster.ClusterHealth{Known: true, FailureTolerance: 1, Voters: 3, HealthyVoters: 2, Healthy: true, CheckedAt: at},
		ReconcileActions: []cluster.ReconcileAction{
			{At: at.Add(-time.Minute), Action: cluster.ActionAddNonvoter, ID: "n3", Reason: "joined"},
			{At: at, Action: cluster.ActionDemote, ID: "n3", Reason: "failed in gossip"},
		},
		ReconcileCounts: map[string]uint64{cluster.ActionAddNonvoter: 1, cluster.ActionDemote: 1, cluster.ActionRemove: 0},
		Commit:          cluster.Timing{Count: 100, Total: 250_000_001},
		Apply:           cluster.Timing{Count: 101, Total: 50_000_002},
		Freeze:          cluster.Timing{Count: 3, Total: 30_000_003},
		Raft:            map[string]string{"state": "Follower", "term": "7"},
		GossipMembers:   map[string]int{cluster.GossipAlive: 2, cluster.GossipFailed: 1, cluster.GossipLeft: 0},
	}
	rd := cluster.Readiness{Reason: "failure tolerance 0", Health: st.Health, LeaderID: "n2"}
	return st, rd
}

// TestClusterJSONIsUnchanged pins GET /v1/cluster's JSON for fixed node
// states, byte for byte: clients in other languages read these names,
// types and units. Run with -update only for a change of the wire that is
// meant.
func TestClusterJSONIsUnchanged(t *testing.T) {
	full, ready := fixedStats()
	for name, status := range map[string]cluster.Stats{
		"full": full,
		// A node that knows nothing yet: no leader, no members, no health.
		"empty": {State: "Candidate"},
	} {
		t.Run(name, func(t *testing.T) {
			rd := ready
			if name == "empty" {
				rd = cluster.Readiness{Reason: "no leader known"}
			}
			fake := &fakeCluster{}
			fake.set(clusterStatusOf(status, rd))
			n := newTestNode(t, Config{Cluster: fake})
			a := n.do(t, http.MethodGet, "/v1/cluster", "")
			require.Equal(t, http.StatusOK, a.status, a.raw)

			golden := filepath.Join("testdata", "cluster_"+name+".json")
			if *updateGolden {
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				require.NoError(t, os.WriteFile(golden, []byte(a.raw), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run the test with -update once to write it")
			assert.Equal(t, string(want), a.raw)
		})
	}
}
