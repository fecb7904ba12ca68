package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/internal/benchknobs"
	"github.com/raftlock/raftlock/lock"
)

// raftlockSystem is a 3-node raftlock cluster in this process, on loopback
// TCP, each node with its own data dir, DefaultConfig (fsync on).
type raftlockSystem struct {
	p     params
	dir   string
	cfgs  []cluster.Config
	nodes []*cluster.Node // nil once killed
	note  []string
	syncs syncTimes // the raft log's syncs, on every node
}

func newRaftlock(p params) *raftlockSystem { return &raftlockSystem{p: p} }

// syncTimes collects how long the raft log's syncs take (benchknobs.LogSynced).
type syncTimes struct {
	mu sync.Mutex
	d  []time.Duration
}

func (t *syncTimes) add(d time.Duration) {
	t.mu.Lock()
	t.d = append(t.d, d)
	t.mu.Unlock()
}

// summary is the syncs' count and latency quantiles so far.
func (t *syncTimes) summary() string {
	t.mu.Lock()
	d := slices.Clone(t.d)
	t.mu.Unlock()
	if len(d) == 0 {
		return "no syncs recorded"
	}
	slices.Sort(d)
	q := func(p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	return fmt.Sprintf("%d syncs, p50 %v, p99 %v", len(d), q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond))
}

func (s *raftlockSystem) name() string { return sysRaftlock }
func (s *raftlockSystem) members() int { return 3 }
func (s *raftlockSystem) notes() []string {
	return append([]string{
		fmt.Sprintf("3 nodes in one process on loopback TCP, cluster.DefaultConfig() (fsync on, %v heartbeat, %v election timeouts); ",
			cluster.DefaultConfig().HeartbeatTimeout, cluster.DefaultConfig().ElectionTimeout) +
			"clients use lock.Client handles (a fresh owner per acquire) on their local node",
		fmt.Sprintf("raft log syncs (every node, all workloads): %s; -log-sync-delay %v added to each%s; leader writes in parallel: %v",
			s.syncs.summary(), s.p.logSyncDelay, onSlowDisk(s.p), s.p.leaderParallel),
	}, s.note...)
}

// onSlowDisk says, for a note on syncs, whether they ran on the slow disk.
func onSlowDisk(p params) string {
	if p.slowDisk <= 0 {
		return ""
	}
	return fmt.Sprintf(", on the slow disk (-slow-disk %v)", p.slowDisk)
}

func (s *raftlockSystem) commitIndex() uint64 {
	for _, n := range s.nodes {
		if n != nil && n.IsLeader() {
			return n.Stats().CommitIndex
		}
	}
	return 0
}

func (s *raftlockSystem) start(ctx context.Context) error { return s.startCluster(ctx, nil) }

