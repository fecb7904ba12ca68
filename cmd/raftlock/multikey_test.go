package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// raftlock lock -keys takes every key at once: the command sees the set and
// its one token, a held key keeps the command from running (and takes no
// other key), and bad sets are usage errors in one line.
func TestLockCommandKeys(t *testing.T) {
	a := startAgent(t, "-dev")
	a.waitLeader(t)
	c := a.client(t)
	ctx := context.Background()

	out, stderr, code := cli(t, a, "lock", "-keys", "b,a", "--", "sh", "-c", `echo "$RAFTLOCK_KEYS $RAFTLOCK_KEY $RAFTLOCK_TOKEN"`)
	require.Equal(t, exitOK, code, stderr)
	var keys, first string
	var token uint64
	_, err := fmt.Sscanf(out, "%s %s %d", &keys, &first, &token)
	require.NoError(t, err, out)
	assert.Equal(t, "a,b", keys)
	assert.Equal(t, "a", first)
	assert.Positive(t, token)
	for _, k := range []string{"a", "b"} {
		info, err := c.Inspect(ctx, k)
		require.NoError(t, err)
		assert.False(t, info.Locked, "%q released after the command", k)
	}

	// Without -keys' "--", the command's own flags stay its own.
	out, stderr, code = cli(t, a, "lock", "-keys", "a,b", "sh", "-c", "echo -n ok")
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, "ok", out)

	holder := lock.AcquireRequest{Key: "b", Owner: lock.NewOwner(), TTL: time.Minute}
	_, err = c.Acquire(ctx, holder)
	require.NoError(t, err)
	_, stderr, code = cli(t, a, "lock", "-keys", "a,b", "--", "echo", "should not run")
	assert.Equal(t, exitHeld, code, stderr)
	assert.Contains(t, stderr, "not all free")
	info, err := c.Inspect(ctx, "a")
	require.NoError(t, err)
	assert.False(t, info.Locked, "never a partial grant")

	for _, args := range [][]string{
		{"-keys", "a,a"}, {"-keys", "a,,b"}, {"-keys", "a,b", "-n", "2"}, {"-keys", "a,b", "-shared"},
		{"-keys", "a,b", "-session-ttl", "5s"}, {"-keys", strings.Repeat("k,", 64) + "last"},
	} {
		_, stderr, code = cli(t, a, append(append([]string{"lock"}, args...), "--", "true")...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, stderr)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		assert.Contains(t, stderr, "-keys", "%v", args)
	}
}
