package integration

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testskip"
)

// smallDiskSize is the file system one agent of TestDiskFullProcesses
// lives on: room for a few WAL segments, snapshots and wal-meta.db.
const (
	smallDiskSize   = "24m"
	smallDiskWALSeg = "65536"
)

// TestDiskFullProcesses: three agents as processes; one of them has its
// data dir on a small file system of its own (a tmpfs, so the test needs
// root; it is skipped otherwise) and small WAL segments, so that its log
// rotates often. While eight clients work, the nemesis fills that file
// system to the last byte, holds it full, then frees it: the agent must say
// so in /healthz (503 log_fault) while it lasts, and serve again afterwards
// without a restart, with no violation of linearizability. The disk is held
// full until the agent says so (it needs new space only when its log
// rotates), so every fill is a real fault.
func TestDiskFullProcesses(t *testing.T) {
	probe := t.TempDir()
	if err := syscall.Mount("tmpfs", probe, "tmpfs", 0, "size=1m"); err != nil {
		testskip.Skip(t, "cannot mount a small file system here (needs root): %v", err)
	}
	syscall.Unmount(probe, syscall.MNT_DETACH)

	s := loadSettings(t)
	rep := newReport("disk-full/3-processes", s)
	c := startProcCluster(t, 3)
	n := c.nodes[len(c.nodes)-1]
	moveToSmallDisk(t, c, n)
	events := newEventLog(rep.started)
	seen := &faultSightings{}
	nem := newNemesis(s, rep, events, []fault{diskFullFault(n, seen)}, c.waitReady)
	runLinearizable(t, s, rep, c, nem, 8, 4)
	if seen.fills > 0 && seen.reported == 0 {
		rep.problem("%s's disk was filled %d times and /healthz never said log_fault", n.id, seen.fills)
	}
	rep.note("disk filled %d times; /healthz said log_fault in %d of them", seen.fills, seen.reported)
	if races := c.racesReported(); len(races) > 0 {
		rep.problem("data races reported by agents %v (their logs follow)", races)
	}
	rep.finish(t)
}

// moveToSmallDisk stops n, empties its data dir and mounts a small tmpfs
// there, then starts it again with -join: it rejoins empty, as a member
// whose data dir was lost would.
func moveToSmallDisk(t *testing.T, c *procCluster, n *procNode) {
	t.Helper()
	n.kill()
	must(t, os.RemoveAll(n.dataDir))
	must(t, os.MkdirAll(n.dataDir, 0o700))
	must(t, syscall.Mount("tmpfs", n.dataDir, "tmpfs", 0, "size="+smallDiskSize+",mode=0700"))
	t.Cleanup(func() {
		n.kill()
		syscall.Unmount(n.dataDir, syscall.MNT_DETACH)
	})
	var others []string
	for _, o := range c.nodes {
		if o != n {
			others = append(others, o.raftAddr)
		}
	}
	n.setJoin(others, "-wal-segment-size", smallDiskWALSeg, "-snapshot-threshold", "200")
	must(t, n.start())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	must(t, c.waitReady(ctx))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// logFaultWait is how long a full disk is held at most for its member to
// say in /healthz that its log cannot be written.
const logFaultWait = 20 * time.Second

type faultSightings struct {
	mu              sync.Mutex
	fills, reported int
}

// diskFullFault fills n's file system, watches its /healthz while it is
// full, and frees it; the heal waits until n says it is healthy again.
func diskFullFault(n *procNode, seen *faultSightings) fault {
	return fault{name: "disk-full", min: 2 * time.Second, max: 4 * time.Second,
		inject: func(ctx context.Context, _ *rand.Rand) (func() error, error) {
			filler := filepath.Join(n.dataDir, "filler")
			if err := fill(filler); err != nil {
				os.Remove(filler)
				return nil, err
			}
			watch, stop := context.WithCancel(context.Background())
			reported := make(chan bool, 1)
			go func() {
				said := false
				for watch.Err() == nil && !said {
					said = healthSays(n, "log_fault")
					select {
					case <-watch.Done():
					case <-time.After(50 * time.Millisecond):
					}
				}
				reported <- said
			}()
			return func() error {
				// The disk stays full until n says so: its log needs new
				// space only when a segment fills up, which a member slowed
				// down by a loaded machine may not reach within the fault's
				// time. A fill that the end of the workload cuts short is
				// not counted: without writes, n has nothing to report.
				var said bool
				select {
				case said = <-reported:
				case <-ctx.Done():
				case <-time.After(logFaultWait):
				}
				stop()
				if !said {
					said = <-reported
				}
				if err := os.Remove(filler); err != nil {
					return err
				}
				if said || ctx.Err() == nil {
					seen.mu.Lock()
					seen.fills++
					if said {
						seen.reported++
					}
					seen.mu.Unlock()
				}
				// Healthy again, without a restart.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				return pollUntil(ctx, 50*time.Millisecond, n.id+" healthy again after its disk was freed", func(context.Context) error {
					if healthSays(n, "ok") {
						return nil
					}
					return errors.New("/healthz is not ok")
				})
			}, nil
		}}
}

// fill writes path until the file system has no space left.
func fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
}

// healthSays reports whether n's /healthz status is status.
func healthSays(n *procNode, status string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.httpAddr+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
	}
	return json.NewDecoder(resp.Body).Decode(&body) == nil && body.Status == status
}
