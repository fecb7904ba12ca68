package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// binary is the raftlock binary built once for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "raftlock-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "raftlock")
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building raftlock:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	// A race-enabled binary sleeps a second before exiting (GORACE's
	// atexit_sleep_ms, so that reports from other threads get out): a
	// second per CLI run here. A shorter pause still lets a report out;
	// one makes the child exit with status 66, which fails the test.
	if gorace := os.Getenv("GORACE"); !strings.Contains(gorace, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(gorace+" atexit_sleep_ms=100"))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// agent is a running `raftlock agent` process.
type agent struct {
	cmd      *exec.Cmd
	raftAddr string
	httpAddr string // host:port
	httpURL  string // scheme://host:port
	logs     *syncBuffer
	done     chan struct{}

	// How clients reach it, when it asks for TLS or a token: the Go
	// client's config, and the CLI's flags.
	clientConfig api.ClientConfig
	cliArgs      []string
}

var listening = regexp.MustCompile(`raftlock agent (\S+): raft on (\S+), HTTP API on (https?://(\S+)), data in`)

// startAgent runs `raftlock agent ARGS...` and waits for its "listening" line.
func startAgent(t *testing.T, args ...string) *agent {
	t.Helper()
	return startAgentEnv(t, nil, args...)
}

// startAgentEnv is startAgent with env (NAME=value) added to the agent's environment.
func startAgentEnv(t *testing.T, env []string, args ...string) *agent {
	t.Helper()
	a, err := tryStartAgentEnv(t, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// errPortInUse is an agent that exited at start because a port on its
// command line was taken.
var errPortInUse = errors.New("a port on the agent's command line is in use")

// portInUse says whether an agent's logs say it could not bind a port
// because something holds it: -http's and gossip's bind errors, or the
// agent's own message for -bind's.
func portInUse(logs string) bool {
	return strings.Contains(logs, "address already in use") || strings.Contains(logs, "the port is in use")
}

// tryStartAgentEnv is startAgentEnv that returns an error instead of
// failing the test, errPortInUse when the agent exited because a port was
// taken (see withFreshPorts).
func tryStartAgentEnv(t *testing.T, env []string, args ...string) (*agent, error) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"agent", "-log-level", "warn", "-http", "127.0.0.1:0"}, args...)...)
	// The agent's temporary files (a -dev agent's data dir) go in the
	// test's own directory: the SIGKILL that ends the agent leaves them
	// behind, and the test's cleanup removes them after it.
	cmd.Env = append(append(os.Environ(), "TMPDIR="+t.TempDir()), env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	a := &agent{cmd: cmd, logs: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = a.logs
	require.NoError(t, cmd.Start())
	go func() { cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		a.kill(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("agent %s logs:\n%s", a.raftAddr, a.logs.String())
		}
	})

	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		if !ok { // it exited before saying where it listens
			<-a.done // its logs are complete
			if logs := a.logs.String(); portInUse(logs) {
				return nil, fmt.Errorf("%w: %s", errPortInUse, strings.TrimSpace(logs))
			}
			return nil, fmt.Errorf("agent exited at start; logs:\n%s", a.logs.String())
		}
		m := listening.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("unexpected first line %q", line)
		}
		a.raftAddr, a.httpURL, a.httpAddr = m[2], m[3], m[4]
		go func() {
			for range lines {
			}
		}()
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("agent did not start; logs:\n%s", a.logs.String())
	}
	return a, nil
}

func (a *agent) kill(sig syscall.Signal) {
	_ = a.cmd.Process.Signal(sig)
	<-a.done
}

func (a *agent) client(t *testing.T) *api.Client {
	c, err := api.NewClient(a.httpURL, a.clientConfig)
	require.NoError(t, err)
	return c
}

// waitLeader waits until the agent's node knows a leader.
func (a *agent) waitLeader(t *testing.T) {
	t.Helper()
	c := a.client(t)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		h, err := c.Health(ctx)
		return err == nil && h.LeaderID != ""
	}, 20*time.Second, 20*time.Millisecond)
}

// cli runs a client subcommand of the binary against the agent.
func cli(t *testing.T, a *agent, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	full := append([]string{args[0], "-addr", a.httpURL}, a.cliArgs...)
	return runBinary(t, nil, append(full, args[1:]...)...)
}

