package apiserver

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock/memstore"
)

// /healthz answers 503 log_fault, with the reason, while the node cannot
// write its raft log, and 200 again once it can.
func TestHealthzReportsALogFault(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	fc := &fakeCluster{}
	n := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	st := leaderStatus()
	st.LogFault = "raft log /d/wal: writes fail since 2026-01-01T00:00:00Z: no space left on device"
	fc.set(st)

	resp, err := http.Get(n.url + "/healthz")
	require.NoError(t, err)
	a, err := decodeAnswer(resp)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, a.status)
	assert.Contains(t, a.raw, api.CodeLogFault)
	assert.Contains(t, a.raw, "no space left on device")
	assert.Equal(t, 1.0, logFaultGauge(t, n), "an alert can fire on it")

	fc.set(leaderStatus())
	resp, err = http.Get(n.url + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 0.0, logFaultGauge(t, n))
}

// logFaultGauge reads raftlock_raft_log_fault from n's /metrics.
func logFaultGauge(t *testing.T, n *testNode) float64 {
	t.Helper()
	m, err := sample(scrape(t, n), "raftlock_raft_log_fault", nil)
	require.NoError(t, err)
	return m.GetGauge().GetValue()
}

// A node that cannot write its raft log and knows no leader (it cannot
// vote either) says log_fault, the thing to fix, rather than no_leader.
func TestHealthzSaysLogFaultBeforeNoLeader(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	fc := &fakeCluster{}
	n := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	st := leaderStatus()
	st.LeaderID, st.LeaderAddr = "", ""
	for i := range st.Members {
		st.Members[i].Leader = false
	}
	st.LogFault = "raft log /d/wal: writes fail since 2026-01-01T00:00:00Z: no space left on device"
	fc.set(st)

	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(n.url + path)
		require.NoError(t, err)
		a, err := decodeAnswer(resp)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, a.status, path)
		assert.Contains(t, a.raw, "no space left on device", path)
		assert.NotContains(t, a.raw, "no leader", path)
		if path == "/healthz" {
			assert.Contains(t, a.raw, `"status":"`+api.CodeLogFault+`"`)
		}
	}
}
