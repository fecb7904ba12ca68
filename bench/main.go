// Command bench runs the same lock workloads against raftlock, etcd and Redis
// on this machine and prints one table (with raftlock's ratio to each peer)
// and one machine-readable BENCH line. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/lock"
)

// params are the knobs every workload and system reads.
type params struct {
	logSyncDelay   time.Duration // raftlock: added to each sync of the raft log (benchknobs)
	slowDisk       time.Duration // every system: added to each fsync of its data dir (slowdisk_linux.go)
	leaderParallel bool          // raftlock: cluster.Config.LeaderWritesInParallel
	duration       time.Duration // measured window of seq, par64 and contend16
	rounds         int           // times each system runs, in turn; figures are the medians
	warmup         time.Duration // run before each measured window, not counted
	parClients     int
	contendClient  int
	semClients     int    // clients of the sem8 workload, all on one semaphore
	semLimit       int    // its slots
	held           int    // locks held by raftlock in the held workload
	heldPeers      int    // locks held by etcd and Redis in the held workload
	heldRestarts   int    // raftlock: times a follower is restarted in the held workload
	heldRestart    string // raftlock: where: heldRestartProcess or heldRestartInplace
	heldRestartVs  string // raftlock: another build's bench binary whose restarts alternate with this one's; "" for none
	fillClients    int
	ttl            time.Duration // lease of every lock the workloads take
	heldTTL        time.Duration // lease of the held locks: longer than the whole held workload
	redisPoll      time.Duration // retry interval of the Redis blocking acquire
	redisServer    string
	installRedis   bool
	snapshotEvery  time.Duration // raftlock's SnapshotInterval in the held workload
	profileDir     string
	verbose        bool
	// httpClientEach gives each raftlock-http client an api.Client of its
	// own, rather than one per node shared by the node's clients.
	httpClientEach bool
	// raftlock's own workloads (watch.go)
	watchers    int           // watchers of one key in the watch workload
	watchRounds int           // releases they are told of
	sessions    int           // sessions kept alive in the keepalive workload
	sessionTTL  time.Duration // their TTL
	// dataDir is where the systems make their data dirs: the slow disk's
	// mount, or "" for the machine's temp dir.
	dataDir string
}