// runBinary runs the binary with args, env (NAME=value) added to its environment.
func runBinary(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errOut.String(), ee.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errOut.String(), 0
}

func TestLockCommandExcludesAndWaits(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)
	dir := t.TempDir()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")

	// The first holder runs until told to stop, so the test decides when the
	// lock is free. It writes the token aside and renames it into place, so
	// that started, once there, holds the whole token.
	first := exec.Command(binary, "lock", "-addr", a.httpAddr, "job", "--", "sh", "-c",
		fmt.Sprintf(`echo "$RAFTLOCK_TOKEN" > %s.tmp && mv %s.tmp %s; while [ ! -f %s ]; do sleep 0.01; done; exit 3`, started, started, started, release))
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	require.NoError(t, first.Start())
	t.Cleanup(func() { first.Process.Kill() })
	require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, 20*time.Second, 10*time.Millisecond)
	tokenText, err := os.ReadFile(started)
	require.NoError(t, err)
	assert.Regexp(t, `^[1-9][0-9]*\n$`, string(tokenText), "RAFTLOCK_TOKEN holds the fencing token")

	// Without -wait, a second lock on the key fails at once with the distinct status.
	_, stderr, code := cli(t, a, "lock", "job", "--", "echo", "should not run")
	assert.Equal(t, exitHeld, code)
	assert.Contains(t, stderr, `"job" is held by another owner`)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)

	// With -wait, it runs after the first finishes; the first's exit status is its command's.
	waiter := exec.Command(binary, "lock", "-addr", a.httpAddr, "-wait", "30s", "job", "--", "sh", "-c", `echo "ran with $RAFTLOCK_TOKEN"`)
	var waiterOut bytes.Buffer
	waiter.Stdout = &waiterOut
	require.NoError(t, waiter.Start())
	c := a.client(t)
	require.Eventually(t, func() bool {
		info, err := c.Inspect(context.Background(), "job")
		return err == nil && info.Waiters == 1
	}, 20*time.Second, 10*time.Millisecond, "the second lock queues")
	require.NoError(t, os.WriteFile(release, nil, 0o600))

	err = first.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 3, ee.ExitCode(), "raftlock lock exits with its command's status")
	require.NoError(t, waiter.Wait())
	var firstToken, secondToken uint64
	fmt.Sscan(string(tokenText), &firstToken)
	_, err = fmt.Sscanf(waiterOut.String(), "ran with %d", &secondToken)
	require.NoError(t, err)
	assert.Greater(t, secondToken, firstToken, "the next holder's fencing token is higher")

	info, err := c.Inspect(context.Background(), "job")
	require.NoError(t, err)
	assert.False(t, info.Locked, "both commands released the lock")
}

