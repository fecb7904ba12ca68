package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// restartable is an agent with the command line it was started with, so
// that it can be started again with the same one (on the same ports).
type restartable struct {
	*agent
	args []string
}

// startFixed starts an agent with args, on fixed raft and HTTP ports.
func startFixed(t *testing.T, raftAddr, httpAddr string, args ...string) *restartable {
	t.Helper()
	full := append([]string{"-bind", raftAddr}, args...)
	full = append(full, "-http", httpAddr)
	return &restartable{agent: startAgent(t, full...), args: full}
}

// again starts the agent anew with exactly the same command line.
func (r *restartable) again(t *testing.T) {
	t.Helper()
	r.agent = startAgent(t, r.args...)
}

// stop sends sig and waits for the agent to exit; it reports how long that took.
func (r *restartable) stop(sig syscall.Signal) time.Duration {
	start := time.Now()
	r.kill(sig)
	return time.Since(start)
}

func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var lns []net.Listener
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		require.NoError(t, ln.Close())
	}
	return addrs
}

// requireMembers waits until a's node reports exactly ids as voters and knows a leader.
func requireMembers(t *testing.T, a *agent, ids ...string) {
	t.Helper()
	c := a.client(t)
	var last []string
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := c.Cluster(ctx)
		if err != nil || st.LeaderID == "" {
			return false
		}
		last = nil
		for _, m := range st.Members {
			if m.Suffrage == api.SuffrageVoter {
				last = append(last, m.ID)
			}
		}
		sort.Strings(last)
		return len(st.Members) == len(ids) && strings.Join(last, ",") == strings.Join(ids, ",")
	}, 30*time.Second, 50*time.Millisecond, "voters %v (last seen %v)", ids, last)
}

// readme3 starts README's 3-node example: a with -bootstrap, b and c with
// -join a; extra goes to every agent.
func readme3(t *testing.T, extra ...string) []*restartable {
	t.Helper()
	dir := t.TempDir()
	ports := freePorts(t, 6)
	var agents []*restartable
	for i, id := range []string{"a", "b", "c"} {
		args := []string{"-node-id", id, "-data-dir", filepath.Join(dir, id)}
		if i == 0 {
			args = append(args, "-bootstrap")
		} else {
			args = append(args, "-join", ports[0])
		}
		agents = append(agents, startFixed(t, ports[2*i], ports[2*i+1], append(args, extra...)...))
		if i == 0 {
			agents[0].waitLeader(t)
		}
	}
	requireMembers(t, agents[0].agent, "a", "b", "c")
	return agents
}

// README's first node, stopped with SIGTERM and started again with the same
// command line, is the same voter with the same locks: by default it no
// longer leaves, and with -leave-on-terminate (the old default) it leaves
// and then asks to be added back. It used to answer 503 forever.
func TestReadmeFirstNodeRestartsWithSameCommandLine(t *testing.T) {
	for _, mode := range []struct {
		name  string
		extra []string
	}{{"default", nil}, {"leave-on-terminate", []string{"-leave-on-terminate"}}} {
		t.Run(mode.name, func(t *testing.T) {
			agents := readme3(t, mode.extra...)
			lease, err := agents[1].client(t).Acquire(context.Background(), lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Hour})
			require.NoError(t, err)

			agents[0].stop(syscall.SIGTERM)
			if mode.extra != nil {
				requireMembers(t, agents[1].agent, "b", "c")
			}
			agents[0].again(t)
			requireMembers(t, agents[0].agent, "a", "b", "c")
			requireMembers(t, agents[1].agent, "a", "b", "c")
			info, err := agents[0].client(t).Inspect(context.Background(), "k")
			require.NoError(t, err)
			assert.True(t, info.Locked)
			assert.Equal(t, lease.Token, info.Token)
		})
	}
}

// `raftlock leave` takes a member out for good: the agent exits 0 and the
// others no longer count it.
func TestLeaveCommand(t *testing.T) {
	agents := readme3(t)
	out, stderr, code := cli(t, agents[2].agent, "leave")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "left the cluster")
	select {
	case <-agents[2].done:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop after leaving")
	}
	assert.Zero(t, agents[2].cmd.ProcessState.ExitCode())
	requireMembers(t, agents[0].agent, "a", "b")

	_, stderr, code = runBinary(t, nil, "leave", "-addr", agents[0].httpURL+","+agents[1].httpURL)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "exactly the one")
}

