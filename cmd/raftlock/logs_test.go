package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/internal/quietlog"
	"github.com/raftlock/raftlock/lock"
)

var problemLine = regexp.MustCompile(`(?m)^.*\[(WARN|ERROR)\].*$`)

// problems returns the WARN and ERROR lines of an agent's log.
func problems(logs string) []string { return problemLine.FindAllString(logs, -1) }

// useLocks takes and releases a lock through a, as a normal run does.
func useLocks(t *testing.T, a *agent) {
	t.Helper()
	c := a.client(t)
	owner := lock.NewOwner()
	_, err := c.Acquire(context.Background(), lock.AcquireRequest{Key: "logs", Owner: owner, TTL: time.Minute})
	require.NoError(t, err)
	released, err := c.Release(context.Background(), "logs", owner)
	require.NoError(t, err)
	require.True(t, released)
}

// A -dev agent started, used and stopped with SIGTERM, at the default log
// level, logs no warning and no error: operators learn to ignore logs that
// cry wolf. (It used to warn at every start.)
func TestDevAgentStartAndStopLogNoProblems(t *testing.T) {
	a := startAgent(t, "-dev", "-log-level", "info")
	a.waitLeader(t)
	useLocks(t, a)
	a.kill(syscall.SIGTERM)
	logs := a.logs.String()
	assert.Contains(t, logs, "[INFO]", "the default level writes info lines")
	assert.Contains(t, logs, "stopping")
	assert.Empty(t, problems(logs))
}

// README's 3-node cluster, started, used and stopped member by member with
// SIGTERM (which stops without leaving), at the default log level: no
// warning or error at the start, none from a member that stops (it used to
// log an error at every stop), and the last member, which sees the others
// go, only logs lines that say what to do, each kind once rather than
// several times a second.
func TestClusterStartAndStopLogNoProblems(t *testing.T) {
	agents := readme3(t, "-log-level", "info")
	for _, a := range agents {
		a.waitLeader(t)
	}
	useLocks(t, agents[1].agent)
	for _, a := range agents {
		assert.Empty(t, problems(a.logs.String()), "agent %s started", a.raftAddr)
	}
	st, err := agents[0].client(t).Cluster(context.Background())
	require.NoError(t, err)
	require.Equal(t, agents[0].raftAddr, st.LeaderAddr, "a, the bootstrapped member, leads")

	// The followers stop: each logs nothing wrong about its own stop, and
	// the one still running has nothing to complain about either.
	agents[2].stop(syscall.SIGTERM)
	assert.Empty(t, problems(agents[2].logs.String()), "c stopped")
	agents[1].stop(syscall.SIGTERM)
	assert.Empty(t, problems(agents[1].logs.String()), "b stopped")

	// The leader, left alone, reports its members down until it stops.
	require.Eventually(t, func() bool {
		return strings.Contains(agents[0].logs.String(), agents[1].raftAddr)
	}, 20*time.Second, 20*time.Millisecond, "the leader reports b down")
	agents[0].stop(syscall.SIGTERM)
	seen := map[string]int{}
	for _, line := range problems(agents[0].logs.String()) {
		assert.Contains(t, line, "what_to_do=", "a line about a down member says what to do")
		key := line[strings.Index(line, "[")+1:]
		key = regexp.MustCompile(`(error|time|backoff time|term|repeated|what_to_do)=("[^"]*"|\S+)`).ReplaceAllString(key, "")
		if strings.Contains(line, "repeated=") {
			continue // the count written at the end of a window or at the stop
		}
		seen[key]++
	}
	for key, n := range seen {
		assert.Equal(t, 1, n, "written once, then counted: %s", key)
	}
}

// net/http's accept failures (file descriptors run out) come as one line
// that says what to do, then a count, not one line per retry.
func TestHTTPAcceptErrorsAreCounted(t *testing.T) {
	var buf syncBuffer
	q := quietlog.New(time.Hour, nil)
	w := httpServerLog{q.Wrap(hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &buf}))}
	for _, delay := range []string{"5ms", "10ms", "20ms", "40ms"} {
		fmt.Fprintf(w, "http: Accept error: accept tcp 127.0.0.1:7070: accept4: too many open files; retrying in %s\n", delay)
	}
	fmt.Fprintf(w, "http: TLS handshake error from 127.0.0.1:5555: EOF\n")
	q.Close()
	lines := problems(buf.String())
	require.Len(t, lines, 2, buf.String())
	assert.Contains(t, lines[0], "too many open files")
	assert.Contains(t, lines[0], "ulimit -n")
	assert.NotContains(t, lines[0], "retrying in")
	assert.Contains(t, lines[1], "repeated=3")
}

// Connections refused at the raft port (here: HTTP sent to it) are one
// warning that says what to do, then a count, not a warning each.
func TestRefusedPeerConnectionsAreCounted(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)
	for range 20 {
		conn, err := net.Dial("tcp", a.raftAddr)
		require.NoError(t, err)
		_, err = conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		// The agent closes it: read until then.
		_, _ = io.Copy(io.Discard, conn)
		conn.Close()
	}
	a.kill(syscall.SIGTERM) // writes the count still pending
	var refused []string
	for _, line := range problems(a.logs.String()) {
		if strings.Contains(line, "dropped connection") {
			refused = append(refused, line)
		}
	}
	require.Len(t, refused, 2, a.logs.String())
	assert.Contains(t, refused[0], "what_to_do=")
	assert.Contains(t, refused[1], "repeated=19")
}