// raftlock lock -n N takes a semaphore's slot, -shared and -write a
// read/write lock; raftlock locks shows the kind and the holders; another
// kind fails with a message saying what the key is.
func TestLockCommandKinds(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)
	c := a.client(t)
	ctx := context.Background()
	slot := lock.AcquireRequest{Key: "pool", Owner: lock.NewOwner(), TTL: time.Minute, Kind: lock.KindSemaphore, Limit: 2, Metadata: "pid=1"}
	_, err := c.Acquire(ctx, slot)
	require.NoError(t, err)

	out, stderr, code := cli(t, a, "lock", "-n", "2", "pool", "--", "sh", "-c", `echo "slot $RAFTLOCK_TOKEN"`)
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `^slot [1-9][0-9]*\n$`, out, "the second slot is free")

	other := slot
	other.Owner, other.Metadata = lock.NewOwner(), "pid=2"
	_, err = c.Acquire(ctx, other)
	require.NoError(t, err)
	_, stderr, code = cli(t, a, "lock", "-n", "2", "pool", "--", "echo", "should not run")
	assert.Equal(t, exitHeld, code, "both slots taken: %s", stderr)

	_, stderr, code = cli(t, a, "lock", "-n", "3", "pool", "--", "echo", "should not run")
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "is a semaphore of 2; asked for a semaphore of 3")
	_, stderr, code = cli(t, a, "lock", "pool", "--", "echo", "should not run")
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "asked for a mutex")

	out, stderr, code = cli(t, a, "locks", "pool")
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `(?m)^pool\s+\d+\s+\S+s\s+0\s+semaphore/2\s+2\s+-$`, out)
	assert.Regexp(t, `(?m)^  hold\s+\d+\s+\S+s\s+-\s+pid=1\n  hold\s+\d+\s+\S+s\s+-\s+pid=2$`, out, "each slot's metadata, in grant order")
	assert.NotContains(t, out, slot.Owner.String(), "never an owner")

	reader := lock.AcquireRequest{Key: "doc", Owner: lock.NewOwner(), TTL: time.Minute, Kind: lock.KindRWLock, Shared: true}
	_, err = c.Acquire(ctx, reader)
	require.NoError(t, err)
	_, stderr, code = cli(t, a, "lock", "-shared", "doc", "--", "true")
	assert.Equal(t, exitOK, code, "readers share: %s", stderr)
	_, stderr, code = cli(t, a, "lock", "-write", "doc", "--", "echo", "should not run")
	assert.Equal(t, exitHeld, code, "the writer is excluded: %s", stderr)
	out, _, _ = cli(t, a, "locks", "doc")
	assert.Regexp(t, `(?m)^doc\s+\d+\s+\S+s\s+0\s+rwlock/read\s+1\s+-$`, out)
	assert.Regexp(t, `(?m)^  hold\s+\d+\s+\S+s\s+read\s+-$`, out)

	set := lock.AcquireRequest{Key: "set/a", Keys: []string{"set/a", "set/b"}, Owner: lock.NewOwner(), TTL: time.Minute}
	_, err = c.AcquireAll(ctx, set)
	require.NoError(t, err)
	out, stderr, code = cli(t, a, "locks", "set/")
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, 2, strings.Count(out, "\n  set"), "each key of the set names the set: %s", out)
	assert.Regexp(t, `(?m)^set/b\s+.*\n  set\s+set/a set/b$`, out)

	for _, args := range [][]string{{"-n", "2", "-shared"}, {"-shared", "-write"}, {"-n", "65537"}, {"-n", "-1"}} {
		_, stderr, code = cli(t, a, append(append([]string{"lock"}, args...), "k", "--", "true")...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, stderr)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	}
}

// raftlock lock -session-ttl holds the lock through a session: its metadata
// shows in raftlock locks, and a raftlock lock that dies (SIGKILL: no
// release) frees the lock within the session TTL.
func TestLockCommandWithSession(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)
	cmd := startLockedSleep(t, a, nil, "-session-ttl", "2s", "-metadata", "build 7", "sess")

	out, stderr, code := cli(t, a, "locks")
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `(?m)^sess\s+\d+\s+\S+s\s+0\s+mutex\s+1\s+build 7$`, out)

	c := a.client(t)
	require.NoError(t, cmd.Process.Kill()) // the child sleep lives on; only the lock's keeper is gone
	_ = cmd.Wait()
	killed := time.Now()
	require.Eventually(t, func() bool {
		info, err := c.Inspect(context.Background(), "sess")
		return err == nil && !info.Locked
	}, 20*time.Second, 10*time.Millisecond, "the session ends without its keep-alive")
	t.Logf("lock freed %v after its raftlock lock was killed (session TTL 2s)", time.Since(killed).Round(time.Millisecond))

	_, stderr, code = cli(t, a, "lock", "-session-ttl", "1us", "k", "--", "true")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "-session-ttl")
	_, stderr, code = cli(t, a, "lock", "-metadata", strings.Repeat("x", 1025), "k", "--", "true")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "metadata")
}

func TestLockCommandStopsCommandWhenLockIsLost(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)
	var stderr bytes.Buffer
	cmd := startLockedSleep(t, a, &stderr, "-ttl", "2s", "-kill-after", "1s", "lost")

	// Take the agent away: the keep-alive cannot extend the lease, so once
	// the lease's conservative deadline passes the lock may be lost, and the
	// command must be stopped.
	a.kill(syscall.SIGKILL)

	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitLost, ee.ExitCode(), "stderr: %s", stderr.String())
	assert.Contains(t, stderr.String(), "lost the lock")
}

