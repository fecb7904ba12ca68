package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// TestAgentsBootstrapExpectAndRetryJoin is the operator's way: three agents
// with the same -bootstrap-expect 3 -retry-join list (only names and ports
// differ) elect a leader and list three voters, alive in gossip; a fourth
// joins as a non-voter by -retry-join alone.
func TestAgentsBootstrapExpectAndRetryJoin(t *testing.T) {
	agents, join := startGossipCluster(t, "a", "b", "c")
	agents = append(agents, startAgent(t, "-node-id", "d", "-data-dir", t.TempDir(), "-bind", "127.0.0.1:0",
		"-gossip-bind", "127.0.0.1:0", "-retry-join", join))
	want := "a=voter/alive b=voter/alive c=voter/alive d=nonvoter/alive"
	for _, a := range agents {
		var got string
		require.Eventually(t, func() bool {
			st, err := a.client(t).Cluster(context.Background())
			if err != nil {
				return false
			}
			got = members(st)
			return got == want && st.GossipMembers[api.GossipAlive] == 4
		}, 60*time.Second, 50*time.Millisecond, "members: %s", &got)
	}
	out, stderr, code := cli(t, agents[3], "status")
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `(?m)^d\s+\S+\s+nonvoter\s+follower\s+alive\s+http://`, out)
}

// startGossipCluster starts a member of each of ids, on fresh gossip ports,
// with -bootstrap-expect their count and -retry-join all their gossip
// addresses (join), and waits until each knows a leader.
func startGossipCluster(t *testing.T, ids ...string) (agents []*agent, join string) {
	t.Helper()
	agents = withFreshPorts(t, len(ids), func(gossip []string) (agents []*agent, err error) {
		dir := t.TempDir()
		join = strings.Join(gossip, ",")
		for i, id := range ids {
			a, err := tryStartAgentEnv(t, nil, "-node-id", id, "-data-dir", filepath.Join(dir, id), "-bind", "127.0.0.1:0",
				"-gossip-bind", gossip[i], "-bootstrap-expect", strconv.Itoa(len(ids)), "-retry-join", join)
			if err != nil {
				return agents, err
			}
			agents = append(agents, a)
		}
		return agents, nil
	})
	for _, a := range agents {
		a.waitLeader(t)
	}
	return agents, join
}

func members(st api.ClusterStatus) string {
	var parts []string
	for _, m := range st.Members {
		parts = append(parts, fmt.Sprintf("%s=%s/%s", m.ID, m.Suffrage, m.Gossip))
	}
	return strings.Join(parts, " ")
}

// TestAgentGossipKeyFileErrorsNameTheFile: a bad key file is a usage error
// that says which line and how to make a key.
func TestAgentGossipKeyFileErrorsNameTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(path, []byte("# comment\nnot-base64!\n"), 0o600))
	_, stderr, code := runBinary(t, nil, "agent", "-node-id", "a", "-data-dir", t.TempDir(), "-bind", "127.0.0.1:0", "-http", "127.0.0.1:0",
		"-bootstrap", "-gossip-bind", "127.0.0.1:0", "-gossip-key-file", path)
	assert.Equal(t, exitUsage, code, stderr)
	assert.Contains(t, stderr, "-gossip-key-file "+path+", line 2: not base64")
}

// TestAgentsBootstrapExpectRestartAll: three agents formed with
// -bootstrap-expect, all stopped and started again with the same command
// lines, are the same cluster: the lock taken before is still held with its
// token, and the token counter goes on.
func TestAgentsBootstrapExpectRestartAll(t *testing.T) {
	nodes := withFreshPorts(t, 9, func(ports []string) (nodes []*restartable, err error) {
		dir := t.TempDir()
		join := strings.Join(ports[6:9], ",")
		for i, id := range []string{"a", "b", "c"} {
			n, err := tryStartFixed(t, ports[i], ports[3+i], "-node-id", id, "-data-dir", filepath.Join(dir, id),
				"-gossip-bind", ports[6+i], "-bootstrap-expect", "3", "-retry-join", join)
			if err != nil {
				return nodes, err
			}
			nodes = append(nodes, n)
		}
		return nodes, nil
	})
	for _, n := range nodes {
		n.waitLeader(t)
	}
	ctx := context.Background()
	lease, err := nodes[0].client(t).Acquire(ctx, lock.AcquireRequest{Key: "kept", Owner: lock.NewOwner(), TTL: time.Hour})
	require.NoError(t, err)
	for _, n := range nodes {
		n.stop(syscall.SIGTERM)
	}
	for _, n := range nodes {
		n.again(t)
	}
	for _, n := range nodes {
		n.waitLeader(t)
	}
	info, err := nodes[2].client(t).Inspect(ctx, "kept")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, lease.Token, info.Token)
	next, err := nodes[1].client(t).Acquire(ctx, lock.AcquireRequest{Key: "new", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	assert.Greater(t, next.Token, lease.Token)
	st, err := nodes[0].client(t).Cluster(ctx)
	require.NoError(t, err)
	assert.Len(t, st.Members, 3)
}
