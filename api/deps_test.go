package api

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/internal/testskip"
)

// The client is light: a program that only talks to a node over HTTP links
// package lock and the standard library, not raft, its log stores or the
// server's metrics, nor the JSON v2 module the server decodes unusual
// bodies with. The server is package apiserver.
func TestClientLinksNoServerDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		testskip.Skip(t, "the go tool is not on PATH, so the client's dependencies cannot be listed: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/raftlock/raftlock/api").CombinedOutput()
	require.NoError(t, err, "go list -deps: %s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/raftlock/raftlock/lock", "the listing is the client's")
	for _, dep := range deps {
		for _, heavy := range []string{"hashicorp/raft", "raftlock/raftlock/internal/raft", "raft-wal", "bbolt", "prometheus", "raftlock/raftlock/cluster", "raftlock/raftlock/fsm", "raftlock/raftlock/apiserver", "go-json-experiment"} {
			assert.NotContains(t, dep, heavy, "package api must not depend on %s", dep)
		}
	}
}
