package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// scrape reads the node's /metrics over HTTP and parses the text format.
func scrape(t *testing.T, n *testNode) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, n.url+"/metrics", nil)
	require.NoError(t, err)
	if n.token != "" {
		req.Header.Set(api.TokenHeader, n.token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// sample finds the metric of family name whose labels include want.
func sample(families map[string]*dto.MetricFamily, name string, want map[string]string) (*dto.Metric, error) {
	f, ok := families[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", errNoMetric, name)
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("%w: %s%v", errNoMetric, name, want)
}

func gaugeValue(t *testing.T, n *testNode, name string) float64 {
	t.Helper()
	m, err := sample(scrape(t, n), name, nil)
	require.NoError(t, err)
	return m.GetGauge().GetValue()
}

func TestMetricsCountOperations(t *testing.T) {
	n := newTestNode(t, Config{})
	ctx := context.Background()
	a, b := lock.NewOwner(), lock.NewOwner()

	_, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: a, TTL: time.Minute})
	require.NoError(t, err)
	_, err = n.client.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: b, TTL: time.Minute})
	require.ErrorIs(t, err, lock.ErrLocked)
	_, err = n.client.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: b, TTL: time.Minute, Wait: time.Millisecond})
	require.ErrorIs(t, err, lock.ErrLocked)
	_, err = n.client.Extend(ctx, "k", a, time.Minute)
	require.NoError(t, err)
	_, err = n.client.Inspect(ctx, "k")
	require.NoError(t, err)
	ok, err := n.client.Release(ctx, "k", b)
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = n.client.Release(ctx, "k", a)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = n.client.List(ctx, lock.ListRequest{})
	require.NoError(t, err)
	bad := n.do(t, "POST", "/v1/acquire", `{"key":"k"}`)
	require.Equal(t, api.CodeInvalidTTL, bad.errorCode())

	families := scrape(t, n)
	for _, c := range []struct {
		op, result string
		want       float64
	}{
		{opAcquire, "ok", 1},
		{opAcquire, api.CodeLocked, 1},
		{opAcquire, api.CodeInvalidTTL, 1},
		{opAcquireWait, api.CodeLocked, 1},
		{opExtend, "ok", 1},
		{opInspect, "ok", 1},
		{opRelease, api.CodeNotHeld, 1},
		{opRelease, "ok", 1},
		{opList, "ok", 1},
	} {
		m, err := sample(families, "raftlock_api_operations_total", map[string]string{"op": c.op, "result": c.result})
		if assert.NoError(t, err) {
			assert.Equal(t, c.want, m.GetCounter().GetValue(), "%s/%s", c.op, c.result)
		}
	}
	m, err := sample(families, "raftlock_api_operation_duration_seconds", map[string]string{"op": opAcquire})
	require.NoError(t, err)
	assert.EqualValues(t, 3, m.GetHistogram().GetSampleCount())
	assert.Positive(t, m.GetHistogram().GetSampleSum())
	m, err = sample(families, "raftlock_api_waiting_requests", nil)
	require.NoError(t, err)
	assert.Zero(t, m.GetGauge().GetValue())
	assert.Contains(t, families, "go_goroutines", "the runtime's metrics come along")
	assert.NotContains(t, families, "raftlock_cluster_has_leader", "no cluster, no cluster metrics")
}

