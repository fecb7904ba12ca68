package integration

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// settings are what the environment asks of a run.
//
//	RAFTLOCK_LONG=1               the long version: minutes per scenario
//	RAFTLOCK_SCENARIO_SECONDS=N   how long each scenario's workload runs (default 10, or 180 when long)
//	RAFTLOCK_SEED=N               the seed of the nemesis schedules and clients' choices (default: random, printed)
//	RAFTLOCK_VIOLATIONS_DIR=DIR   where a violation's history and visualisation are kept
//	                              (default: $TMPDIR/raftlock-violations)
//	RAFTLOCK_AGENT_RACE=0|1       build the agents with or without the race detector
//	                              (default: as the tests are built)
type settings struct {
	long          bool
	workload      time.Duration
	seed          uint64
	violationsDir string
}

func loadSettings(t testing.TB) settings {
	t.Helper()
	s := settings{long: os.Getenv("RAFTLOCK_LONG") == "1", workload: 10 * time.Second, seed: rand.Uint64()}
	if s.long {
		s.workload = 3 * time.Minute
	}
	if v := os.Getenv("RAFTLOCK_SCENARIO_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("RAFTLOCK_SCENARIO_SECONDS=%q: want a positive number of seconds", v)
		}
		s.workload = time.Duration(n) * time.Second
	}
	if v := os.Getenv("RAFTLOCK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("RAFTLOCK_SEED=%q: want a number", v)
		}
		s.seed = n
	}
	s.violationsDir = os.Getenv("RAFTLOCK_VIOLATIONS_DIR")
	if s.violationsDir == "" {
		s.violationsDir = filepath.Join(os.TempDir(), "raftlock-violations")
	}
	return s
}

// rng returns a generator for one purpose of the scenario, so that the
// nemesis schedule does not shift when a client draws more numbers.
func (s settings) rng(purpose uint64) *rand.Rand {
	return rand.New(rand.NewPCG(s.seed, purpose))
}

// report is what a scenario found; its line is the one summary line the
// scenario prints.
type report struct {
	name     string
	seed     uint64
	started  time.Time
	duration time.Duration

	ops     int // operations with a known outcome
	unsure  int // of those, operations where some attempt's outcome was unknown first
	unknown int // operations whose outcome stayed unknown
	dropped int // operations that certainly took no effect (no leader in time), or reads that failed
	extra   []string

	mu         sync.Mutex // protects faults, failovers, violations, problems
	faults     map[string]int
	failovers  []time.Duration
	recovery   time.Duration // the longest a cluster took to serve again after a fault was healed
	recoverOf  string        // which fault that was
	violations []string      // safety: what must never happen
	problems   []string      // liveness and harness trouble: the run is not good evidence
	artifacts  string
	events     *eventLog // the scenario's timeline, shown with -v when asked (RAFTLOCK_EVENTS=1) or on trouble
}

func newReport(name string, s settings) *report {
	return &report{name: name, seed: s.seed, started: time.Now(), faults: map[string]int{}}
}

func (r *report) fault(name string) {
	r.mu.Lock()
	r.faults[name]++
	r.mu.Unlock()
}

func (r *report) failover(d time.Duration) {
	r.mu.Lock()
	r.failovers = append(r.failovers, d)
	r.mu.Unlock()
}

func (r *report) recovered(fault string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d > r.recovery {
		r.recovery, r.recoverOf = d, fault
	}
}

func (r *report) violation(format string, args ...any) {
	r.mu.Lock()
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *report) problem(format string, args ...any) {
	r.mu.Lock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// atLeast makes a run that did less than least of what it checks a
// problem: every checker passes an empty history, so a run whose clients
// completed nothing (a cluster that never served) would pass them all.
func (r *report) atLeast(least, n int, what string) {
	if n < least {
		r.problem("%d %s, want at least %d: the checks had nothing to check", n, what, least)
	}
}

func (r *report) note(format string, args ...any) {
	r.extra = append(r.extra, fmt.Sprintf(format, args...))
}

// line is the scenario's summary line.
func (r *report) line() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := 0
	var kinds []string
	for k, n := range r.faults {
		total += n
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s: %d ops (%d after an unknown attempt), %d unknown outcomes, %d without effect; %d faults",
		r.name, r.ops, r.unsure, r.unknown, r.dropped, total)
	if len(kinds) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(kinds, " "))
	}
	fmt.Fprintf(&b, "; %d violations", len(r.violations))
	if len(r.problems) > 0 {
		fmt.Fprintf(&b, ", %d problems", len(r.problems))
	}
	if len(r.failovers) > 0 {
		worst := slices.Max(r.failovers)
		fmt.Fprintf(&b, "; failover worst %v of %d", worst.Round(time.Millisecond), len(r.failovers))
	}
	if r.recovery > 0 {
		fmt.Fprintf(&b, "; slowest recovery %v (after %s)", r.recovery.Round(time.Millisecond), r.recoverOf)
	}
	for _, e := range r.extra {
		fmt.Fprintf(&b, "; %s", e)
	}
	fmt.Fprintf(&b, "; %v, seed %d", r.duration.Round(100*time.Millisecond), r.seed)
	if r.artifacts != "" {
		fmt.Fprintf(&b, "; history in %s", r.artifacts)
	}
	return b.String()
}

// finish prints the summary line and fails the test for every violation
// and problem.
func (r *report) finish(t testing.TB) {
	t.Helper()
	r.duration = time.Since(r.started)
	line := r.line()
	fmt.Println(line)
	t.Log(line)
	if r.events != nil && (os.Getenv("RAFTLOCK_EVENTS") == "1" || len(r.violations) > 0 || len(r.problems) > 0) {
		t.Logf("timeline:\n%s", r.events)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		t.Errorf("VIOLATION: %s", v)
	}
	for _, p := range r.problems {
		t.Errorf("problem: %s", p)
	}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// keep writes a violation's files under the violations directory (a
// t.TempDir would be removed with the test) and remembers where.
func (r *report) keep(s settings, files map[string]func(io.Writer) error) {
	dir := filepath.Join(s.violationsDir, fmt.Sprintf("%s-%s-seed%d", unsafeName.ReplaceAllString(r.name, "_"), r.started.Format("20060102-150405"), r.seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.problem("keeping the history: %v", err)
		return
	}
	for name, write := range files {
		f, err := os.Create(filepath.Join(dir, name))
		if err == nil {
			err = write(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			r.problem("keeping %s: %v", name, err)
		}
	}
	r.artifacts = dir
}
