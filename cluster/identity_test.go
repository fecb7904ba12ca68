package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/internal/membership"
)

// readIdentityFile reads the identity file of a data dir.
func readIdentityFile(t *testing.T, dir string) identity {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, identityFileName))
	require.NoError(t, err)
	var id identity
	require.NoError(t, json.Unmarshal(b, &id), "%s", b)
	return id
}

// The report: with c stopped, a node started as x on c's data dir (and
// address) was replicated to as member c. The data dir now says whose it
// is, and New refuses another ID before raft touches anything; c itself
// comes back on it.
func TestDataDirRefusesAnotherNodeID(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	_, lease := acquire(t, c.leader(), "k", time.Minute)
	f := c.follower()
	i := c.index(f)
	c.stop(i)

	cfg := c.cfgs[i]
	cfg.NodeID = "x"
	cfg.Bootstrap, cfg.Join = false, nil
	n, err := New(cfg)
	if n != nil {
		n.Close()
	}
	require.Error(t, err, "x started on %s's data dir", c.cfgs[i].NodeID)
	assert.ErrorIs(t, err, ErrWrongNode)
	assert.ErrorIs(t, err, ErrInvalidConfig)
	for _, want := range []string{cfg.DataDir, `node "` + c.cfgs[i].NodeID + `"`, "-node-id " + c.cfgs[i].NodeID, "NodeID", "empty DataDir"} {
		assert.Contains(t, err.Error(), want)
	}

	// With Join, too (a fresh-looking start) it is refused the same way.
	cfg.Join = []string{c.leader().Addr()}
	_, err = New(cfg)
	assert.ErrorIs(t, err, ErrWrongNode)

	back := c.restart(i)
	info, err := back.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, lease.Token, info.Token)
	assert.Equal(t, c.cfgs[i].NodeID, readIdentityFile(t, c.cfgs[i].DataDir).NodeID)
}

// Every way a data dir gets a cluster: a bootstrap draws one, a node that
// joins learns its leader's, and nodes bootstrapped together from the same
// Peers agree on one without talking.
func TestClusterIDRecordedAtBootstrapAndJoin(t *testing.T) {
	c := newCluster(t, 2, nil)
	first := readIdentityFile(t, c.cfgs[0].DataDir)
	assert.Equal(t, "n0", first.NodeID)
	assert.Len(t, first.ClusterID, 32)
	joined := readIdentityFile(t, c.cfgs[1].DataDir)
	assert.Equal(t, identity{NodeID: "n1", ClusterID: first.ClusterID}, joined)

	other := newCluster(t, 1, nil)
	assert.NotEqual(t, first.ClusterID, readIdentityFile(t, other.cfgs[0].DataDir).ClusterID)

	peers := []Peer{{ID: "a", Addr: "10.0.0.1:7400"}, {ID: "b", Addr: "10.0.0.2:7400"}, {ID: "c", Addr: "10.0.0.3:7400"}}
	id1, err := membership.NewClusterID(peerServers(peers))
	require.NoError(t, err)
	id2, err := membership.NewClusterID(peerServers([]Peer{peers[2], peers[0], peers[1]}))
	require.NoError(t, err)
	assert.Equal(t, id1, id2, "the same Peers in another order")
	peers[2].Addr = "10.0.0.4:7400"
	id3, err := membership.NewClusterID(peerServers(peers))
	require.NoError(t, err)
	assert.NotEqual(t, id1, id3, "other Peers")
}