func TestMetricsFromCluster(t *testing.T) {
	fc := &fakeCluster{st: leaderStatus()}
	n := newTestNode(t, Config{Cluster: fc})

	families := scrape(t, n)
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		m, err := sample(families, name, labels)
		require.NoError(t, err)
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		}
		t.Fatalf("%s is neither counter nor gauge", name)
		return 0
	}
	assert.Equal(t, 1.0, value("raftlock_cluster_has_leader", nil))
	assert.Equal(t, 0.0, value("raftlock_cluster_is_leader", nil))
	assert.Equal(t, 2.0, value("raftlock_cluster_members", map[string]string{"suffrage": api.SuffrageVoter}))
	assert.Equal(t, 1.0, value("raftlock_cluster_members", map[string]string{"suffrage": api.SuffrageNonvoter}))
	assert.Equal(t, 3.0, value("raftlock_cluster_leader_changes_total", nil))
	assert.Equal(t, 7.0, value("raftlock_raft_term", nil))
	assert.Equal(t, 120.0, value("raftlock_raft_commit_index", nil))
	assert.Equal(t, 118.0, value("raftlock_raft_applied_index", nil))
	assert.Equal(t, 4.0, value("raftlock_locks_held", nil))
	assert.Equal(t, 2.0, value("raftlock_locks_waiters", nil))
	assert.Equal(t, 9.0, value("raftlock_locks_handoffs_total", nil))
	assert.Equal(t, 5.0, value("raftlock_locks_expired_total", nil))

	commit, err := sample(families, "raftlock_raft_commit_duration_seconds", nil)
	require.NoError(t, err)
	assert.EqualValues(t, 100, commit.GetSummary().GetSampleCount())
	assert.InDelta(t, 0.25, commit.GetSummary().GetSampleSum(), 1e-9)
	apply, err := sample(families, "raftlock_raft_apply_duration_seconds", nil)
	require.NoError(t, err)
	assert.InDelta(t, 0.05, apply.GetSummary().GetSampleSum(), 1e-9)
	freeze, err := sample(families, "raftlock_snapshot_freeze_duration_seconds", nil)
	require.NoError(t, err)
	assert.EqualValues(t, 3, freeze.GetSummary().GetSampleCount())
	assert.InDelta(t, 0.03, freeze.GetSummary().GetSampleSum(), 1e-9)

	// Each scrape reads the cluster afresh.
	st := leaderStatus()
	st.LeaderID, st.LeaderAddr, st.LeaderChanges, st.Locks = "", "", 4, nil
	fc.set(st)
	families = scrape(t, n)
	assert.Equal(t, 0.0, value("raftlock_cluster_has_leader", nil))
	assert.Equal(t, 4.0, value("raftlock_cluster_leader_changes_total", nil))
	assert.NotContains(t, families, "raftlock_locks_held", "lock stats the cluster does not report are left out")
}

// TestTwoHandlersInOneProcess: each handler counts in its own registry.
func TestTwoHandlersInOneProcess(t *testing.T) {
	one, two := newTestNode(t, Config{}), newTestNode(t, Config{})
	_, err := one.client.Inspect(context.Background(), "k")
	require.NoError(t, err)

	m, err := sample(scrape(t, one), "raftlock_api_operations_total", map[string]string{"op": opInspect})
	require.NoError(t, err)
	assert.Equal(t, 1.0, m.GetCounter().GetValue())
	_, err = sample(scrape(t, two), "raftlock_api_operations_total", map[string]string{"op": opInspect})
	assert.ErrorIs(t, err, errNoMetric, "the other node served nothing")
}

func TestHealthz(t *testing.T) {
	t.Run("not a cluster: always ready", func(t *testing.T) {
		n := newTestNode(t, Config{})
		a := n.do(t, "GET", "/healthz", "")
		assert.Equal(t, http.StatusOK, a.status)
		assert.Equal(t, "ok", a.body["status"])
		h, err := n.client.Health(context.Background())
		require.NoError(t, err)
		assert.True(t, h.Ready)

		resp, err := http.Head(n.url + "/healthz")
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusOK, resp.StatusCode, "probes may use HEAD")
		resp, err = http.Head(n.url + "/v1/acquire")
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "HEAD stands in for GET only")
	})

	fc := &fakeCluster{st: leaderStatus()}
	n := newTestNode(t, Config{Cluster: fc})

	t.Run("leader known", func(t *testing.T) {
		fc.set(leaderStatus())
		a := n.do(t, "GET", "/healthz", "")
		assert.Equal(t, http.StatusOK, a.status, a.raw)
		assert.Equal(t, "n2", a.body["leader_id"])
		h, err := n.client.Health(context.Background())
		require.NoError(t, err)
		assert.Equal(t, api.Health{Ready: true, NodeID: "n1", Role: api.RoleFollower, LeaderID: "n2", LeaderAddr: "127.0.0.1:7002"}, h)
	})

	t.Run("no leader", func(t *testing.T) {
		st := leaderStatus()
		st.Role, st.LeaderID, st.LeaderAddr = api.RoleCandidate, "", ""
		fc.set(st)
		a := n.do(t, "GET", "/healthz", "")
		assert.Equal(t, http.StatusServiceUnavailable, a.status, a.raw)
		assert.Equal(t, api.CodeNoLeader, a.errorCode())
		h, err := n.client.Health(context.Background())
		require.NoError(t, err, "a node without a leader is an answer, not an error")
		assert.Equal(t, api.Health{Ready: false, NodeID: "n1", Role: api.RoleCandidate}, h)
	})
}

