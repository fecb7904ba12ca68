package main

import (
	"context"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnknownCommandExits127: like a shell, with the commands there are.
func TestUnknownCommandExits127(t *testing.T) {
	_, stderr, code := runBinary(t, nil, "lokc", "k")
	assert.Equal(t, exitUnknownCommand, code, stderr)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	assert.Contains(t, stderr, `"lokc"`)
	assert.Contains(t, stderr, "agent, lock, status, locks, watch, release, leave, debug, version")
}

// TestVersion: `raftlock version` and `raftlock -version` print the module
// version and the Go version on one line.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		out, stderr, code := runBinary(t, nil, args...)
		require.Equal(t, exitOK, code, "%v: %s", args, stderr)
		assert.Regexp(t, `^raftlock \S+ go1\.\d+\S* \w+/\w+( commit [0-9a-f]+( \(modified\))?( \S+)?)?\n$`, out, args)
	}
	_, stderr, code := runBinary(t, nil, "version", "extra")
	assert.Equal(t, exitUsage, code, stderr)
	out, _, _ := runBinary(t, nil, "-h")
	assert.Contains(t, out, "version")
	assert.Contains(t, out, "78", "-h lists the exit statuses")
}

// TestLockFlagsAfterTheKey: flags after KEY are read before the lock is
// taken, instead of being run as the command; a wrong one is refused before
// anything is taken.
func TestLockFlagsAfterTheKey(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)

	out, stderr, code := cli(t, a, "lock", "k", "-ttl", "7s", "--", "sh", "-c", `echo "key $RAFTLOCK_KEY"`)
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, "key k\n", out)
	// Without "--" too: the first argument that is not a flag is COMMAND.
	out, stderr, code = cli(t, a, "lock", "k", "-wait", "1s", "echo", "-ttl")
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, "-ttl\n", out, "flags after COMMAND are COMMAND's")

	// A wait the store refuses, given after the key, is refused before the lock is taken.
	_, stderr, code = cli(t, a, "lock", "held", "-wait", "-1s", "--", "sh", "-c", "echo ran")
	assert.Equal(t, exitUsage, code, stderr)
	_, stderr, code = cli(t, a, "lock", "held", "-bogus", "--", "echo", "ran")
	assert.Equal(t, exitUsage, code, stderr)
	assert.Contains(t, stderr, "-bogus")
	info, err := a.client(t).Inspect(context.Background(), "held")
	require.NoError(t, err)
	assert.False(t, info.Locked)
	assert.Zero(t, info.Token, "never taken")
}

// TestReleaseWithoutOwnerSaysWhereOneComesFrom.
func TestReleaseWithoutOwnerSaysWhereOneComesFrom(t *testing.T) {
	_, stderr, code := runBinary(t, nil, "release", "-addr", "http://127.0.0.1:1", "k")
	assert.Equal(t, exitUsage, code, stderr)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	assert.Contains(t, stderr, "-owner is required")
	assert.Contains(t, stderr, "RAFTLOCK_OWNER")
	assert.Contains(t, stderr, "acquire answer")
	assert.NotContains(t, stderr, "32 hex digits must")

	// KEY -owner HEX: flags after the key are read as well.
	_, stderr, code = runBinary(t, nil, "release", "-addr", "http://127.0.0.1:1", "k", "-owner", "zz")
	assert.Equal(t, exitUsage, code, stderr)
	assert.Contains(t, stderr, "-owner")
}

// TestHTTPSToPlainPortIsAConfigError: TLS spoken to a plain HTTP agent exits
// 78 with what to change, not 69, which scripts retry.
func TestHTTPSToPlainPortIsAConfigError(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)
	_, stderr, code := runBinary(t, nil, "status", "-addr", "https://"+a.httpAddr)
	assert.Equal(t, exitConfig, code, stderr)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	assert.Contains(t, stderr, "use http://")
}

