package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/internal/benchknobs"
)

// A real member's restart is a new process: its heap starts empty and holds
// nothing but its own state, where a node restarted inside the bench shares
// the heap with the two others (20 million more locks at -held 10000000),
// and a collection during its restore marks all three. -held-restart process
// (the default) therefore restarts the follower as a child process of the
// bench on the same data dir and address; -held-restart inplace restarts it
// in the bench's own process, as earlier versions did.

// restartChildEnv, when set, makes this process a restarted follower: the
// variable's value is its restartOrder in JSON; the child writes its
// restartReport in JSON on stdout and exits.
const restartChildEnv = "RAFTLOCK_BENCH_RESTART_MEMBER"

// -held-restart's values.
const (
	heldRestartProcess = "process"
	heldRestartInplace = "inplace"
)

func isRestartChild() bool { return os.Getenv(restartChildEnv) != "" }

// restartOrder is what the child needs: the member's configuration (the
// fields the bench sets; the rest is cluster.DefaultConfig's: a field that
// startCluster or held comes to set must be carried here too), and what
// caught up means.
type restartOrder struct {
	NodeID            string
	DataDir           string
	BindAddr          string
	Join              []string
	LeaderParallel    bool
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	MaxLocks          int
	LogSyncDelay      time.Duration
	Verbose           bool
	ProfileDir        string
	Started           time.Time // when the bench started the child: the restart's zero
	Keys              int       // locks the member must hold
	Target            uint64    // the leader's applied index when the member stopped
}

// restartReport is the child's figures, in ms from Started.
type restartReport struct {
	NewMS, ReadMS, CaughtMS, RestoreMS float64
}

func orderOf(cfg cluster.Config, p params) restartOrder {
	return restartOrder{
		NodeID: cfg.NodeID, DataDir: cfg.DataDir, BindAddr: cfg.BindAddr, Join: cfg.Join,
		LeaderParallel: cfg.LeaderWritesInParallel, SnapshotInterval: cfg.SnapshotInterval,
		SnapshotThreshold: cfg.SnapshotThreshold, TrailingLogs: cfg.TrailingLogs, MaxLocks: cfg.MaxLocks,
		LogSyncDelay: p.logSyncDelay, Verbose: p.verbose, ProfileDir: p.profileDir,
	}
}

func (o restartOrder) config() cluster.Config {
	cfg := cluster.DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.BindAddr, cfg.Join = o.NodeID, o.DataDir, o.BindAddr, o.Join
	cfg.LeaderWritesInParallel = o.LeaderParallel
	cfg.SnapshotInterval, cfg.SnapshotThreshold, cfg.TrailingLogs = o.SnapshotInterval, o.SnapshotThreshold, o.TrailingLogs
	cfg.MaxLocks = o.MaxLocks
	cfg.Logger = nodeLogger(o.Verbose)
	return cfg
}

// serveRestart is the child: it starts the member, waits until it has
// caught up, reports, and closes it.
func serveRestart() error {
	var o restartOrder
	if err := json.Unmarshal([]byte(os.Getenv(restartChildEnv)), &o); err != nil {
		return fmt.Errorf("restart child: bad order: %w", err)
	}
	benchknobs.LogSyncDelay = o.LogSyncDelay
	timings := installRaftTimings()
	s := &raftlockSystem{p: params{profileDir: o.ProfileDir}}
	stopProfile, err := s.startRestartProfile()
	if err != nil {
		return err
	}
	defer stopProfile()
	node, err := cluster.New(o.config())
	if err != nil {
		return fmt.Errorf("new: %w", err)
	}
	defer node.Close()
	r := restartReport{NewMS: ms(time.Since(o.Started))}
	readAt, caughtAt, err := awaitCaughtUp(context.Background(), node, o.Started, o.Keys, o.Target)
	if err != nil {
		return err
	}
	stopProfile()
	r.ReadMS, r.CaughtMS = ms(readAt), ms(caughtAt)
	if v := timings.startedAfter("raft.fsm.restore", o.Started); len(v) > 0 {
		r.RestoreMS = v[0]
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// restartInChild runs follower f's restart as a child process (see
// serveRestart) of exe, this bench's binary when "", and returns its report
// once the child has exited. Another build's bench (-held-restart-vs) must
// speak the same restartOrder and restartReport.
func (s *raftlockSystem) restartInChild(ctx context.Context, exe string, f, keys int, target uint64) (restartReport, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return restartReport{}, err
		}
	}
	o := orderOf(s.cfgs[f], s.p)
	o.Keys, o.Target = keys, target
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Stderr = os.Stderr
	o.Started = time.Now()
	js, err := json.Marshal(o)
	if err != nil {
		return restartReport{}, err
	}
	cmd.Env = append(os.Environ(), restartChildEnv+"="+string(js))
	out, err := cmd.Output()
	if err != nil {
		return restartReport{}, fmt.Errorf("restart child: %w", err)
	}
	var r restartReport
	if err := json.Unmarshal(out, &r); err != nil {
		return restartReport{}, fmt.Errorf("restart child said %q: %w", out, err)
	}
	return r, nil
}

// awaitCaughtUp waits until node answers a linearizable read of a held lock
// and until its own state machine holds keys locks at target or later, and
// says when each happened, from t0.
func awaitCaughtUp(ctx context.Context, node *cluster.Node, t0 time.Time, keys int, target uint64) (readAt, caughtAt time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err = parallel(ctx, 2, func(ctx context.Context, i int) error {
		if i == 0 {
			for {
				info, err := node.Inspect(ctx, heldKey(0))
				if err == nil && info.Locked {
					readAt = time.Since(t0)
					return nil
				}
				if ctx.Err() != nil {
					return fmt.Errorf("no linearizable read: %v", err)
				}
				time.Sleep(time.Millisecond)
			}
		}
		for {
			if st := node.Stats(); st.Keys >= keys && st.AppliedIndex >= target {
				caughtAt = time.Since(t0)
				return nil
			}
			select {
			case <-ctx.Done():
				return errors.New("never caught up")
			case <-time.After(time.Millisecond):
			}
		}
	})
	return readAt, caughtAt, err
}

// isExecutable reports whether path is a regular file someone may execute.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
