package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/lock"
)

func TestQuotaFlagValues(t *testing.T) {
	for in, want := range map[string]int{"1": 1, "250000": 250_000, "1_000_000": 1_000_000, "unlimited": cluster.Unlimited, " Unlimited ": cluster.Unlimited, "1000000000": maxQuotaFlag} {
		var q quotaFlag
		require.NoError(t, q.Set(in), in)
		assert.Equal(t, want, int(q), in)
	}
	for _, in := range []string{"0", "-1", "-5", "1000000001", "lots", "", "1e6", "1.5"} {
		var q quotaFlag = 7
		err := q.Set(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), "unlimited", "the error says what is accepted")
		assert.Equal(t, quotaFlag(7), q, "a refused value changes nothing")
	}
	q := quotaFlag(cluster.Unlimited)
	assert.Equal(t, "unlimited", q.String())
	assert.Equal(t, "keys 3/10, sessions 0/unlimited, waiters 1/100 (refused 4 while leading: see the log)",
		quotaLine(api.Quotas{Locks: api.Quota{Limit: 10, Used: 3, Refused: 4}, Waiters: api.Quota{Limit: 100, Used: 1}}))
	assert.Equal(t, "keys 0/1, sessions 0/2, waiters 0/3", quotaLine(api.Quotas{Locks: api.Quota{Limit: 1}, Sessions: api.Quota{Limit: 2}, Waiters: api.Quota{Limit: 3}}))
}

// A bad quota flag or variable stops the agent with one line that names
// it; none starts a node.
func TestQuotaFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		args []string
		name string
	}{
		{nil, []string{"-max-locks", "0"}, "-max-locks"},
		{nil, []string{"-max-sessions", "-5"}, "-max-sessions"},
		{nil, []string{"-max-total-waiters", "lots"}, "-max-total-waiters"},
		{nil, []string{"-max-locks", "5000000000"}, "-max-locks"},
		{[]string{"RAFTLOCK_MAX_LOCKS=0"}, nil, "RAFTLOCK_MAX_LOCKS"},
	} {
		t.Run(strings.Join(append(tc.env, tc.args...), " "), func(t *testing.T) {
			out, stderr, code := runBinary(t, tc.env, append([]string{"agent", "-dev", "-http", "127.0.0.1:0"}, tc.args...)...)
			assert.Equal(t, exitUsage, code, stderr)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			assert.Contains(t, stderr, tc.name)
			assert.Empty(t, out)
		})
	}
}

// An agent at its -max-locks refuses a new key, says which limit and what
// to do, and raftlock status shows the quotas.
func TestAgentQuota(t *testing.T) {
	// Not -dev: a killed -dev agent leaves its temporary data dir behind.
	a := startAgent(t, "-node-id", "q", "-data-dir", t.TempDir(), "-bind", "127.0.0.1:0", "-bootstrap",
		"-max-locks", "1", "-max-sessions", "unlimited")
	a.waitLeader(t)
	c := a.client(t)
	_, err := c.Acquire(context.Background(), lock.AcquireRequest{Key: "held", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)

	_, stderr, code := cli(t, a, "lock", "other", "--", "echo", "should not run")
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "quota exceeded")
	assert.Contains(t, stderr, "-max-locks")
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)

	out, stderr, code := cli(t, a, "status")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "quotas:  keys 1/1, sessions 0/unlimited, waiters 0/100000 (refused 1 while leading")
	assert.Eventually(t, func() bool { return strings.Contains(a.logs.String(), "quota is reached") }, 10*time.Second, 10*time.Millisecond,
		"the agent warns of the refusal")
}
