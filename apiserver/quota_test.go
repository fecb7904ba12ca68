package apiserver

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/lock"
)

// A cluster at its quota answers 429 quota_exceeded, which the Go client
// turns back into lock.ErrQuotaExceeded; the status and the metrics show
// each quota, its use and its refusals.
func TestQuotaExceededOverHTTP(t *testing.T) {
	node := newSingleNodeCluster(t, func(cfg *cluster.Config) { cfg.MaxLocks, cfg.MaxSessions = 1, cluster.Unlimited })
	n := newTestNodeOver(t, node, Config{}, nil)
	ctx := context.Background()

	_, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: "jobs/a", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	_, err = n.client.Acquire(ctx, lock.AcquireRequest{Key: "jobs/b", Owner: lock.NewOwner(), TTL: time.Minute})
	require.ErrorIs(t, err, lock.ErrQuotaExceeded)
	assert.Contains(t, err.Error(), "-max-locks")

	a := n.do(t, http.MethodPost, "/v1/acquire", `{"key":"jobs/b","ttl":"1m"}`)
	assert.Equal(t, http.StatusTooManyRequests, a.status, a.raw)
	assert.Equal(t, api.CodeQuotaExceeded, a.errorCode(), a.raw)
	assert.Contains(t, a.raw, "at most 1 locks (keys with a holder or waiters")

	st, err := n.client.Cluster(ctx)
	require.NoError(t, err)
	require.NotNil(t, st.Quotas)
	assert.Equal(t, api.Quotas{
		Locks:    api.Quota{Limit: 1, Used: 1, Refused: 2},
		Sessions: api.Quota{Limit: 0},
		Waiters:  api.Quota{Limit: cluster.DefaultMaxTotalWaiters},
	}, *st.Quotas)

	families := scrape(t, n)
	value := func(name, quota string) (float64, error) {
		m, err := sample(families, name, map[string]string{"quota": quota})
		if err != nil {
			return 0, err
		}
		if m.Counter != nil {
			return m.GetCounter().GetValue(), nil
		}
		return m.GetGauge().GetValue(), nil
	}
	for _, want := range []struct {
		name, quota string
		v           float64
	}{
		{"raftlock_quota_limit", "locks", 1},
		{"raftlock_quota_used", "locks", 1},
		{"raftlock_quota_refused_total", "locks", 2},
		{"raftlock_quota_limit", "waiters", cluster.DefaultMaxTotalWaiters},
		{"raftlock_quota_used", "sessions", 0},
	} {
		v, err := value(want.name, want.quota)
		if assert.NoError(t, err, "%s{quota=%q}", want.name, want.quota) {
			assert.Equal(t, want.v, v, "%s{quota=%q}", want.name, want.quota)
		}
	}
	_, err = value("raftlock_quota_limit", "sessions")
	assert.Error(t, err, "no limit sample for an unlimited quota")
}
