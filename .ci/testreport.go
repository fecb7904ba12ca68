//go:build ignore

// testreport reads `go test -json` on stdin and prints what `go test`
// prints without -v (the packages' results, what tests print themselves,
// a failing test's log), then every test that skipped, with its reason:
// a skip is a test that did not run, and a CI reader must see it.
//
//	go test -json ./... | go run .ci/testreport.go
//
// It exits 0; the exit status of go test is the run's.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type testID struct{ pkg, test string }

func main() {
	logs := map[testID][]string{} // each running test's log, kept until it ends
	var skipped []string
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	for in.Scan() {
		var e event
		if err := json.Unmarshal(in.Bytes(), &e); err != nil {
			fmt.Println(in.Text()) // not an event: go test's own words
			continue
		}
		id := testID{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Print(e.Output)
		case e.Action == "output" && e.Test == "":
			if e.Output != "PASS\n" {
				fmt.Print(e.Output)
			}
		case e.Action == "output" && framework(e.Output):
		case e.Action == "output" && !strings.HasPrefix(e.Output, " "):
			fmt.Print(e.Output) // the test's own print, shown as go test shows it
		case e.Action == "output":
			logs[id] = append(logs[id], e.Output)
		case e.Action == "fail" && e.Test != "":
			fmt.Printf("--- FAIL: %s (%s)\n", e.Test, e.Package)
			fmt.Print(strings.Join(logs[id], ""))
			delete(logs, id)
		case e.Action == "skip" && e.Test != "":
			reason := strings.Join(strings.Fields(strings.Join(logs[id], " ")), " ")
			skipped = append(skipped, fmt.Sprintf("%s %s: %s", e.Package, e.Test, reason))
			delete(logs, id)
		case e.Action == "pass" || e.Action == "skip" || e.Action == "fail":
			delete(logs, id)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Println("testreport:", err)
	}
	fmt.Printf("== skipped: %d tests\n", len(skipped))
	for _, s := range skipped {
		fmt.Println("SKIP", s)
	}
}

// framework reports whether line is the testing package's own (a test
// started, paused, continued, or ended), which go test does not show
// without -v.
func framework(line string) bool {
	trimmed := strings.TrimLeft(line, " ")
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- FAIL", "--- SKIP"} {
		if strings.HasPrefix(trimmed, p) {
			return true
		}
	}
	return false
}
