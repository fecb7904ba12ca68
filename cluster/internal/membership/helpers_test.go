package membership

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/datadir"
	"github.com/raftlock/raftlock/internal/quietlog"
)

// A node's data dir for startGossip: bootstrapped names a cluster, fresh
// names none yet.
const (
	bootstrapped = true
	fresh        = false
)

// startGossip starts a Manager's gossip alone, without raft or a node
// around it (nothing it does here asks either), on 127.0.0.1 at a port
// of the system's choice; cfg gives the settings a test cares about.
func startGossip(t *testing.T, cfg Config, inCluster bool) *Manager {
	t.Helper()
	cfg.DataDir = t.TempDir()
	ident, _, err := datadir.OpenIdentity(cfg.DataDir, cfg.NodeID)
	require.NoError(t, err)
	clusterID := ""
	if inCluster {
		clusterID, err = NewClusterID(nil)
		require.NoError(t, err)
	}
	require.NoError(t, ident.Save(clusterID))
	if cfg.ClusterName == "" {
		cfg.ClusterName = "raftlock"
	}
	cfg.Addr = "127.0.0.1:1"
	cfg.GossipBindAddr = "127.0.0.1:0"
	cfg.Ident = ident
	cfg.Log = hclog.NewNullLogger()
	cfg.Quiet = quietlog.New(quietlog.DefaultWindow, nil)
	start := time.Now()
	cfg.Monotonic = func() time.Duration { return time.Since(start) }
	closing := make(chan struct{})
	var wg sync.WaitGroup
	cfg.Closing, cfg.WG = closing, &wg
	mgr := New(cfg, nil)
	require.NoError(t, mgr.startGossip(!inCluster))
	t.Cleanup(func() {
		close(closing)
		mgr.StopGossip(false)
		wg.Wait()
		cfg.Quiet.Close()
	})
	return mgr
}
