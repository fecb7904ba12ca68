package cluster

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/transport"
)

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "n0", "/tmp/x", true
		return cfg
	}
	require.NoError(t, valid().Validate())
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"long id", func(c *Config) { c.NodeID = strings.Repeat("n", 256) }, "is longer than 255 bytes"},
		{"no id", func(c *Config) { c.NodeID = "" }, "NodeID is empty"},
		{"id with a path", func(c *Config) { c.NodeID = "a b/../x" }, `NodeID "a b/../x": has ' ': a node ID holds only letters, digits, '-', '_' and '.' (a node that already has this ID must leave`},
		{"id with a slash", func(c *Config) { c.NodeID = "a/b" }, `has '/'`},
		{"id dot", func(c *Config) { c.NodeID = "." }, `must not be "." or ".."`},
		{"id dot dot", func(c *Config) { c.NodeID = ".." }, `must not be "." or ".."`},
		{"id not ascii", func(c *Config) { c.NodeID = "nœud" }, `has 'œ'`},
		{"id control", func(c *Config) { c.NodeID = "n\n0" }, `has '\n'`},
		{"peer id", func(c *Config) { c.Peers = []Peer{{ID: "n0", Addr: "a:1"}, {ID: "n 1", Addr: "a:2"}} }, `Peers[1] "n 1": has ' '`},
		{"even voters", func(c *Config) { c.Voters = 2 }, "Voters must be odd, from 1 to 9"},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "DataDir is empty"},
		{"no bind addr", func(c *Config) { c.BindAddr = "" }, "BindAddr is empty"},
		{"bootstrap and join", func(c *Config) { c.Join = []string{"10.0.0.1:7000"} }, "Bootstrap and Join are exclusive"},
		{"peers without bootstrap", func(c *Config) {
			c.Bootstrap, c.Join = false, []string{"a:1"}
			c.Peers = []Peer{{ID: "n0", Addr: "a:2"}}
		}, "Peers is only used with Bootstrap"},
		{"peers without self", func(c *Config) { c.Peers = []Peer{{ID: "n1", Addr: "a:1"}} }, "Peers must include this node"},
		{"peer twice", func(c *Config) { c.Peers = []Peer{{ID: "n0", Addr: "a:1"}, {ID: "n0", Addr: "a:2"}} }, "Peers lists n0 twice"},
		{"peer without addr", func(c *Config) { c.Peers = []Peer{{ID: "n0"}} }, "has no Addr"},
		{"zero timing", func(c *Config) { c.HeartbeatTimeout = 0 }, "HeartbeatTimeout must be positive"},
		{"election below heartbeat", func(c *Config) { c.ElectionTimeout = c.HeartbeatTimeout / 2 }, "ElectionTimeout must be at least HeartbeatTimeout"},
		{"lease above heartbeat", func(c *Config) { c.LeaderLeaseTimeout = 2 * c.HeartbeatTimeout }, "LeaderLeaseTimeout must be at most HeartbeatTimeout"},
		{"tiny timing", func(c *Config) { c.CommitTimeout = time.Microsecond; c.HeartbeatTimeout = time.Millisecond }, "too low"},
		{"no request timeout", func(c *Config) { c.RequestTimeout = 0 }, "RequestTimeout must be positive"},
		{"no snapshot threshold", func(c *Config) { c.SnapshotThreshold = 0 }, "SnapshotThreshold"},
		{"no snapshots kept", func(c *Config) { c.SnapshotsRetained = 0 }, "SnapshotsRetained"},
		{"half tls", func(c *Config) { c.ServerTLS = nil; c.ClientTLS = &tls.Config{} }, "ServerTLS and ClientTLS"},
		{"empty join address", func(c *Config) { c.Bootstrap, c.Join = false, []string{""} }, "Join[0] is empty"},
		{"dead member before dead voter", func(c *Config) { c.DeadMemberTimeout = c.DeadVoterTimeout / 2 }, "DeadMemberTimeout must be at least DeadVoterTimeout"},
		{"tiny wal segments", func(c *Config) { c.WALSegmentSize = 100 }, "WALSegmentSize must be from 4 KiB to 1 GiB"},
		{"unknown log store", func(c *Config) { c.LogStore = "sqlite" }, `LogStore must be "wal" or "boltdb"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid()
			tc.change(&cfg)
			err := cfg.Validate()
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.ErrorContains(t, err, "cluster: invalid config: ")
			assert.ErrorContains(t, err, tc.want)
			// The field at fault is named apart, for programs that
			// report it in their own terms, like the agent's flags.
			var cerr *ConfigError
			require.ErrorAs(t, err, &cerr)
			assert.Contains(t, err.Error(), cerr.Field, "the message names the field at fault")
			described := cerr.Describe(func(field string) string { return "-" + strings.ToLower(field) })
			assert.Contains(t, described, "-"+strings.ToLower(cerr.Field), "Describe renames it")
			assert.NotContains(t, described, cerr.Field+" ", "and every mention of it")
		})
	}
}

// TestConfigErrorDescribe: Describe renames every field the problem
// mentions, and only fields; Error keeps the Go names and the Go-only hint.
// Node IDs as hosts, Consul and etcd name nodes pass, up to 255 bytes.
func TestConfigValidNodeIDs(t *testing.T) {
	for _, id := range []string{"n0", "dev", "web-1.prod.example.com", "raftlock_a", "A.B-c_9", "...", strings.Repeat("n", 255)} {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.Bootstrap = id, "/tmp/x", true
		assert.NoError(t, cfg.Validate(), id)
	}
}

func TestConfigErrorDescribe(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "n0", "/tmp/x", true
	cfg.ElectionTimeout = cfg.HeartbeatTimeout / 2
	var cerr *ConfigError
	require.ErrorAs(t, cfg.Validate(), &cerr)
	assert.Equal(t, "ElectionTimeout", cerr.Field)
	flags := map[string]string{"ElectionTimeout": "-raft-election", "HeartbeatTimeout": "-raft-heartbeat"}
	assert.Equal(t, "-raft-election must be at least -raft-heartbeat, got 250ms < 500ms", cerr.Describe(func(f string) string { return flags[f] }))
	assert.EqualError(t, cerr, "cluster: invalid config: ElectionTimeout must be at least HeartbeatTimeout, got 250ms < 500ms")

	cfg = DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "n0", "/tmp/x", true
	cfg.HeartbeatTimeout = 0
	require.ErrorAs(t, cfg.Validate(), &cerr)
	assert.Equal(t, "HeartbeatTimeout", cerr.Field)
	assert.EqualError(t, cerr, "cluster: invalid config: HeartbeatTimeout must be positive, got 0s (start from DefaultConfig)")
	assert.Equal(t, "-raft-heartbeat must be positive, got 0s", cerr.Describe(func(string) string { return "-raft-heartbeat" }))

	// A value that looks like a field reference is left alone.
	cfg = DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.Bootstrap = "n0", "/tmp/x", true
	cfg.LogStore = "{Voters}"
	require.ErrorAs(t, cfg.Validate(), &cerr)
	assert.Equal(t, `LOGSTORE must be "wal" or "boltdb" (or empty), got "{Voters}"`, cerr.Describe(func(string) string { return "LOGSTORE" }))
}

func TestNewOnFreshDataDirNeedsBootstrapOrJoin(t *testing.T) {
	cfg := testConfig(t, "n0")
	_, err := New(cfg)
	assert.ErrorIs(t, err, ErrInvalidConfig)
	var cerr *ConfigError
	require.ErrorAs(t, err, &cerr)
	assert.Equal(t, "Bootstrap", cerr.Field)
	assert.ErrorContains(t, err, "set Bootstrap or BootstrapExpect to start a new cluster, or Join or RetryJoin to join one")
}

// A restart needs neither Bootstrap nor Join, and Bootstrap on existing state
// is ignored rather than bootstrapping over it.
func TestRestartNeedsNoBootstrapAndNeverRebootstraps(t *testing.T) {
	c := newCluster(t, 1, nil)
	_, lease := acquire(t, c.nodes[0], "k", time.Hour)
	c.stop(0)

	cfg := c.cfgs[0] // Bootstrap still set
	n := startNode(t, cfg)
	c.nodes[0] = n
	c.waitLeader()
	info, err := n.Inspect(testCtx(t), "k")
	require.NoError(t, err)
	assert.Equal(t, lease.Token, info.Token)
}

func TestJoinFailsClearlyWhenNobodyAnswers(t *testing.T) {
	cfg := testConfig(t, "n1")
	cfg.RequestTimeout = 300 * time.Millisecond
	cfg.Join = []string{"127.0.0.1:1"}
	_, err := New(cfg)
	assert.ErrorIs(t, err, ErrJoin)
}

// TestJoinToAnHTTPServerFailsAtOnce: Join naming an HTTP server (an agent's
// API port instead of its raft port) fails with what was reached, without
// waiting out RequestTimeout.
func TestJoinToAnHTTPServerFailsAtOnce(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	cfg := testConfig(t, "n1")
	cfg.RequestTimeout = time.Minute
	cfg.Join = []string{srv.Listener.Addr().String()}
	done := make(chan error, 1)
	go func() {
		n, err := New(cfg)
		if err == nil {
			n.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrJoin)
		assert.ErrorIs(t, err, transport.ErrNotPeer)
		assert.ErrorContains(t, err, srv.Listener.Addr().String()+" answered HTTP")
	case <-time.After(30 * time.Second):
		t.Fatal("New went on joining an HTTP server")
	}
}
