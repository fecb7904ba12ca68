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
	stderr, _ := runRefusedAgent(t, 60*time.Second, "the duplicate x2 ran as a member",
		"-node-id", "x2", "-data-dir", filepath.Join(dir, "dup"), "-bind", "127.0.0.1:0",
		"-http", "127.0.0.1:0", "-join", x1.raftAddr, "-request-timeout", "2s")
	assert.Contains(t, stderr, "in use by a live member at "+x2.raftAddr)

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

// A data dir remembers whose it is: agent c's directory, started as x,
// is refused at once with a one-line usage error that names the flags to
// fix, and c starts on it again.
func TestAgentRefusesAnotherNodesDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	c := startAgent(t, "-node-id", "c", "-data-dir", dir, "-bind", "127.0.0.1:0", "-bootstrap")
	c.waitLeader(t)
	c.kill(syscall.SIGKILL)

	// Bounded: the old agent started as x, serving, instead of exiting.
	stderr, code := runRefusedAgent(t, 30*time.Second, "x started on c's data dir",
		"-node-id", "x", "-data-dir", dir, "-bind", "127.0.0.1:0", "-http", "127.0.0.1:0", "-bootstrap")
	assert.Equal(t, exitUsage, code, "stderr: %s", stderr)
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)
	assert.Contains(t, stderr, `belongs to node "c"`)
	assert.Contains(t, stderr, "-node-id c")
	assert.Contains(t, stderr, "-data-dir")

	again := startAgent(t, "-node-id", "c", "-data-dir", dir, "-bind", "127.0.0.1:0")
	again.waitLeader(t)
}

// runRefusedAgent runs an agent with args that must refuse to run: it must
// exit by itself, with an error status, within timeout (else the test
// fails, saying what), and returns its stderr and exit status.
func runRefusedAgent(t *testing.T, timeout time.Duration, what string, args ...string) (stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, append([]string{"agent"}, args...)...)
	cmd.Stderr = &errOut
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "%s; stderr:\n%s", what, &errOut)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "stderr:\n%s", &errOut)
	return errOut.String(), exit.ExitCode()
}