// twoAgents bootstraps a and b together with -peers; extra goes to both.
func twoAgents(t *testing.T, extra ...string) (a, b *restartable) {
	t.Helper()
	dir := t.TempDir()
	ports := freePorts(t, 4)
	peers := fmt.Sprintf("a=%s,b=%s", ports[0], ports[2])
	common := append([]string{"-bootstrap", "-peers", peers}, extra...)
	a = startFixed(t, ports[0], ports[1], append([]string{"-node-id", "a", "-data-dir", filepath.Join(dir, "a")}, common...)...)
	b = startFixed(t, ports[2], ports[3], append([]string{"-node-id", "b", "-data-dir", filepath.Join(dir, "b")}, common...)...)
	requireMembers(t, a.agent, "a", "b")
	return a, b
}

// A node that lost its leader stops promptly on SIGTERM, even with a
// request in flight that cannot finish and a long grace, and starts again
// at once on the same ports. It used to take the whole grace.
func TestLeaderlessAgentStopsPromptly(t *testing.T) {
	for _, mode := range []struct {
		name  string
		extra []string
	}{{"default", nil}, {"leave-on-terminate", []string{"-leave-on-terminate"}}} {
		t.Run(mode.name, func(t *testing.T) {
			const grace = 40 * time.Second
			a, b := twoAgents(t, append([]string{"-shutdown-grace", grace.String(), "-request-timeout", "1m"}, mode.extra...)...)
			b.stop(syscall.SIGKILL)
			c := a.client(t)
			require.Eventually(t, func() bool {
				h, err := c.Health(context.Background())
				return err == nil && !h.Ready
			}, 30*time.Second, 20*time.Millisecond, "a sees no leader")

			inFlight := make(chan error, 1)
			go func() {
				_, err := c.Acquire(context.Background(), lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: 30 * time.Second})
				inFlight <- err
			}()
			require.Eventually(t, func() bool {
				return strings.Contains(metrics(t, a.agent), "raftlock_api_waiting_requests 1")
			}, 10*time.Second, 10*time.Millisecond, "the acquire is in flight")

			took := a.stop(syscall.SIGTERM)
			assert.Less(t, took, grace/4, "the stop did not wait out the grace; logs:\n%s", a.logs.String())
			select {
			case err := <-inFlight:
				assert.Error(t, err, "the request in flight was answered, not granted")
			case <-time.After(30 * time.Second):
				t.Fatal("the request in flight was never answered")
			}

			a.again(t) // same ports, at once
			b.again(t)
			requireMembers(t, a.agent, "a", "b")
		})
	}
}

// After the lease is lost (here: the agent lost its leader), `raftlock lock`
// stops COMMAND and exits right after it, not a request timeout later.
func TestLockCommandExitsSoonAfterCommandWhenLeaseLost(t *testing.T) {
	a, b := twoAgents(t, "-request-timeout", "1m")
	dir := t.TempDir()
	started, stopped := filepath.Join(dir, "started"), filepath.Join(dir, "stopped")
	cmd := exec.Command(binary, "lock", "-addr", a.httpURL, "-ttl", "2s", "-kill-after", "5s", "k", "--",
		"sh", "-c", fmt.Sprintf(`trap 'touch %s; exit 3' TERM; touch %s; while :; do sleep 0.05; done`, stopped, started))
	var stderr syncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, 20*time.Second, 10*time.Millisecond)

	b.stop(syscall.SIGKILL) // a keeps answering, but can no longer extend or release
	require.Eventually(t, func() bool { _, err := os.Stat(stopped); return err == nil }, 30*time.Second, 10*time.Millisecond, "the command was stopped")
	childStopped := time.Now()
	var err error
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		t.Fatal("raftlock lock did not exit")
	}
	assert.Less(t, time.Since(childStopped), 8*time.Second, "exit is not held for a request timeout; stderr: %s", stderr.String())
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitLost, ee.ExitCode(), "stderr: %s", stderr.String())
	assert.Contains(t, stderr.String(), "lost the lock")
	assert.Contains(t, stderr.String(), "could not release")
}

// metrics is the agent's /metrics page.
func metrics(t *testing.T, a *agent) string {
	t.Helper()
	resp, err := http.Get(a.httpURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}
