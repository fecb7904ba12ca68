// Package testskip skips a test that this machine cannot run (no root for
// a small file system, no browser, no go tool) and writes down that it did,
// so a CI reader learns which tests did not run: go test prints a skip only
// with -v, and CI runs the test command exactly as README gives it.
//
// When the environment variable RAFTLOCK_SKIP_LOG names a file, Skip
// appends one line to it: the test's name and the reason. .ci/run sets it
// and prints the file after the tests. Only test files import this package.
package testskip

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// LogEnv names the file Skip appends to.
const LogEnv = "RAFTLOCK_SKIP_LOG"

var mu sync.Mutex // serializes appends from parallel tests of one binary

// Skip records that t did not run and why, then skips it.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if path := os.Getenv(LogEnv); path != "" {
		mu.Lock()
		// O_APPEND writes of one short line are atomic between the test
		// binaries of several packages running at once.
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintf(f, "%s: %s\n", t.Name(), reason)
			f.Close()
		}
		mu.Unlock()
	}
	t.Skip(reason)
}