func main() {
	if isRestartChild() {
		if err := serveRestart(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: restarted member:", err)
			os.Exit(1)
		}
		return
	}
	if isSlowDiskChild() {
		if err := serveSlowDisk(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err) // the bench reports it
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		p          params
		systems    = flag.String("systems", strings.Join(allSystems, ","), "systems to run, comma-separated: "+strings.Join(allSystems, ", "))
		workloads  = flag.String("workloads", strings.Join(allWorkloads, ","), "workloads to run, comma-separated: "+strings.Join(allWorkloads, ", "))
		smoke      = flag.Bool("smoke", false, "run every workload at a tiny size (seconds, for CI); overrides the size flags")
		cpuProfile = flag.String("cpuprofile", "", "write a CPU profile of the whole run to `file`")
		memProfile = flag.String("memprofile", "", "write a heap profile to `file` once raftlock holds its locks in the held workload")
	)
	flag.IntVar(&p.rounds, "rounds", 1, "run the systems this many times in turn (each started afresh) and report each figure's median over the rounds: the machine's speed drifts by more than the systems differ, and rounds that alternate the systems see the same drift")
	flag.DurationVar(&p.logSyncDelay, "log-sync-delay", 0, "raftlock: add this `duration` to every sync of the raft log's WAL segment files (a slower disk's fsync; the report gives the syncs' latency)")
	flag.DurationVar(&p.slowDisk, "slow-disk", 0, "put the data dirs of every system on a FUSE loopback file system (mounted for the run) whose fsync and fdatasync each take this `duration` longer; 0: off")
	flag.BoolVar(&p.leaderParallel, "leader-parallel", cluster.DefaultConfig().LeaderWritesInParallel, "raftlock: the leader writes a new entry while it replicates it (cluster.Config.LeaderWritesInParallel; false: it syncs first, as hashicorp/raft does)")
	flag.DurationVar(&p.duration, "d", 10*time.Second, "measured `duration` of seq, par64 and contend16, per system")
	flag.DurationVar(&p.warmup, "warmup", time.Second, "unmeasured run before each measured window")
	flag.IntVar(&p.parClients, "par", 64, "clients of the par64 workload (each on its own key)")
	flag.IntVar(&p.contendClient, "contend", 16, "clients of the contend16 workload (all on one key)")
	flag.IntVar(&p.semClients, "sem-clients", 64, "clients of the sem8 workload (all on one semaphore)")
	flag.IntVar(&p.semLimit, "sem-limit", 8, "slots of the sem8 workload's semaphore")
	flag.IntVar(&p.held, "held", 1_000_000, "locks raftlock holds in the held workload")
	flag.IntVar(&p.heldRestarts, "held-restarts", 1, "raftlock: restart a follower this many times in turn after the held fill, and report the median restart (each one's figures are in the notes): one fill, several restarts")
	flag.StringVar(&p.heldRestartVs, "held-restart-vs", "", "raftlock: the bench binary of another build (go build -o FILE in its bench directory): the follower's restarts alternate between this build and that one, -held-restarts of each, on the same fill, and the notes give that build's figures and the ratio pair by pair (with -held-restart process)")
	flag.StringVar(&p.heldRestart, "held-restart", heldRestartProcess, "raftlock: where the held workload restarts its follower: "+heldRestartProcess+" (a process of its own, as a real member's restart is) or "+heldRestartInplace+" (in the bench's process, beside the other two members)")
	flag.IntVar(&p.heldPeers, "held-peers", 200_000, "locks etcd and Redis hold in the held workload (0: same as -held)")
	flag.IntVar(&p.fillClients, "fill-clients", 256, "clients that take the held locks")
	flag.DurationVar(&p.ttl, "ttl", 30*time.Second, "lease of the locks taken by seq, par64, contend16 and failover")
	flag.DurationVar(&p.heldTTL, "held-ttl", time.Hour, "lease of the held locks")
	flag.DurationVar(&p.redisPoll, "redis-poll", 10*time.Millisecond, "retry interval of the Redis blocking acquire (SET NX in a loop)")
	flag.StringVar(&p.redisServer, "redis-server", "redis-server", "redis-server binary (name in PATH or path)")
	flag.BoolVar(&p.installRedis, "install-redis", true, "if redis-server is missing and we are root, run apt-get install -y redis-server")
	flag.DurationVar(&p.snapshotEvery, "held-snapshot-interval", 2*time.Second, "raftlock's SnapshotInterval in the held workload, so that raft snapshots right after the fill (DefaultConfig's is 2m)")
	flag.StringVar(&p.profileDir, "profiledir", "", "write one CPU profile per system and workload into `dir` (e.g. raftlock-seq.pprof; for held, of the restart only: raftlock-restart.pprof, and its execution trace raftlock-restart.trace), and the allocations profile before and after it (raftlock-seq.allocs0.pprof, raftlock-seq.allocs.pprof)")
	flag.BoolVar(&p.httpClientEach, "http-client-each", false, "raftlock-http: give each client an api.Client of its own (one process per client) instead of one per node shared by its clients (one application per node)")
	flag.BoolVar(&p.verbose, "v", false, "log each step and the systems' own warnings")
	flag.IntVar(&p.watchers, "watchers", 1000, "watchers of one key in the watch workload (raftlock only)")
	flag.IntVar(&p.watchRounds, "watch-rounds", 5, "releases the watchers are told of, per transport, in the watch workload")
	flag.IntVar(&p.sessions, "sessions", 10_000, "sessions kept alive in the keepalive workload (raftlock only)")
	flag.DurationVar(&p.sessionTTL, "session-ttl", lock.DefaultSessionTTL, "TTL of the keepalive workload's sessions (renewed every TTL/3)")
	flag.Parse()

	if *smoke {
		p.duration, p.warmup = 500*time.Millisecond, 100*time.Millisecond
		p.parClients, p.contendClient, p.semClients = 8, 4, 16
		p.held, p.heldPeers, p.fillClients = 2000, 2000, 16
		p.snapshotEvery = 200 * time.Millisecond
		p.watchers, p.watchRounds = 50, 2
		p.sessions, p.sessionTTL = 200, 1500*time.Millisecond
	}
	if p.heldPeers == 0 {
		p.heldPeers = p.held
	}
	if err := p.validate(); err != nil {
		return err
	}
	syss, err := pick("system", *systems, allSystems)
	if err != nil {
		return err
	}
	wls, err := pick("workload", *workloads, allWorkloads)
	if err != nil {
		return err
	}
	if p.profileDir != "" {
		if err := os.MkdirAll(p.profileDir, 0o755); err != nil {
			return err
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var disk *slowDisk
	if p.slowDisk > 0 {
		disk, err = mountSlowDisk(p.slowDisk)
		if err != nil {
			return fmt.Errorf("-slow-disk: %w", err)
		}
		// For the early returns: the normal path unmounts before the report,
		// to print what the server saw, and unmount is then a no-op.
		defer disk.unmount()
		p.dataDir = disk.dir()
	}

	rep := newReport(p, syss, wls)
	if disk == nil { // the slow disk's note times the disk beneath it too
		rep.generalNote(diskNote(p.dataDir))
	}
	start := time.Now()
	rounds := make([]*report, p.rounds)
	for i := range rounds {
		rounds[i] = rep
		if p.rounds > 1 {
			rounds[i] = newReport(p, syss, wls)
			progress("round %d of %d", i+1, p.rounds)
		}
		for _, name := range syss {
			if ctx.Err() != nil {
				break
			}
			sys, err := newSystem(name, p)
			if err != nil {
				rounds[i].skip(name, err)
				progress("%s: skipped: %v", name, err)
				continue
			}
			runSystem(ctx, sys, p, wls, rounds[i], *memProfile)
		}
	}
	if p.rounds > 1 {
		rep.mergeRounds(rounds)
	}
	rep.load = loadAverage()
	rep.elapsed = time.Since(start)
	var unmountErr error
	if disk != nil {
		counts, err := disk.unmount()
		rep.generalNote(disk.note(counts))
		unmountErr = err
	}
	rep.print(os.Stdout)
	if err := ctx.Err(); err != nil {
		return err
	}
	if unmountErr != nil {
		return fmt.Errorf("-slow-disk: %w", unmountErr)
	}
	if n := rep.failures(); n > 0 {
		return fmt.Errorf("%d workload(s) failed; see the notes above", n)
	}
	return nil
}

func (p params) validate() error {
	switch {
	case p.duration <= 0:
		return errors.New("-d must be positive")
	case p.slowDisk < 0:
		return errors.New("-slow-disk must not be negative")
	case p.rounds < 1 || p.rounds > 100:
		return fmt.Errorf("-rounds must be between 1 and 100 (got %d)", p.rounds)
	case p.heldRestart != heldRestartProcess && p.heldRestart != heldRestartInplace:
		return fmt.Errorf("-held-restart must be %s or %s (got %q)", heldRestartProcess, heldRestartInplace, p.heldRestart)
	case p.heldRestartVs != "" && p.heldRestart != heldRestartProcess:
		return fmt.Errorf("-held-restart-vs runs the other build's restarts as processes: it needs -held-restart %s (got %q)", heldRestartProcess, p.heldRestart)
	case p.heldRestartVs != "" && !isExecutable(p.heldRestartVs):
		return fmt.Errorf("-held-restart-vs %q is not an executable file: build the other bench with go build -o FILE in its bench directory", p.heldRestartVs)
	case p.warmup < 0:
		return errors.New("-warmup must not be negative")
	case p.parClients < 1 || p.contendClient < 1 || p.fillClients < 1 || p.semClients < 1:
		return errors.New("-par, -contend, -sem-clients and -fill-clients must be at least 1")
	case p.semLimit < 1 || p.semLimit > 65536:
		return fmt.Errorf("-sem-limit must be between 1 and 65536 (got %d)", p.semLimit)
	case p.held < 1 || p.heldPeers < 1:
		return errors.New("-held and -held-peers must be at least 1")
	case p.ttl < time.Second || p.heldTTL < time.Minute:
		return errors.New("-ttl must be at least 1s and -held-ttl at least 1m")
	case p.redisPoll <= 0:
		return errors.New("-redis-poll must be positive")
	case p.snapshotEvery < 5*time.Millisecond:
		return errors.New("-held-snapshot-interval must be at least 5ms")
	case p.watchers < 1 || p.watchRounds < 1 || p.sessions < 1:
		return errors.New("-watchers, -watch-rounds and -sessions must be at least 1")
	case p.sessionTTL < time.Second:
		return errors.New("-session-ttl must be at least 1s")
	}
	return nil
}

// pick parses a comma-separated list of names, each of which must be known,
// and returns them in the order of known.
func pick(what, list string, known []string) ([]string, error) {
	want := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		ok := false
		for _, k := range known {
			ok = ok || k == s
		}
		if !ok {
			return nil, fmt.Errorf("unknown %s %q (known: %s)", what, s, strings.Join(known, ", "))
		}
		want[s] = true
	}
	var out []string
	for _, k := range known {
		if want[k] {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s selected", what)
	}
	return out, nil
}

// runSystem starts sys and runs the selected workloads on it. The throughput
// workloads and failover share one cluster (failover last: it kills the
// leader); held gets a fresh one, so that a million locks do not weigh on
// the others.
func runSystem(ctx context.Context, sys system, p params, wls []string, rep *report, memProfile string) {
	name := sys.name()
	want := map[string]bool{}
	for _, w := range wls {
		want[w] = true
	}
	needShared := want[wlSeq] || want[wlPar] || want[wlContend] || want[wlSem] || want[wlWatch] || want[wlKeepalive] || want[wlFailover]
	if needShared {
		progress("%s: starting", name)
		t0 := time.Now()
		if err := sys.start(ctx); err != nil {
			rep.fail(name, []string{wlSeq, wlPar, wlContend, wlSem, wlWatch, wlKeepalive, wlFailover}, fmt.Errorf("start: %w", err))
			progress("%s: start failed: %v", name, err)
		} else {
			progress("%s: up in %v", name, time.Since(t0).Round(time.Millisecond))
			for _, w := range []string{wlSeq, wlPar, wlContend, wlSem, wlWatch, wlKeepalive, wlFailover} {
				if !want[w] || ctx.Err() != nil {
					continue
				}
				runWorkload(ctx, sys, w, p, rep, memProfile)
			}
		}
		sys.stop()
	}
	if want[wlHeld] && ctx.Err() == nil {
		runWorkload(ctx, sys, wlHeld, p, rep, memProfile)
	}
	for _, note := range sys.notes() {
		rep.note(name, note)
	}
}

func runWorkload(ctx context.Context, sys system, w string, p params, rep *report, memProfile string) {
	name := sys.name()
	progress("%s: %s", name, w)
	if p.profileDir != "" && w != wlHeld {
		path := fmt.Sprintf("%s/%s-%s.pprof", p.profileDir, name, w)
		if f, err := os.Create(path); err == nil {
			if err := pprof.StartCPUProfile(f); err == nil {
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			} else {
				// A whole-run -cpuprofile is already on; per-workload ones cannot nest.
				progress("%s: %s: no per-workload profile: %v", name, w, err)
				f.Close()
				os.Remove(path)
			}
		}
	}
	if p.profileDir != "" && w != wlHeld {
		// Allocations: the cumulative profile before and after, for
		// go tool pprof -sample_index=alloc_space -base BEFORE AFTER.
		base := fmt.Sprintf("%s/%s-%s.allocs", p.profileDir, name, w)
		writeAllocsProfile(base + "0.pprof")
		defer writeAllocsProfile(base + ".pprof")
	}
	t0 := time.Now()
	var (
		figs map[string]float64
		err  error
	)
	cpu0 := processCPU()
	indexer, _ := sys.(raftIndexer)
	var index0 uint64
	if indexer != nil {
		index0 = indexer.commitIndex()
	}
	switch w {
	case wlSeq:
		figs, err = runSeq(ctx, sys, p)
	case wlPar:
		figs, err = runPar(ctx, sys, p)
	case wlContend:
		figs, err = runContend(ctx, sys, p)
	case wlSem:
		figs, err = runSem(ctx, sys, p)
	case wlWatch:
		figs, err = runWatchFanout(ctx, sys, p)
	case wlKeepalive:
		figs, err = runKeepalive(ctx, sys, p)
	case wlFailover:
		figs, err = runFailover(ctx, sys, p)
	case wlHeld:
		figs, err = runHeld(ctx, sys, p, rep, memProfile)
	}
	if err != nil {
		rep.fail(name, []string{w}, err)
		progress("%s: %s failed after %v: %v", name, w, time.Since(t0).Round(time.Millisecond), err)
		return
	}
	prefix := map[string]string{wlSeq: "seq", wlPar: "par", wlContend: "contend", wlSem: "sem"}[w]
	if total := figs[prefix+"_cycles_total"]; indexer != nil && prefix != "" && total > 0 {
		// Raft entries committed per acquire+release: how well concurrent
		// commands share entries (and fsyncs).
		figs[prefix+"_raft_entries_per_cycle"] = float64(indexer.commitIndex()-index0) / total
	}
	if total := figs[prefix+"_cycles_total"]; prefix != "" && total > 0 && inProcess(name) {
		// CPU per cycle, warm-up included: less sensitive to the machine's
		// other load than the rate.
		figs[prefix+"_cpu_ms_per_cycle"] = ms(processCPU()-cpu0) / total
	}
	rep.add(name, figs)
	progress("%s: %s done in %v: %s", name, w, time.Since(t0).Round(time.Millisecond), formatFigures(figs))
}

// runHeld runs the held workload. Peers hold p.heldPeers locks. raftlock
// holds as many when it is compared with a peer (snapshot and restart times
// grow with the count, so ratios need equal counts), and then p.held on its
// own, reported under "big_" keys.
func runHeld(ctx context.Context, sys system, p params, rep *report, memProfile string) (map[string]float64, error) {
	if sys.name() != sysRaftlock {
		return sys.held(ctx, p.heldPeers, func() {})
	}
	compared := len(rep.systems) > 1
	if !compared || p.held == p.heldPeers {
		return sys.held(ctx, p.held, func() { writeHeapProfile(memProfile) })
	}
	figs, err := sys.held(ctx, p.heldPeers, func() {})
	if err != nil {
		return nil, err
	}
	progress("%s: held at %d locks: %s; now %d locks on its own", sys.name(), p.heldPeers, formatFigures(figs), p.held)
	big, err := sys.held(ctx, p.held, func() { writeHeapProfile(memProfile) })
	if err != nil {
		return nil, fmt.Errorf("at %d locks: %w", p.held, err)
	}
	for k, v := range big {
		figs["big_"+k] = v
	}
	return figs, nil
}

func writeHeapProfile(path string) {
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		progress("memprofile: %v", err)
		return
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		progress("memprofile: %v", err)
	}
}

// writeAllocsProfile writes the allocations since the start (the "allocs"
// profile) to path.
func writeAllocsProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		progress("allocs profile: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		progress("allocs profile: %v", err)
	}
}

// processCPU is the CPU time (user + system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// inProcess says whether a system runs wholly in this process, so that the
// process's CPU time is the system's and its clients' (not Redis's).
func inProcess(name string) bool {
	return name != sysRedis && name != sysRedisAOF && name != sysRedisStore
}

// progress logs a step to stderr, so that stdout holds only the results.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// loadAverage reads /proc/loadavg: the machine's load while we ran, which
// the figures depend on.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