// A member of cluster A restarted with Join pointing at cluster B is
// refused: B's member tells its cluster, the node stops asking, both sides
// log why, and B's configuration never gains it. A node whose data dir
// belongs to A but holds no raft state (a fresh start) gets the refusal
// from New.
func TestJoinAnotherClusterRefused(t *testing.T) {
	a := newCluster(t, 2, nil)
	bLogs := &lockedBuffer{}
	b := newCluster(t, 1, func(cfg *Config) {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.NodeID, Output: bLogs, Level: hclog.Warn})
	})
	bLeader := b.leader()
	aID := readIdentityFile(t, a.cfgs[1].DataDir).ClusterID
	bID := readIdentityFile(t, b.cfgs[0].DataDir).ClusterID
	require.NotEqual(t, aID, bID)

	// A member with raft state: New returns (the rejoin runs in the
	// background), and the rejoin gives up with the reason. A's other member
	// is down too: with it up, the rejoin (which asks the members of the
	// node's own last configuration first) would find its own cluster.
	a.stop(1)
	a.stop(0)
	cfg := a.cfgs[1]
	cfg.Join = []string{bLeader.Addr()}
	logs := &lockedBuffer{}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.NodeID, Output: logs, Level: hclog.Warn})
	moved := startNode(t, cfg)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "belongs to cluster "+aID) },
		patience, 5*time.Millisecond, "no refusal logged; logs:\n%s", logs.String())
	assert.Contains(t, logs.String(), bID)
	require.Eventually(t, func() bool { return strings.Contains(bLogs.String(), "another cluster") },
		patience, 5*time.Millisecond, "B logs nothing; logs:\n%s", bLogs.String())
	requireServers(t, bLeader, "n0")
	assert.Equal(t, aID, readIdentityFile(t, cfg.DataDir).ClusterID, "the data dir still belongs to A")
	require.NoError(t, moved.Close())

	// A data dir of A with no raft state left (the operator removed it but
	// kept the identity file), joining B: New fails.
	fresh := testConfig(t, "n1")
	require.NoError(t, writeIdentity(fresh.DataDir, identity{NodeID: "n1", ClusterID: aID}))
	fresh.Join = []string{bLeader.Addr()}
	n, err := New(fresh)
	if n != nil {
		n.Close()
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrJoin)
	assert.ErrorIs(t, err, ErrWrongCluster)
	for _, want := range []string{aID, bID, bLeader.Addr(), "Join", "-join", "empty DataDir"} {
		assert.Contains(t, err.Error(), want)
	}
	requireServers(t, bLeader, "n0")
}

// A data dir made before identity files existed (raft state, no file) is
// not refused: the configured ID is adopted and recorded, and the cluster ID
// is learned from the member that adds it at its next join. From then on
// another ID is refused. A fresh data dir that New fails on keeps no file.
func TestDataDirOfEarlierVersionAdoptsIdentity(t *testing.T) {
	c := newCluster(t, 2, nil)
	clusterID := readIdentityFile(t, c.cfgs[0].DataDir).ClusterID
	c.stop(1)
	dir := c.cfgs[1].DataDir
	require.NoError(t, os.Remove(filepath.Join(dir, identityFileName)))

	cfg := c.cfgs[1]
	cfg.Join = []string{c.nodes[0].Addr()}
	adopted := startNode(t, cfg)
	assert.Equal(t, "n1", readIdentityFile(t, dir).NodeID)
	require.Eventually(t, func() bool { return readIdentityFile(t, dir).ClusterID == clusterID },
		patience, 5*time.Millisecond, "the cluster ID is not learned")
	require.NoError(t, adopted.Close())
	cfg.NodeID = "x"
	_, err := New(cfg)
	assert.ErrorIs(t, err, ErrWrongNode)

	failing := testConfig(t, "n9")
	failing.Join = []string{"127.0.0.1:1"}
	failing.RequestTimeout = 100 * time.Millisecond
	_, err = New(failing)
	require.ErrorIs(t, err, ErrJoin)
	_, err = os.Stat(filepath.Join(failing.DataDir, identityFileName))
	assert.ErrorIs(t, err, os.ErrNotExist, "a failed first start leaves the data dir to anyone")
}

// A damaged identity file is reported, not silently replaced.
func TestDamagedIdentityFileRefused(t *testing.T) {
	cfg := testConfig(t, "n0")
	cfg.Bootstrap = true
	require.NoError(t, os.WriteFile(filepath.Join(cfg.DataDir, identityFileName), []byte("{not json"), 0o600))
	_, err := New(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "damaged")
	assert.Contains(t, err.Error(), identityFileName)
}

// lockedBuffer is a log sink that tests read while nodes write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Nodes bootstrapped together from the same Peers record the same cluster
// ID without talking, and a node that joins them later learns it.
func TestPeersBootstrapShareClusterID(t *testing.T) {
	var peers []Peer
	c := &testCluster{t: t}
	for i := range 3 {
		cfg := testConfig(t, fmt.Sprintf("p%d", i))
		holdBindAddr(t, &cfg)
		cfg.Bootstrap = true
		c.cfgs = append(c.cfgs, cfg)
		peers = append(peers, Peer{ID: cfg.NodeID, Addr: cfg.BindAddr})
	}
	for i := range c.cfgs {
		c.cfgs[i].Peers = peers
		c.nodes = append(c.nodes, startNode(t, c.cfgs[i]))
	}
	leader := c.waitLeader()
	want, err := membership.NewClusterID(peerServers(peers))
	require.NoError(t, err)
	for _, cfg := range c.cfgs {
		assert.Equal(t, identity{NodeID: cfg.NodeID, ClusterID: want}, readIdentityFile(t, cfg.DataDir))
	}
	late := testConfig(t, "p3")
	late.Join = []string{leader.Addr()}
	startNode(t, late)
	assert.Equal(t, identity{NodeID: "p3", ClusterID: want}, readIdentityFile(t, late.DataDir))
}