// startLockedSleep starts raftlock lock against a with args (flags and
// KEY) and, as COMMAND, a sleep of 60s, and waits until the sleep runs.
// stderr, when not nil, takes the lock command's (and the sleep's: Wait
// then waits for the sleep too, unless the lock command stops it).
func startLockedSleep(t *testing.T, a *agent, stderr io.Writer, args ...string) *exec.Cmd {
	t.Helper()
	started := filepath.Join(t.TempDir(), "started")
	args = append(append([]string{"lock", "-addr", a.httpAddr}, args...), "--", "sh", "-c", fmt.Sprintf(`touch %s; exec sleep 60`, started))
	cmd := exec.Command(binary, args...)
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill() })
	require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, 20*time.Second, 10*time.Millisecond)
	return cmd
}

// A lock bound to a session that an admin force-releases, and another
// client then takes, is lost to raftlock lock at its session's next
// renewal: it stops the command and says so. A command that ends by itself
// before the loss is noticed is not said to have been stopped.
func TestLockCommandWithSessionStopsCommandWhenForceReleased(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)
	c := a.client(t)
	ctx := context.Background()

	// startLocked runs raftlock lock on key with a session of sessionTTL,
	// and waits until its command runs; the command waits for the file
	// it returns (60s at most), then exits 3.
	dir := t.TempDir()
	startLocked := func(key, sessionTTL string) (wait func() (int, string), goFile string) {
		started, goFile := filepath.Join(dir, key+".started"), filepath.Join(dir, key+".go")
		cmd := exec.Command(binary, "lock", "-addr", a.httpAddr, "-session-ttl", sessionTTL, "-kill-after", "1s", key, "--",
			"sh", "-c", fmt.Sprintf(`touch %s; i=0; while [ ! -e %s ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; exit 3`, started, goFile))
		var stderr syncBuffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill() })
		exited := make(chan int, 1)
		go func() {
			err := cmd.Wait()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				exited <- ee.ExitCode()
			} else {
				exited <- 0
			}
		}()
		require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, 20*time.Second, 10*time.Millisecond)
		return func() (int, string) {
			select {
			case code := <-exited:
				return code, stderr.String()
			case <-time.After(20 * time.Second):
				require.FailNow(t, "raftlock lock did not exit", "stderr: %s", stderr.String())
				return 0, ""
			}
		}, goFile
	}
	takeOver := func(key string) {
		_, err := c.ForceRelease(ctx, key)
		require.NoError(t, err)
		ok, err := lock.New(c).Lock(key, lock.TTL(time.Minute)).TryAcquire(ctx)
		require.NoError(t, err)
		require.True(t, ok, "another client takes the key")
	}

	wait, _ := startLocked("stopped", "1s")
	takeOver("stopped")
	code, stderr := wait()
	assert.Equal(t, exitLost, code, "stderr: %s", stderr)
	assert.Contains(t, stderr, "lost the lock \"stopped\" while the command ran; the command was stopped")

	// A session renewed every 20s notices the loss only at the release:
	// the command, let go at once, ends by itself first.
	wait, goFile := startLocked("ended", "1m")
	takeOver("ended")
	require.NoError(t, os.WriteFile(goFile, nil, 0o600))
	code, stderr = wait()
	assert.Equal(t, exitLost, code, "stderr: %s", stderr)
	assert.Contains(t, stderr, "the command had ended by itself (exit status 3)")
	assert.NotContains(t, stderr, "was stopped")
}