// TestAgentConfigErrorsNameFlags: a Config the cluster package refuses is
// reported with the flags the user typed, not cluster.Config's field names.
func TestAgentConfigErrorsNameFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-raft-heartbeat", "0"}, "raftlock agent: -raft-heartbeat must be positive, got 0s\n"},
		{[]string{"-raft-election", "100ms"}, "raftlock agent: -raft-election must be at least -raft-heartbeat, got 100ms < 500ms\n"},
		{[]string{"-voters", "2"}, "raftlock agent: -voters must be odd, from 1 to 9 (3 or 5 recommended; an even count survives no more failures than one less), got 2\n"},
		{[]string{"-bootstrap-expect", "2"}, "raftlock agent: -bootstrap-expect must be odd, from 1 to 9 (3 or 5 recommended; an even count survives no more failures than one less), got 2\n"},
		{[]string{"-node-id", "a b/../x", "-bootstrap"}, "raftlock agent: -node-id \"a b/../x\": has ' ': a node ID holds only letters, digits, '-', '_' and '.' " +
			"(a node that already has this ID must leave the cluster, then join with a new ID and an empty data dir)\n"},
		{[]string{"-bootstrap", "-peers", "a=127.0.0.1:1,b/c=127.0.0.1:2"}, "raftlock agent: -peers[1] \"b/c\": has '/': a node ID holds only letters, digits, '-', '_' and '.'\n"},
		{[]string{"-dead-member-timeout", "1s"}, "raftlock agent: -dead-member-timeout must be at least -dead-voter-timeout, got 1s < 5s\n"},
		{nil, "set -bootstrap or -bootstrap-expect to start a new cluster, or -join or -retry-join to join one\n"},
		{[]string{"-bootstrap-expect", "3", "-bootstrap"}, "-bootstrap-expect and -bootstrap are exclusive: -bootstrap-expect bootstraps once that many nodes see each other\n"},
		{[]string{"-bootstrap-expect", "3", "-gossip-bind", "off"}, "-bootstrap-expect needs gossip: set -gossip-bind\n"},
		{[]string{"-bootstrap", "-gossip-key-file", "k"}, "-gossip-key-file and -gossip-advertise need gossip: add -retry-join (or -bootstrap-expect, or -gossip-bind)\n"},
	} {
		dir := t.TempDir()
		args := append([]string{"agent", "-node-id", "a", "-data-dir", dir, "-bind", "127.0.0.1:0", "-http", "127.0.0.1:0"}, tc.args...)
		_, stderr, code := runBinary(t, nil, args...)
		assert.Equal(t, exitUsage, code, "%v: %s", tc.args, stderr)
		assert.True(t, strings.HasSuffix(stderr, tc.want), "%v: got %q, want it to end with %q", tc.args, stderr, tc.want)
		assert.NotRegexp(t, `Timeout|Bootstrap|Join|Voters|DefaultConfig`, stderr, "no Go names")
	}
}

// TestAgentNamesPortCollisions: -http equal to -bind, or a -bind port taken
// by another process, is named, not a bare "address already in use".
func TestAgentNamesPortCollisions(t *testing.T) {
	// A port held here: whichever check the agent makes first, it cannot
	// bind it.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { held.Close() })
	port := held.Addr().String()
	_, stderr, code := runBinary(t, nil, "agent", "-node-id", "a", "-data-dir", t.TempDir(), "-bootstrap", "-http", port, "-bind", port)
	assert.Equal(t, exitUsage, code, stderr)
	assert.Contains(t, stderr, "-http "+port+" and -bind "+port+" name the same port")

	_, stderr, code = runBinary(t, nil, "agent", "-node-id", "a", "-data-dir", t.TempDir(), "-bootstrap", "-http", "127.0.0.1:0", "-bind", held.Addr().String())
	assert.Equal(t, exitUsage, code, stderr)
	assert.Contains(t, stderr, "-bind "+held.Addr().String()+": the port is in use")
}

