package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// watchProcess runs `raftlock watch ARGS...` against a and returns its
// stdout's lines as they come.
func watchProcess(t *testing.T, a *agent, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(binary, append(append([]string{"watch", "-addr", a.httpURL}, a.cliArgs...), args...)...)
	cmd.Env = os.Environ()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, lines
}

func nextLine(t *testing.T, lines <-chan string, what string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		require.True(t, ok, "watch ended before %s", what)
		return l
	case <-time.After(20 * time.Second):
		require.FailNow(t, "timed out", "watch printed no line for %s", what)
		return ""
	}
}

func TestWatchCommandPrintsEachChange(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)
	c := a.client(t)
	ctx := context.Background()

	cmd, lines := watchProcess(t, a, "-json", "jobs/nightly")
	var state map[string]any
	require.NoError(t, json.Unmarshal([]byte(nextLine(t, lines, "the state now")), &state))
	assert.Equal(t, false, state["locked"])
	assert.Equal(t, "jobs/nightly", state["key"])
	assert.NotEmpty(t, state["at"])

	owner := lock.NewOwner()
	lease, err := c.Acquire(ctx, lock.AcquireRequest{Key: "jobs/nightly", Owner: owner, TTL: time.Minute, Metadata: "host=a"})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(nextLine(t, lines, "the grant")), &state))
	assert.Equal(t, true, state["locked"])
	assert.EqualValues(t, lease.Token, state["token"])
	assert.Equal(t, "host=a", state["metadata"])

	_, err = c.Release(ctx, "jobs/nightly", owner)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(nextLine(t, lines, "the release")), &state))
	assert.Equal(t, false, state["locked"])

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), "Ctrl-C ends the watch with status 0")
}

func TestWatchCommandPrefixText(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)
	c := a.client(t)
	_, lines := watchProcess(t, a, "-prefix", "jobs/")
	assert.Regexp(t, `^\S+ 0 held under "jobs/"$`, nextLine(t, lines, "the state now"))
	lease, err := c.Acquire(context.Background(), lock.AcquireRequest{Key: "jobs/a", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	assert.Regexp(t, `^\S+ 1 held under "jobs/"$`, nextLine(t, lines, "the grant"))
	assert.Regexp(t, `^  jobs/a locked token=`+itoa(lease.Token)+` remaining=\S+ waiters=0$`, nextLine(t, lines, "the key's line"))
}

func TestWatchCommandBadInput(t *testing.T) {
	_, stderr, code := runBinary(t, nil, "watch")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "want exactly one KEY")
	_, stderr, code = runBinary(t, nil, "watch", "")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "invalid key")
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func TestDescribeKey(t *testing.T) {
	for _, tc := range []struct {
		info lock.KeyInfo
		want string
	}{
		{lock.KeyInfo{}, "free waiters=0"},
		{lock.KeyInfo{Locked: true, Holders: 1, Token: 7, Remaining: 1500 * time.Millisecond, Waiters: 2, Metadata: "host=a"}, "locked token=7 remaining=1.5s waiters=2 metadata=host=a"},
		{lock.KeyInfo{Locked: true, Kind: lock.KindSemaphore, Limit: 8, Holders: 3, Token: 9, Remaining: time.Second}, "locked semaphore/8 holders=3 token=9 remaining=1s waiters=0"},
		{lock.KeyInfo{Locked: true, Kind: lock.KindRWLock, Shared: true, Holders: 2, Token: 9, Remaining: time.Second}, "locked rwlock/read holders=2 token=9 remaining=1s waiters=0"},
		{lock.KeyInfo{Locked: true, Delayed: true, Remaining: time.Second}, "lock-delay remaining=1s waiters=0"},
		{lock.KeyInfo{Locked: true, Kind: lock.KindSemaphore, Limit: 2, Holders: 2, Token: 9, Remaining: time.Second,
			Holds: []lock.HoldInfo{{Token: 8, Remaining: time.Millisecond, Metadata: "pid=1"}, {Token: 9, Remaining: time.Second}}},
			"locked semaphore/2 holders=2 token=9 remaining=1s waiters=0 holds=[token=8 remaining=1ms metadata=pid=1; token=9 remaining=1s]"},
		{lock.KeyInfo{Locked: true, Kind: lock.KindRWLock, Shared: true, Holders: 1, Token: 9, Remaining: time.Second,
			Holds: []lock.HoldInfo{{Token: 9, Remaining: time.Second, Metadata: "r", Shared: true}}},
			"locked rwlock/read holders=1 token=9 remaining=1s waiters=0 holds=[token=9 remaining=1s read metadata=r]"},
		{lock.KeyInfo{Locked: true, Holders: 1, Token: 5, Remaining: time.Second, SetKeys: []string{"a", "b"}}, "locked token=5 remaining=1s waiters=0 set=[a b]"},
		{lock.KeyInfo{Waiters: 1, Reserved: true}, "free waiters=1 reserved"},
		// A slot a lock-delay keeps is nobody's: no mode, no metadata.
		{lock.KeyInfo{Locked: true, Kind: lock.KindRWLock, Shared: true, Holders: 2, Token: 9, Remaining: time.Second,
			Holds: []lock.HoldInfo{{Token: 8, Remaining: 2 * time.Millisecond, Shared: true, Delayed: true}, {Token: 9, Remaining: time.Second, Shared: true}}},
			"locked rwlock/read holders=2 token=9 remaining=1s waiters=0 holds=[token=8 lock-delay remaining=2ms; token=9 remaining=1s read]"},
	} {
		assert.Equal(t, tc.want, describeKey(tc.info))
	}
}

// raftlock locks prints a slot a lock-delay keeps as such, not as a hold
// without metadata.
func TestPrintHoldsShowsLockDelay(t *testing.T) {
	var out strings.Builder
	printHolds(&out, lock.KeyInfo{Locked: true, Kind: lock.KindSemaphore, Limit: 2, Holders: 2, Token: 9,
		Holds: []lock.HoldInfo{{Token: 8, Remaining: time.Second, Delayed: true}, {Token: 9, Remaining: time.Second, Metadata: "pid=1"}}})
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, "  hold\t8\t1s\t\t-\t\t"+lockDelayText, lines[0])
	assert.Equal(t, "  hold\t9\t1s\t\t-\t\tpid=1", lines[1])
}
