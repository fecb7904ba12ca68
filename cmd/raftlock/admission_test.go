package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// The report: the agent of a one-member cluster Y, stopped and started
// again on its data dir with -retry-join at cluster Z's gossip address, was
// added to Z, which replaced Y's log: y/precious was gone and Y served Z's
// locks. Neither cluster takes the other in, both say why, and Y keeps its
// lock.
func TestAgentRetryJoinIntoAnotherClusterKeepsItsData(t *testing.T) {
	dir := t.TempDir()
	var z *agent
	var y *restartable
	withFreshPorts(t, 3, func(ports []string) (started []*restartable, err error) {
		z, err = tryStartAgentEnv(t, nil, "-node-id", "z", "-data-dir", filepath.Join(dir, "z"), "-bind", "127.0.0.1:0", "-bootstrap", "-gossip-bind", ports[0])
		if err != nil {
			return nil, err
		}
		started = append(started, &restartable{agent: z})
		y, err = tryStartFixed(t, ports[1], ports[2], "-node-id", "y", "-data-dir", filepath.Join(dir, "y"), "-bootstrap")
		if err != nil {
			return started, err
		}
		y.args = append(y.args, "-retry-join", ports[0], "-gossip-bind", "127.0.0.1:0")
		return append(started, y), nil
	})
	z.waitLeader(t)
	y.waitLeader(t)
	ctx := context.Background()
	lease, err := y.client(t).Acquire(ctx, lock.AcquireRequest{Key: "y/precious", Owner: lock.NewOwner(), TTL: 24 * time.Hour})
	require.NoError(t, err)
	y.stop(syscall.SIGTERM)

	y.again(t) // now with -retry-join at z
	require.Eventually(t, func() bool {
		return strings.Contains(y.logs.String(), "belongs to another raft cluster") && strings.Contains(z.logs.String(), "belongs to another raft cluster")
	}, 60*time.Second, 50*time.Millisecond, "no refusal on both sides")
	y.waitLeader(t)
	info, err := y.client(t).Inspect(ctx, "y/precious")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, lease.Token, info.Token)
	h, err := y.client(t).Health(ctx)
	require.NoError(t, err)
	assert.Equal(t, "y", h.LeaderID)
	st, err := z.client(t).Cluster(ctx)
	require.NoError(t, err)
	assert.Equal(t, "z=voter/alive", members(st))
}

// The report, without gossip: a second process started as -node-id x2 on an
// empty data dir with -join x1, while the real x2 ran, made the leader
// remove x2 (in a 2-member cluster: the quorum). It is refused with the
// live member's address and exits; x2 keeps serving.
func TestAgentDuplicateNodeIDIsRefused(t *testing.T) {
	dir := t.TempDir()
	x1 := startAgent(t, "-node-id", "x1", "-data-dir", filepath.Join(dir, "x1"), "-bind", "127.0.0.1:0", "-bootstrap")
	x1.waitLeader(t)
	x2 := startAgent(t, "-node-id", "x2", "-data-dir", filepath.Join(dir, "x2"), "-bind", "127.0.0.1:0", "-join", x1.raftAddr)
	x2.waitLeader(t)

	// Bounded: the old agent joined and served.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errOut bytes.Buffer
	dup := exec.CommandContext(ctx, binary, "agent", "-node-id", "x2", "-data-dir", filepath.Join(dir, "dup"), "-bind", "127.0.0.1:0",
		"-http", "127.0.0.1:0", "-join", x1.raftAddr, "-request-timeout", "2s")
	dup.Stderr = &errOut
	err := dup.Run()
	require.NoError(t, ctx.Err(), "the duplicate x2 ran as a member; stderr:\n%s", &errOut)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "stderr:\n%s", &errOut)
	assert.Contains(t, errOut.String(), "in use by a live member at "+x2.raftAddr)

	h, err := x2.client(t).Health(context.Background())
	require.NoError(t, err)
	assert.True(t, h.Ready)
	assert.Equal(t, "x1", h.LeaderID)
	_, err = x2.client(t).Acquire(context.Background(), lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute})
	assert.NoError(t, err)
	st, err := x1.client(t).Cluster(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "x1=voter/ x2=voter/", members(st))
}
