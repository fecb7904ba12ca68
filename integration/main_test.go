package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the raftlock binary, built once for the process clusters.
var binary string

func TestMain(m *testing.M) {
	// The fenced-register workload runs some of its clients as processes of
	// this very test binary, so that a nemesis can pause them with SIGSTOP.
	if os.Getenv(clientProcessEnv) != "" {
		os.Exit(runClientProcess())
	}

	dir, err := os.MkdirTemp("", "raftlock-integration-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "raftlock")
	// The agents are built with the race detector when the tests are
	// (go test -race), so a data race in a node under faults fails the run
	// (see procNode.raceReported). RAFTLOCK_AGENT_RACE=0 or 1 overrides.
	args := []string{"build", "-o", binary}
	if race := os.Getenv("RAFTLOCK_AGENT_RACE"); race == "1" || (race == "" && raceEnabled) {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "../cmd/raftlock")...)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building raftlock:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
