package apiserver

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock/memstore"
)

// /healthz of a node that stopped at an entry its version cannot read
// answers 503 halted with the node's reason, not merely no_leader, and
// the raftlock_halted gauge says 1 (0 while it runs).
func TestHealthzReportsAHalt(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	fc := &fakeCluster{}
	n := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	fc.set(leaderStatus())
	assert.Equal(t, 0.0, haltedGauge(t, n), "running")
	st := leaderStatus()
	st.LeaderID, st.LeaderAddr, st.Role = "", "", "shutdown"
	st.Halted = "cluster: state machine halted: this member runs raftlock v1.0.0 (reads command level 1), which cannot read log entry 42"
	fc.set(st)

	resp, err := http.Get(n.url + "/healthz")
	require.NoError(t, err)
	a, err := decodeAnswer(resp)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, a.status)
	assert.Contains(t, a.raw, `"code":"`+api.CodeHalted+`"`)
	assert.Contains(t, a.raw, "cannot read log entry 42")
	assert.Equal(t, 1.0, haltedGauge(t, n), "an alert can fire on it")
}

// haltedGauge reads raftlock_halted from n's /metrics.
func haltedGauge(t *testing.T, n *testNode) float64 {
	t.Helper()
	m, err := sample(scrape(t, n), "raftlock_halted", nil)
	require.NoError(t, err)
	return m.GetGauge().GetValue()
}
