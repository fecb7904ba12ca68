package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDamagedLogProcesses: three agents as processes, under the durability
// workload; now and then a follower is killed, the tail of its raft log is
// cut (as a disk or an operator might), and it must refuse to start, saying
// so; its data dir is then emptied and it rejoins with -join, as the error
// says. Every acknowledged operation must still be there after the quiet
// crashes of every round. This is the nemesis scenario that keeps the
// cluster on the manual path, without gossip (one agent -bootstrap, the
// others -join), so that the path stays tested under faults.
func TestDamagedLogProcesses(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("damaged-log/3-processes", s)
	c := startProcClusterMode(t, 3, startJoin)
	events := newEventLog(rep.started)
	nem := newNemesis(s, rep, events, []fault{truncateLogFault(c, events)}, c.waitReady)
	round := s.workload / 2
	if s.long {
		round = 30 * time.Second
	}
	runDurability(t, s, rep, c, nem, 6, 4, round, quietCrash)
	if races := c.racesReported(); len(races) > 0 {
		rep.problem("data races reported by agents %v (their logs follow)", races)
	}
	rep.finish(t)
}

// truncateLogFault kills a follower, cuts its raft log in half and checks
// that it refuses to start; the heal empties its data dir and starts it
// with -join.
func truncateLogFault(c *procCluster, events *eventLog) fault {
	return fault{name: "truncate-log-rejoin", min: 500 * time.Millisecond, max: 2 * time.Second,
		inject: func(ctx context.Context, rng *rand.Rand) (func() error, error) {
			l := c.leader(ctx)
			up := c.up()
			if l == nil || len(up) < len(c.nodes) {
				return nil, errSkip
			}
			var followers []*procNode
			for _, n := range up {
				if n != l {
					followers = append(followers, n)
				}
			}
			n := followers[rng.IntN(len(followers))]
			n.kill()
			tail, used, err := walTail(n.dataDir)
			if err != nil {
				return n.restart, err
			}
			if used < 16<<10 {
				// Too little log to be sure the cut loses an entry the
				// node had recorded: a plain kill and restart.
				events.add("harness", "%s: log too short to cut (%d bytes)", n.id, used)
				return n.restart, nil
			}
			if err := os.Truncate(tail, used/2); err != nil {
				return n.restart, err
			}
			if err := n.start(); err == nil {
				n.kill()
				return nil, fmt.Errorf("agent %s started on a raft log cut from %d to %d bytes", n.id, used, used/2)
			} else if !strings.Contains(err.Error(), "raft log damaged") || !strings.Contains(err.Error(), "-join") {
				return nil, fmt.Errorf("agent %s refused a cut log without saying it is damaged and what to do: %v", n.id, err)
			}
			events.add("harness", "%s refused its cut log", n.id)
			if err := os.RemoveAll(n.dataDir); err != nil {
				return nil, err
			}
			var others []string
			for _, o := range c.nodes {
				if o != n {
					others = append(others, o.raftAddr)
				}
			}
			return func() error { n.setJoin(others); return n.start() }, nil
		}}
}

// walTail returns the last segment file of the raft-wal log in dataDir and
// how many of its (preallocated) bytes hold data.
func walTail(dataDir string) (string, int64, error) {
	segs, err := filepath.Glob(filepath.Join(dataDir, "wal", "*.wal"))
	if err != nil || len(segs) == 0 {
		return "", 0, fmt.Errorf("no wal segments in %s: %v", dataDir, err)
	}
	slices.Sort(segs)
	tail := segs[len(segs)-1]
	b, err := os.ReadFile(tail)
	if err != nil {
		return "", 0, err
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	return tail, int64(end), nil
}
