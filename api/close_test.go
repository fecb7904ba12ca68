package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// Close cancels a background Sync and waits for it: once Close returns, none
// runs and none starts.
func TestCloseStopsBackgroundSync(t *testing.T) {
	syncs := make(chan struct{}, 100)
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/cluster":
			syncs <- struct{}{}
			_ = json.NewEncoder(w).Encode(ClusterStatus{NodeID: "a", Role: RoleLeader, LeaderID: "a"})
		case "/v1/inspect":
			_ = json.NewEncoder(w).Encode(MakeKeyInfo("k", lock.KeyInfo{}))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(node.Close)

	c, err := NewClient(node.URL, ClientConfig{SyncInterval: time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for len(syncs) == 0 {
		require.True(t, time.Now().Before(deadline), "requests start a background Sync once SyncInterval has passed")
		_, err = c.Inspect(ctx, "k")
		require.NoError(t, err)
	}
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "a second Close is harmless")
	if assert.True(t, c.syncMu.TryLock(), "no background Sync runs after Close") {
		c.syncMu.Unlock()
	}
	_, err = c.Inspect(ctx, "k")
	assert.Error(t, err, "a request after Close is refused")
	if assert.True(t, c.syncMu.TryLock(), "a request after Close starts no Sync") {
		c.syncMu.Unlock()
	}
}
