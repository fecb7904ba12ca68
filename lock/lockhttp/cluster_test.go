package lockhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/lock"
)

// Two replicas of a service, each embedding a node of one cluster: the same
// resource requested on both at once runs on one, and the other is refused.
func TestOneRequestPerResourceAcrossClusterNodes(t *testing.T) {
	nodes := startCluster(t)
	f := clusterFollower(t, nodes)
	var other *cluster.Node
	for _, n := range nodes {
		if n != f {
			other = n
			break
		}
	}
	g := newGate()
	replicaA := accountMux(lock.New(f), g)
	replicaB := accountMux(lock.New(other), g)

	onA := serve(replicaA, post("/accounts/42"))
	onB := serve(replicaB, post("/accounts/42"))
	// gate.entered is unbuffered: a second request in the handler would block
	// there and never answer, so the refusal below would time out.
	token := receive(t, g.entered, "one request to run")

	var refused *httptest.ResponseRecorder
	var ran <-chan *httptest.ResponseRecorder
	select {
	case refused = <-onA:
		ran = onB
	case refused = <-onB:
		ran = onA
	case <-time.After(patience):
		require.FailNow(t, "the second request was neither run nor refused")
	}
	assert.Equal(t, http.StatusConflict, refused.Code)
	assert.Equal(t, response{Error: "locked", Key: "account:42", Token: token}, decode(t, refused))

	close(g.release)
	rec := receive(t, ran, "the running request's response")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, fmt.Sprintf("done %d", token), rec.Body.String())
	info, err := f.Inspect(t.Context(), "account:42")
	require.NoError(t, err)
	assert.False(t, info.Locked, "released after the handler")
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