// The operator commands against a real agent: locks lists what the API took
// (never the owners), status shows the node, release frees a lock by owner.
func TestLocksStatusAndReleaseCommands(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)
	c := a.client(t)
	owners := map[string]lock.Owner{}
	tokens := map[string]uint64{}
	for _, key := range []string{"jobs/nightly", "cache/warm"} {
		owners[key] = lock.NewOwner()
		lease, err := c.Acquire(context.Background(), lock.AcquireRequest{Key: key, Owner: owners[key], TTL: time.Minute})
		require.NoError(t, err)
		tokens[key] = lease.Token
	}
	row := func(key string) string {
		return fmt.Sprintf(`^%s\s+%d\s+\S+s\s+0\s+mutex\s+1\s+-$`, regexp.QuoteMeta(key), tokens[key])
	}
	lines := func(out string) []string { return strings.Split(strings.TrimRight(out, "\n"), "\n") }

	out, stderr, code := cli(t, a, "locks")
	require.Equal(t, exitOK, code, stderr)
	all := lines(out)
	require.Len(t, all, 3, out)
	assert.Regexp(t, `^KEY\s+TOKEN\s+REMAINING\s+WAITERS\s+KIND\s+HOLDERS\s+METADATA$`, all[0])
	assert.Regexp(t, row("cache/warm"), all[1], "in key order")
	assert.Regexp(t, row("jobs/nightly"), all[2])
	for _, owner := range owners {
		assert.NotContains(t, out, owner.String(), "owners are never listed")
	}

	out, stderr, code = cli(t, a, "locks", "jobs/")
	require.Equal(t, exitOK, code, stderr)
	byPrefix := lines(out)
	require.Len(t, byPrefix, 2, out)
	assert.Regexp(t, row("jobs/nightly"), byPrefix[1])

	out, stderr, code = cli(t, a, "status")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "node:    dev (leader)\n")
	assert.Contains(t, out, "leader:  dev at "+a.raftAddr+"\n")
	assert.Contains(t, out, "locks:   2 held, 0 waiting\n")
	assert.Regexp(t, `(?m)^ID\s+ADDRESS\s+SUFFRAGE\s+ROLE\s+GOSSIP\s+API\s+HEALTH\s+VERSION\s+LEVEL$`, out)
	versionOut, _, code := runBinary(t, nil, "version")
	require.Equal(t, exitOK, code)
	version := strings.Fields(versionOut)[1] // raftlock VERSION GO PLATFORM ...
	assert.Regexp(t, `(?m)^dev\s+`+regexp.QuoteMeta(a.raftAddr)+`\s+voter\s+leader\s+-\s+`+regexp.QuoteMeta(a.httpURL)+`\s+(healthy|-)\s+`+
		regexp.QuoteMeta(version)+`\s+`+strconv.Itoa(fsm.MaxCommandLevel)+`$`, out, "its own version, as raftlock version prints it, and level")
	jsonOut, stderr, code := cli(t, a, "status", "-json")
	require.Equal(t, exitOK, code, stderr)
	var st api.ClusterStatus
	require.NoError(t, json.Unmarshal([]byte(jsonOut), &st), jsonOut)
	require.Len(t, st.Members, 1)
	assert.Equal(t, version, st.Members[0].Version)
	assert.Equal(t, fsm.MaxCommandLevel, st.Members[0].Level)
	assert.Regexp(t, `(?m)^ready:   no: `, out, "one voter: losing it would stop the cluster")

	for range 2 { // the repeat (as after a lost answer) is answered as the release was
		out, stderr, code = cli(t, a, "release", "-owner", owners["jobs/nightly"].String(), "jobs/nightly")
		assert.Equal(t, exitOK, code, stderr)
		assert.Equal(t, "released \"jobs/nightly\"\n", out)
	}
	out, stderr, code = cli(t, a, "release", "-owner", lock.NewOwner().String(), "jobs/nightly")
	assert.Equal(t, exitError, code)
	assert.Empty(t, out)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	assert.Contains(t, stderr, `"jobs/nightly" is not held by that owner`)

	out, stderr, code = cli(t, a, "locks")
	require.Equal(t, exitOK, code, stderr)
	left := lines(out)
	require.Len(t, left, 2, out)
	assert.Regexp(t, row("cache/warm"), left[1], "only the lock not released is left")
}

func TestUsageErrorsAreOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"lock", "-bogus"},
		{"lock", "onlykey"},
		{"lock", "-ttl", "0", "k", "--", "true"},
		{"lock", "-ttl", "48h", "k", "--", "true"},
		{"lock", "-wait", "-1s", "k", "--", "true"},
		{"release", "-owner", "zz", "k"},
		{"agent", "-dev", "-join", "127.0.0.1:1"},
		{"agent", "-data-dir", "/nonexistent/x", "-node-id", "a"},
		{"agent", "-log-level", "loud", "-dev"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-voters", "2"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-node-id", "a b/../x"},
		{"lock", "-n", "0", "k", "--", "true"},
		{"lock", "--", "echo", "hi"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-log-store", "sqlite"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-dead-member-timeout", "1s"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-snapshot-threshold", "-5"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-leader-wait", "-1s"},
		{"agent", "-node-id", "a", "-data-dir", "d", "-bootstrap", "-peers", "a=nocolon"},
		{"nosuchcommand"},
		// TLS and token flags given by halves, or naming nothing usable.
		{"agent", "-dev", "-http", "127.0.0.1:0", "-peer-cert-file", "node.pem"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-peer-cert-file", "node.pem", "-peer-key-file", "node-key.pem"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-peer-ca-file", "ca.pem"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-peer-cert-file", "/nonexistent/n.pem", "-peer-key-file", "/nonexistent/k.pem", "-peer-ca-file", "/nonexistent/ca.pem"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-cert-file", "api.pem"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-key-file", "api-key.pem"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-client-ca-file", "ca.pem"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-cert-file", "/nonexistent/a.pem", "-key-file", "/nonexistent/k.pem"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-http-token", "has space"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-http-token", "t", "-http-token-file", "/nonexistent/token"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-http-token-file", "/nonexistent/token"},
		{"agent", "-dev", "-http", "127.0.0.1:0", "-advertise-http", "ftp://host:1"},
		{"status", "-client-cert", "me.pem"},
		{"status", "-client-key", "me-key.pem"},
		{"locks", "-ca-file", "/nonexistent/ca.pem"},
		{"release", "-token", "a", "-token-file", "/nonexistent/token", "-owner", "0123456789abcdef0123456789abcdef", "k"},
		{"lock", "-token", "new\nline", "k", "--", "true"},
		{"status", "-addr", " , "},
		{"status", "-addr", "http://127.0.0.1:1,ftp://127.0.0.1:2"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := exec.Command(binary, args...)
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			want := exitUsage
			if args[0] == "nosuchcommand" {
				want = exitUnknownCommand
			}
			assert.Equal(t, want, ee.ExitCode())
			assert.Equal(t, 1, strings.Count(errOut.String(), "\n"), "one line: %q", errOut.String())
			assert.Empty(t, out.String())
		})
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	clientFlags := []string{"-addr", "RAFTLOCK_ADDR", "-token ", "RAFTLOCK_HTTP_TOKEN", "-token-file", "RAFTLOCK_HTTP_TOKEN_FILE",
		"-ca-file", "RAFTLOCK_CACERT", "-client-cert", "RAFTLOCK_CLIENT_CERT", "-client-key", "RAFTLOCK_CLIENT_KEY",
		"-tls-server-name", "RAFTLOCK_TLS_SERVER_NAME", "comma-separated"}
	want := map[string][]string{
		"agent": {"-peer-cert-file", "RAFTLOCK_PEER_CERT_FILE", "-peer-key-file", "RAFTLOCK_PEER_KEY_FILE",
			"-peer-ca-file", "RAFTLOCK_PEER_CA_FILE", "-cert-file", "RAFTLOCK_CERT_FILE", "-key-file", "RAFTLOCK_KEY_FILE",
			"-client-ca-file", "RAFTLOCK_CLIENT_CA_FILE", "-http-token ", "RAFTLOCK_HTTP_TOKEN", "-http-token-file",
			"RAFTLOCK_HTTP_TOKEN_FILE", "-advertise-http", "RAFTLOCK_ADVERTISE_HTTP",
			"-leader-wait", "RAFTLOCK_LEADER_WAIT",
			"Host names and IPs in them are not checked", "restart the agent"},
		"lock":    clientFlags,
		"status":  clientFlags,
		"locks":   clientFlags,
		"release": clientFlags,
	}
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			out, err := exec.Command(binary, c.name, "-h").Output()
			require.NoError(t, err)
			assert.Contains(t, string(out), "Usage: raftlock "+c.name)
			assert.NotContains(t, string(out), "\n  -"+"\n", "every flag has a description")
			for _, w := range want[c.name] {
				assert.Contains(t, string(out), w)
			}
		})
	}
}

func TestUnreachableAgentIsOneLine(t *testing.T) {
	var errOut bytes.Buffer
	cmd := exec.Command(binary, "status", "-addr", "127.0.0.1:1")
	cmd.Stderr = &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitUnavailable, ee.ExitCode())
	assert.Equal(t, 1, strings.Count(errOut.String(), "\n"), "one line: %q", errOut.String())
}

