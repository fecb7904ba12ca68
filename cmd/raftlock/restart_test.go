package main

import (
	"context"
	"errors"
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
	r, err := tryStartFixed(t, raftAddr, httpAddr, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryStartFixed is startFixed that returns an error instead of failing the
// test, errPortInUse when a port was taken.
func tryStartFixed(t *testing.T, raftAddr, httpAddr string, args ...string) (*restartable, error) {
	t.Helper()
	full := append([]string{"-bind", raftAddr}, args...)
	full = append(full, "-http", httpAddr)
	a, err := tryStartAgentEnv(t, nil, full...)
	if err != nil {
		return nil, err
	}
	return &restartable{agent: a, args: full}, nil
}

// again starts the agent anew with exactly the same command line, on the
// same ports: another test could take one in the moment after the stop,
// which nothing here can avoid.
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

// freePorts picks n 127.0.0.1 ports that were free a moment ago; only
// withFreshPorts uses it (an agent that needs no port named in advance
// binds port 0, and the test reads the port from its first line).
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

// portAttempts bounds how many sets of fresh ports withFreshPorts tries.
const portAttempts = 5

// withFreshPorts starts agents whose command lines name ports, their own
// or each other's, before they start: start starts them on n ports picked
// free, making fresh data dirs at each call, and returns the agents it
// started (also when it fails). A picked port is free only until the
// picker closes it: another test's agent or connection (tests and packages
// run in parallel) may take it before the agent binds it, and the agent
// exits saying so. Then the agents started are killed and start runs again
// on fresh ports, at most portAttempts times; any other failure fails the
// test.
func withFreshPorts[A interface{ kill(syscall.Signal) }](t *testing.T, n int, start func(ports []string) ([]A, error)) []A {
	t.Helper()
	for attempt := 1; ; attempt++ {
		started, err := start(freePorts(t, n))
		if err == nil {
			return started
		}
		for _, a := range started {
			a.kill(syscall.SIGKILL)
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			t.Fatalf("starting agents (attempt %d): %v", attempt, err)
		}
		t.Logf("a port was taken before its agent bound it (%v): starting the agents again on fresh ports", err)
	}
}

// withFreshPorts starts agents again on fresh ports when one it picked is
// taken before the agent binds it: here held from the start, -bind's at
// the first attempt, -http's at the second.
func TestWithFreshPortsRetriesATakenPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	var tried [][]string
	agents := withFreshPorts(t, 2, func(ports []string) ([]*restartable, error) {
		if len(tried) < 2 {
			ports[len(tried)] = held.Addr().String()
		}
		tried = append(tried, ports)
		r, err := tryStartFixed(t, ports[0], ports[1], "-node-id", "a", "-data-dir", t.TempDir(), "-bootstrap")
		if err != nil {
			return nil, err
		}
		return []*restartable{r}, nil
	})
	require.Len(t, tried, 3, "two retries")
	assert.Equal(t, tried[2][0], agents[0].raftAddr)
	assert.Equal(t, tried[2][1], agents[0].httpAddr)
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
	agents := withFreshPorts(t, 6, func(ports []string) (agents []*restartable, err error) {
		dir := t.TempDir()
		for i, id := range []string{"a", "b", "c"} {
			args := []string{"-node-id", id, "-data-dir", filepath.Join(dir, id)}
			if i == 0 {
				args = append(args, "-bootstrap")
			} else {
				args = append(args, "-join", ports[0])
			}
			r, err := tryStartFixed(t, ports[2*i], ports[2*i+1], append(args, extra...)...)
			if err != nil {
				return agents, err
			}
			agents = append(agents, r)
			if i == 0 {
				agents[0].waitLeader(t)
			}
		}
		return agents, nil
	})
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
	agents := withFreshPorts(t, 4, func(ports []string) (agents []*restartable, err error) {
		dir := t.TempDir()
		peers := fmt.Sprintf("a=%s,b=%s", ports[0], ports[2])
		common := append([]string{"-bootstrap", "-peers", peers}, extra...)
		for i, id := range []string{"a", "b"} {
			r, err := tryStartFixed(t, ports[2*i], ports[2*i+1], append([]string{"-node-id", id, "-data-dir", filepath.Join(dir, id)}, common...)...)
			if err != nil {
				return agents, err
			}
			agents = append(agents, r)
		}
		return agents, nil
	})
	a, b = agents[0], agents[1]
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