// startCluster bootstraps node 0, joins nodes 1 and 2 to it and waits until
// every node can take and release a lock.
func (s *raftlockSystem) startCluster(ctx context.Context, tweak func(*cluster.Config)) error {
	dir, err := os.MkdirTemp(s.p.dataDir, "bench-raftlock-")
	if err != nil {
		return err
	}
	s.dir, s.cfgs, s.nodes = dir, nil, nil
	benchknobs.LogSyncDelay, benchknobs.LogSynced = s.p.logSyncDelay, s.syncs.add
	for i := range 3 {
		cfg := cluster.DefaultConfig()
		cfg.NodeID = fmt.Sprintf("n%d", i)
		cfg.LeaderWritesInParallel = s.p.leaderParallel
		cfg.DataDir = filepath.Join(dir, cfg.NodeID)
		cfg.Logger = nodeLogger(s.p.verbose)
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = []string{s.nodes[0].Addr()}
		}
		if tweak != nil {
			tweak(&cfg)
		}
		n, err := cluster.New(cfg)
		if err != nil {
			return fmt.Errorf("node %s: %w", cfg.NodeID, err)
		}
		cfg.BindAddr = n.Addr() // a restart comes back on the same address
		s.cfgs = append(s.cfgs, cfg)
		s.nodes = append(s.nodes, n)
		if i == 0 {
			if err := s.ready(ctx, n); err != nil {
				return err
			}
		}
	}
	for _, n := range s.nodes {
		if err := s.ready(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// nodeLogger is a node's logger: the systems' own warnings with -v, else
// nothing.
func nodeLogger(verbose bool) hclog.Logger {
	level := hclog.Off
	if verbose {
		level = hclog.Warn
	}
	return hclog.New(&hclog.LoggerOptions{Name: "raftlock", Level: level, Output: os.Stderr})
}

// ready waits until n takes and releases a lock.
func (s *raftlockSystem) ready(ctx context.Context, n *cluster.Node) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l := lock.New(n).Lock("bench-ready/"+n.ID(), lock.TTL(time.Second))
	for {
		err := cycle(ctx, lockerOf(l))
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("node %s not ready: %w", n.ID(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *raftlockSystem) stop() {
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		if n != nil {
			wg.Go(func() { n.Close() })
		}
	}
	wg.Wait()
	s.nodes = nil
	if s.dir != "" {
		os.RemoveAll(s.dir)
		s.dir = ""
	}
}

func (s *raftlockSystem) leader(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		for i, n := range s.nodes {
			if n != nil && n.IsLeader() {
				return i, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, errors.New("no leader")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// kill closes node i: raft stops without handing leadership over, so the
// others notice only when heartbeats stop, as after a crash.
func (s *raftlockSystem) kill(i int) error {
	n := s.nodes[i]
	s.nodes[i] = nil
	return n.Close()
}

func (s *raftlockSystem) client(_ context.Context, member int) (client, error) {
	return &raftlockClient{c: lock.New(s.nodes[member]), ttl: s.p.ttl}, nil
}

type raftlockClient struct {
	c   *lock.Client
	ttl time.Duration
}

func (c *raftlockClient) locker(key string) locker { return lockerOf(c.c.Lock(key, lock.TTL(c.ttl))) }
func (c *raftlockClient) close()                   {}

func (c *raftlockClient) semaphore(key string, n int) locker {
	return lockerOf(c.c.Semaphore(key, n, lock.TTL(c.ttl)))
}

// raftlockLocker is a lock.Lock handle. Acquire waits as long as ctx allows.
type raftlockLocker struct{ l *lock.Lock }

func lockerOf(l *lock.Lock) locker { return raftlockLocker{l} }

func (l raftlockLocker) tryAcquire(ctx context.Context) (bool, error) { return l.l.TryAcquire(ctx) }
func (l raftlockLocker) acquire(ctx context.Context) error            { return l.l.Acquire(ctx) }
func (l raftlockLocker) release(ctx context.Context) error {
	ok, err := l.l.Release(ctx)
	if err == nil && !ok {
		err = lock.ErrNotHeld
	}
	return err
}

// held fills a fresh cluster with n locks and measures memory, raft's
// snapshot and restore of that state, and the restart of a follower.
func (s *raftlockSystem) held(ctx context.Context, n int, atPeak func()) (figs map[string]float64, err error) {
	s.p.ttl = s.p.heldTTL // the locks must outlive the workload
	timings := installRaftTimings()
	defer uninstallRaftTimings()

	threshold := cluster.DefaultConfig().SnapshotThreshold
	if s.p.snapshotEvery < time.Second {
		threshold = 256 // smoke: a tiny state, so snapshot after a few entries
	}
	err = s.startCluster(ctx, func(c *cluster.Config) {
		c.SnapshotInterval = s.p.snapshotEvery
		c.SnapshotThreshold = threshold
		c.TrailingLogs = threshold
		c.MaxLocks = cluster.Unlimited // -held may ask for more than the default quota
	})
	defer s.stop()
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	s.note = append(s.note, fmt.Sprintf("held: SnapshotInterval %v, SnapshotThreshold and TrailingLogs %d (DefaultConfig: %v, %d) so that raft snapshots the full state "+
		"right after the fill; bytes per lock = heap in use after GC, growth over the empty cluster, divided by 3 nodes (they share this process's heap)",
		s.p.snapshotEvery, threshold, cluster.DefaultConfig().SnapshotInterval, cluster.DefaultConfig().SnapshotThreshold))

	var base uint64
	took, err := fill(ctx, s, s.p, n, func() { base = heapInUse() })
	if err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	filled := time.Now()
	figs = map[string]float64{"held_locks": float64(n), "held_fill_per_s": float64(n) / took.Seconds()}

	// Snapshots of the full state: each node takes one once enough entries
	// follow its last one; release-only traffic on other keys supplies them
	// without changing what is held.
	progress("%s: held: waiting for each node's snapshot of the full state", s.name())
	freezesBefore := s.freezes()
	snaps, err := s.nudgeUntilSnapshots(ctx, timings, filled)
	if err != nil {
		return nil, err
	}
	figs["held_snapshot_ms"] = mean(snaps)
	if size := latestSnapshotSize(s.cfgs[0].DataDir); size > 0 {
		figs["held_snapshot_bytes_per_lock"] = float64(size) / float64(n)
	}
	if held := freezeHeld(freezesBefore, s.freezes()); len(held) > 0 {
		s.note = append(s.note, fmt.Sprintf("held: snapshot %.0fms, of which the state copy held applies up %.1fms in all, in chunks of at most 4096 keys (an apply waits for one chunk at most); write and fsync %.0fms (mean of %d nodes; the rest is log compaction)",
			mean(snaps), mean(held), mean(timings.startedAfter("raft.snapshot.persist", filled)), len(snaps)))
	}

	figs["held_bytes_per_lock"] = perLock(base, heapInUse(), 3, n)
	atPeak()

	progress("%s: held: %.0f bytes per lock per node; restarting a follower", s.name(), figs["held_bytes_per_lock"])
	runs := map[string][]float64{}
	var vsCaught []float64 // -held-restart-vs: the other build's restarts, caught up (ms)
	restarts := max(s.p.heldRestarts, 1)
	if s.p.heldRestartVs != "" {
		restarts *= 2 // this build's and the other's in turn
	}
	for i := range restarts {
		exe := ""
		if s.p.heldRestartVs != "" && i%2 == 1 {
			exe = s.p.heldRestartVs
		}
		restart, err := s.restartFollower(ctx, timings, n, exe)
		if err != nil {
			return nil, fmt.Errorf("restart %d (%s): %w", i+1, cmp.Or(exe, "this build"), err)
		}
		if exe != "" {
			vsCaught = append(vsCaught, restart["held_restart_caughtup_ms"])
			continue
		}
		for k, v := range restart {
			runs[k] = append(runs[k], v)
		}
	}
	if len(vsCaught) > 0 {
		ratios := make([]float64, len(vsCaught))
		for i, v := range vsCaught {
			ratios[i] = runs["held_restart_caughtup_ms"][i] / v
		}
		s.note = append(s.note, fmt.Sprintf("held: -held-restart-vs %s: held_restart_caughtup_ms of its %d restarts, each right after one of this build's: %.0f (median %.0f); this build / that one, pair by pair: %.3f (median %.3f)",
			s.p.heldRestartVs, len(vsCaught), vsCaught, median(vsCaught), ratios, median(ratios)))
	}
	where := "in a new process (the bench's own binary, started on the member's data dir and address; the figures count from its start)"
	if s.p.heldRestart == heldRestartInplace {
		where = "in the bench's process, beside the other two members (a collection during the restore marks all three)"
	}
	s.note = append(s.note, fmt.Sprintf("held: the follower restarts %s; cluster.New returned after %.0fms (raft restores the snapshot inside it); "+
		"a follower's linearizable read is answered by the leader, so 'caught up' (its own state machine holds every lock) is the figure comparable to etcd",
		where, runs["held_restart_new_ms"]))
	delete(runs, "held_restart_new_ms")
	for _, k := range slices.Sorted(maps.Keys(runs)) {
		v := runs[k]
		figs[k] = median(v)
		if len(v) > 1 {
			s.note = append(s.note, fmt.Sprintf("held: %s of the %d restarts: %.0f", k, len(v), v))
		}
	}
	return figs, nil
}

// nudgeUntilSnapshots runs acquire + release cycles on scratch keys until
// every node has taken a snapshot that started after the fill ended, and
// returns their durations (ms).
func (s *raftlockSystem) nudgeUntilSnapshots(ctx context.Context, timings *raftTimings, filled time.Time) ([]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var snaps []float64
	err := parallel(ctx, 8, func(ctx context.Context, i int) error {
		l := lockerOf(lock.New(s.nodes[i%3]).Lock(fmt.Sprintf("bench-nudge/%d", i), lock.TTL(s.p.ttl)))
		for {
			if v := timings.startedAfter("raft.snapshot.takeSnapshot", filled); len(v) >= 3 {
				if i == 0 {
					snaps = v[:3]
				}
				return nil
			}
			if err := cycle(ctx, l); err != nil {
				return err
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for snapshots of the full state: %w", err)
	}
	return snaps, nil
}

// restartFollower closes a follower and starts it again on its data dir,
// timing raft's restore of its snapshot, the first linearizable read it
// answers, and when its own state machine has caught up with the leader:
// in a process of its own (-held-restart process) or in this one (inplace).
// exe is the child's binary (-held-restart-vs), "" for this bench's.
func (s *raftlockSystem) restartFollower(ctx context.Context, timings *raftTimings, n int, exe string) (map[string]float64, error) {
	leader, err := s.leader(ctx)
	if err != nil {
		return nil, err
	}
	f := (leader + 1) % 3
	if err := s.nodes[f].Close(); err != nil {
		return nil, fmt.Errorf("close: %w", err)
	}
	s.nodes[f] = nil
	target := s.nodes[leader].Stats().AppliedIndex

	var r restartReport
	if s.p.heldRestart == heldRestartInplace {
		r, err = s.restartInPlace(ctx, timings, f, n, target)
	} else {
		r, err = s.restartInChild(ctx, exe, f, n, target)
		if err == nil {
			// The cluster goes on with the member back in this process,
			// caught up before the next restart stops another; and the
			// collection of what that restart left behind (three members'
			// state to mark) runs now, not beside the next timed child.
			if err = s.restartUntimed(ctx, f, n); err == nil {
				runtime.GC()
			}
		}
	}
	if err != nil {
		return nil, err
	}
	figs := map[string]float64{
		"held_restart_read_ms":     r.ReadMS,
		"held_restart_caughtup_ms": r.CaughtMS,
	}
	if r.RestoreMS > 0 {
		figs["held_restore_ms"] = r.RestoreMS
	}
	figs["held_restart_new_ms"] = r.NewMS // in the notes, not the table
	return figs, nil
}

// restartInPlace starts follower f again in this process, timed.
func (s *raftlockSystem) restartInPlace(ctx context.Context, timings *raftTimings, f, n int, target uint64) (restartReport, error) {
	stopProfile, err := s.startRestartProfile()
	if err != nil {
		return restartReport{}, err
	}
	defer stopProfile()
	t0 := time.Now()
	node, err := cluster.New(s.cfgs[f])
	if err != nil {
		return restartReport{}, fmt.Errorf("new: %w", err)
	}
	s.nodes[f] = node
	r := restartReport{NewMS: ms(time.Since(t0))}
	readAt, caughtAt, err := awaitCaughtUp(ctx, node, t0, n, target)
	if err != nil {
		return restartReport{}, err
	}
	stopProfile()
	r.ReadMS, r.CaughtMS = ms(readAt), ms(caughtAt)
	if v := timings.startedAfter("raft.fsm.restore", t0); len(v) > 0 {
		r.RestoreMS = v[0]
	}
	return r, nil
}

// restartUntimed starts follower f again in this process and waits until
// it has caught up.
func (s *raftlockSystem) restartUntimed(ctx context.Context, f, n int) error {
	leader, err := s.leader(ctx)
	if err != nil {
		return err
	}
	target := s.nodes[leader].Stats().AppliedIndex
	node, err := cluster.New(s.cfgs[f])
	if err != nil {
		return fmt.Errorf("new after the child: %w", err)
	}
	s.nodes[f] = node
	_, _, err = awaitCaughtUp(ctx, node, time.Now(), n, target)
	return err
}

// startRestartProfile profiles the CPU and traces the goroutines from a
// follower's restart until it has caught up, into raftlock-restart.pprof
// and raftlock-restart.trace under -profiledir (nothing without it): the
// trace shows what a restore's goroutines wait for. The returned stop may
// be called more than once.
func (s *raftlockSystem) startRestartProfile() (stop func(), err error) {
	if s.p.profileDir == "" {
		return func() {}, nil
	}
	base := filepath.Join(s.p.profileDir, s.name()+"-restart")
	prof, err := os.Create(base + ".pprof")
	if err != nil {
		return nil, err
	}
	tr, err := os.Create(base + ".trace")
	if err != nil {
		prof.Close()
		return nil, err
	}
	if err := pprof.StartCPUProfile(prof); err != nil {
		prof.Close()
		tr.Close()
		return nil, err
	}
	if err := trace.Start(tr); err != nil {
		pprof.StopCPUProfile()
		prof.Close()
		tr.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			trace.Stop()
			pprof.StopCPUProfile()
			prof.Close()
			tr.Close()
		})
	}, nil
}

// latestSnapshotSize is the size of the newest snapshot's state file in a
// node's data dir (raft's file snapshot store: snapshots/<id>/state.bin).
func latestSnapshotSize(dataDir string) int64 {
	matches, _ := filepath.Glob(filepath.Join(dataDir, "snapshots", "*", "state.bin"))
	var newest os.FileInfo
	for _, m := range matches {
		if strings.HasSuffix(filepath.Dir(m), ".tmp") {
			continue // raft's snapshot still being written: its state.bin is partial
		}
		fi, err := os.Stat(m)
		if err == nil && (newest == nil || fi.ModTime().After(newest.ModTime())) {
			newest = fi
		}
	}
	if newest == nil {
		return 0
	}
	return newest.Size()
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// freezes reads each running node's snapshot freeze timing (Stats.Freeze).
func (s *raftlockSystem) freezes() map[string]cluster.Timing {
	out := map[string]cluster.Timing{}
	for _, n := range s.nodes {
		if n != nil {
			out[n.ID()] = n.Stats().Freeze
		}
	}
	return out
}

// freezeHeld is, per node that snapshotted between before and after, the
// mean time a snapshot's copy held its state machine's lock, in ms.
func freezeHeld(before, after map[string]cluster.Timing) []float64 {
	var out []float64
	for id, a := range after {
		b := before[id]
		if a.Count > b.Count {
			out = append(out, float64(a.Total-b.Total)/float64(a.Count-b.Count)/float64(time.Millisecond))
		}
	}
	return out
}
