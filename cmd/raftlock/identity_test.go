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
)

// A data dir remembers whose it is: agent c's directory, started as x,
// is refused at once with a one-line usage error that names the flags to
// fix, and c starts on it again.
func TestAgentRefusesAnotherNodesDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	c := startAgent(t, "-node-id", "c", "-data-dir", dir, "-bind", "127.0.0.1:0", "-bootstrap")
	c.waitLeader(t)
	c.kill(syscall.SIGKILL)

	// Bounded: the old agent started as x, serving, instead of exiting.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errOut bytes.Buffer
	x := exec.CommandContext(ctx, binary, "agent", "-node-id", "x", "-data-dir", dir, "-bind", "127.0.0.1:0", "-http", "127.0.0.1:0", "-bootstrap")
	x.Stderr = &errOut
	err := x.Run()
	require.NoError(t, ctx.Err(), "x started on c's data dir")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	stderr := errOut.String()
	assert.Equal(t, exitUsage, exit.ExitCode(), "stderr: %s", stderr)
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)
	assert.Contains(t, stderr, `belongs to node "c"`)
	assert.Contains(t, stderr, "-node-id c")
	assert.Contains(t, stderr, "-data-dir")

	again := startAgent(t, "-node-id", "c", "-data-dir", dir, "-bind", "127.0.0.1:0")
	again.waitLeader(t)
}