func TestClusterView(t *testing.T) {
	fc := &fakeCluster{st: leaderStatus()}
	n := newTestNode(t, Config{Cluster: fc})
	got, err := n.client.Cluster(context.Background())
	require.NoError(t, err)
	assert.Equal(t, leaderStatus(), got, "the view survives the JSON round trip")

	plain := newTestNode(t, Config{})
	_, err = plain.client.Cluster(context.Background())
	assert.ErrorIs(t, err, api.ErrNotCluster)

	// A store that is itself a Cluster needs no Config.Cluster.
	store := memstore.New()
	both := newTestNodeOver(t, clusterStore{store, fc}, Config{}, func() { _ = store.Close() })
	got, err = both.client.Cluster(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "n1", got.NodeID)
}

type clusterStore struct {
	*memstore.Store
	*fakeCluster
}

func TestReadyz(t *testing.T) {
	t.Run("not a cluster: always ready", func(t *testing.T) {
		a := newTestNode(t, Config{}).do(t, "GET", "/readyz", "")
		assert.Equal(t, http.StatusOK, a.status)
		assert.Equal(t, "ready", a.body["status"])
	})

	fc := &fakeCluster{st: leaderStatus()}
	n := newTestNode(t, Config{Cluster: fc, Token: testToken})

	t.Run("a cluster that reports no readiness follows healthz", func(t *testing.T) {
		fc.set(leaderStatus())
		a := n.do(t, "GET", "/readyz", "")
		assert.Equal(t, http.StatusOK, a.status, "open without the token, as probes are: %s", a.raw)
		st := leaderStatus()
		st.LeaderID, st.LeaderAddr = "", ""
		fc.set(st)
		a = n.do(t, "GET", "/readyz", "")
		assert.Equal(t, http.StatusServiceUnavailable, a.status, a.raw)
		assert.Equal(t, api.CodeNotReady, a.errorCode())
		assert.Equal(t, "no leader known", a.body["reason"])
	})

	t.Run("ready", func(t *testing.T) {
		st := leaderStatus()
		st.Health = &api.ClusterHealth{FailureTolerance: 1, Voters: 3, HealthyVoters: 3, Healthy: true}
		st.Readiness = &api.Readiness{Ready: true}
		fc.set(st)
		a := n.do(t, "GET", "/readyz", "")
		assert.Equal(t, http.StatusOK, a.status, a.raw)
		assert.Equal(t, 1.0, a.body["failure_tolerance"])
		assert.Equal(t, "n2", a.body["leader_id"])
	})

	t.Run("failure tolerance 0", func(t *testing.T) {
		st := leaderStatus()
		st.Health = &api.ClusterHealth{FailureTolerance: 0, Voters: 3, HealthyVoters: 2, Healthy: true}
		st.Readiness = &api.Readiness{Reason: "failure tolerance 0: 2 of 3 voters healthy, losing one more would stop the cluster"}
		fc.set(st)
		a := n.do(t, "GET", "/readyz?probe=1", "")
		assert.Equal(t, http.StatusServiceUnavailable, a.status, a.raw)
		assert.Equal(t, api.CodeNotReady, a.errorCode())
		assert.Equal(t, 0.0, a.body["failure_tolerance"])
		assert.Contains(t, a.errorField("message"), "failure tolerance 0")
		assert.Equal(t, st.Readiness.Reason, a.body["reason"])

		// The same in the metrics.
		for name, want := range map[string]float64{
			"raftlock_cluster_failure_tolerance": 0,
			"raftlock_cluster_healthy_voters":    2,
			"raftlock_cluster_ready":             0,
		} {
			m, err := sample(scrape(t, n), name, nil)
			require.NoError(t, err, name)
			assert.Equal(t, want, m.GetGauge().GetValue(), name)
		}
	})
}

// The reconciler's changes are counted by action in /metrics and in the
// cluster status.
func TestReconcileActionsMetric(t *testing.T) {
	st := leaderStatus()
	st.ReconcileCounts = map[string]uint64{"add-nonvoter": 3, "promote": 2, "demote": 1, "remove": 0}
	fc := &fakeCluster{st: st}
	n := newTestNode(t, Config{Cluster: fc})
	families := scrape(t, n)
	for action, want := range st.ReconcileCounts {
		m, err := sample(families, "raftlock_reconcile_actions_total", map[string]string{"action": action})
		require.NoError(t, err, action)
		assert.Equal(t, float64(want), m.GetCounter().GetValue(), action)
	}
	got, err := n.client.Cluster(context.Background())
	require.NoError(t, err)
	assert.Equal(t, st.ReconcileCounts, got.ReconcileCounts)
}