// TestAgentSaysBootstrapFlagsAreIgnoredOnExistingState: a restart with
// -bootstrap says the flags are ignored, and warns about a -peers entry that
// contradicts the stored membership.
func TestAgentSaysBootstrapFlagsAreIgnoredOnExistingState(t *testing.T) {
	var ports []string
	var dir string
	first := withFreshPorts(t, 2, func(p []string) ([]*restartable, error) {
		ports, dir = p, t.TempDir()
		r, err := tryStartFixed(t, ports[0], ports[1], "-node-id", "a", "-data-dir", dir, "-bootstrap",
			"-peers", "a="+ports[0]+",b=127.0.0.1:9", "-log-level", "info")
		if err != nil {
			return nil, err
		}
		return []*restartable{r}, nil
	})[0]
	assert.NotContains(t, first.logs.String(), "are ignored", "a fresh data dir bootstraps")
	first.stop(syscall.SIGTERM)

	// Again on the same raft port, its address in -peers and in the stored
	// configuration (another test could take it in the moment after the
	// stop, which nothing here can avoid).
	again := startFixed(t, ports[0], ports[1], "-node-id", "a", "-data-dir", dir, "-bootstrap",
		"-peers", "a="+ports[0]+",b=127.0.0.1:10,c=127.0.0.1:11", "-log-level", "info")
	require.Eventually(t, func() bool { return strings.Contains(again.logs.String(), "bootstrap settings") }, 10*time.Second, 10*time.Millisecond)
	logs := again.logs.String()
	assert.Regexp(t, `\[INFO\] .*data dir already holds cluster state.*-bootstrap and -peers.*are ignored.*listed_not_members=c`, logs)
	assert.Regexp(t, `\[WARN\] .*another address.*member=b peers_addr=127.0.0.1:10 stored_addr=127.0.0.1:9`, logs)
}

// TestJoinSaysWhatItReached: -join to an agent's HTTP port, or to a TLS
// cluster without peer certificates, fails at once saying so, instead of
// "context deadline exceeded" after -request-timeout or "connection lost … EOF".
func TestJoinSaysWhatItReached(t *testing.T) {
	ca := newTestCA(t, "peers")
	plain := startAgent(t, "-dev")
	withTLS := startAgent(t, append([]string{"-dev"}, ca.peerFlags(t, "tls-node")...)...)
	for _, tc := range []struct {
		join string
		want []string
	}{
		{plain.httpAddr, []string{plain.httpAddr + " answered HTTP", "not a raftlock node's raft address", "-bind"}},
		{withTLS.raftAddr, []string{withTLS.raftAddr + " speaks TLS", "-peer-cert-file"}},
	} {
		_, stderr, code := runBinary(t, nil, "agent", "-node-id", "b", "-data-dir", t.TempDir(), "-bind", "127.0.0.1:0",
			"-http", "127.0.0.1:0", "-join", tc.join, "-request-timeout", "1m", "-log-level", "error")
		assert.Equal(t, exitError, code, stderr)
		for _, w := range tc.want {
			assert.Contains(t, stderr, w)
		}
		assert.NotContains(t, stderr, "deadline exceeded")
	}
}

// TestFlagsAfterLeadingArgs: the parsing behind flags after KEY, without a binary.
func TestFlagsAfterLeadingArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ttl  string
		rest []string
	}{
		{[]string{"k", "-ttl", "5s", "--", "echo", "hi"}, "5s", []string{"k", "echo", "hi"}},
		{[]string{"-ttl", "5s", "k", "--", "echo"}, "5s", []string{"k", "--", "echo"}},
		{[]string{"k", "echo", "-ttl", "5s"}, "", []string{"k", "echo", "-ttl", "5s"}},
		{[]string{"--", "k", "-ttl", "5s"}, "", []string{"k", "-ttl", "5s"}},
	} {
		fs := newFlagSet("lock", "", "", io.Discard, io.Discard)
		fs.leadingArgs = 1
		ttl := fs.String("ttl", "", "")
		require.Equal(t, -1, parseFlags(fs, tc.args, map[string]string{}, io.Discard), tc.args)
		assert.Equal(t, tc.ttl, *ttl, tc.args)
		assert.Equal(t, tc.rest, fs.Args(), tc.args)
	}
}