func TestThreeAgentClusterSurvivesLeaderKill(t *testing.T) {
	dir := t.TempDir()
	first := startAgent(t, "-node-id", "a", "-data-dir", filepath.Join(dir, "a"), "-bind", "127.0.0.1:0", "-bootstrap")
	first.waitLeader(t)
	agents := []*agent{first}
	for _, id := range []string{"b", "c"} {
		agents = append(agents, startAgent(t, "-node-id", id, "-data-dir", filepath.Join(dir, id), "-bind", "127.0.0.1:0", "-join", first.raftAddr))
	}
	for _, a := range agents {
		a.waitLeader(t)
	}

	// Every node serves the API: a lock taken through one is seen through all.
	owner := lock.NewOwner()
	lease, err := agents[2].client(t).Acquire(context.Background(), lock.AcquireRequest{Key: "shared", Owner: owner, TTL: time.Minute})
	require.NoError(t, err)
	for _, a := range agents {
		info, err := a.client(t).Inspect(context.Background(), "shared")
		require.NoError(t, err)
		assert.True(t, info.Locked)
		assert.Equal(t, lease.Token, info.Token)
	}
	st, err := agents[0].client(t).Cluster(context.Background())
	require.NoError(t, err)
	require.Len(t, st.Members, 3)

	// Each agent tells the others the URL of its API (cluster.Config.APIAddr).
	byID := map[string]string{"a": agents[0].httpURL, "b": agents[1].httpURL, "c": agents[2].httpURL}
	for _, a := range agents {
		require.Eventually(t, func() bool {
			st, err := a.client(t).Cluster(context.Background())
			if err != nil || len(st.Members) != 3 {
				return false
			}
			for _, m := range st.Members {
				if m.APIAddr != byID[m.ID] {
					return false
				}
			}
			return true
		}, 20*time.Second, 20*time.Millisecond, "every member knows every API URL")
	}

	// Kill the leader with -9; a survivor serves the held lock and new ones.
	var leader *agent
	var survivors []*agent
	for _, a := range agents {
		if a.raftAddr == st.LeaderAddr {
			leader = a
		} else {
			survivors = append(survivors, a)
		}
	}
	require.NotNil(t, leader, "leader %s is one of the agents", st.LeaderAddr)
	leader.kill(syscall.SIGKILL)

	c := survivors[0].client(t)
	var next lock.Lease
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		next, err = c.Acquire(ctx, lock.AcquireRequest{Key: "after-failover", Owner: lock.NewOwner(), TTL: time.Minute})
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	assert.Greater(t, next.Token, lease.Token, "tokens keep increasing across the leader change")
	info, err := survivors[1].client(t).Inspect(context.Background(), "shared")
	require.NoError(t, err)
	assert.True(t, info.Locked, "the lock held before the failover is still held")

	// Given the dead agent first, the Go client and every CLI command move on
	// to the next one.
	endpoints := []string{leader.httpURL, survivors[0].httpURL}
	failover, err := api.NewFailoverClient(endpoints, api.ClientConfig{})
	require.NoError(t, err)
	info, err = failover.Inspect(context.Background(), "shared")
	require.NoError(t, err)
	assert.Equal(t, lease.Token, info.Token)
	assert.Equal(t, survivors[0].httpURL, failover.Endpoint())
	_, err = failover.Acquire(context.Background(), lock.AcquireRequest{Key: "through-failover", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)

	list := strings.Join(endpoints, ",")
	out, stderr, code := runBinary(t, []string{"RAFTLOCK_ADDR=" + list}, "status")
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `(?m)^leader:  [bc] at `, out)
	out, stderr, code = runBinary(t, nil, "locks", "-addr", list)
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `(?m)^shared\s`, out)
	assert.Regexp(t, `(?m)^through-failover\s`, out)
	out, stderr, code = runBinary(t, nil, "lock", "-addr", list, "after-failover-cli", "--", "echo", "ran")
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, "ran\n", out)
	out, stderr, code = runBinary(t, nil, "release", "-addr", list, "-owner", owner.String(), "shared")
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, "released \"shared\"\n", out, "its owner can still release it")
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the test's reads.
type syncBuffer struct {
	mu  sync.Mutex // protects buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ io.Writer = (*syncBuffer)(nil)
