//go:build linux

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/internal/testskip"
	"github.com/raftlock/raftlock/lock"
)

// mountSmallDisk mounts a tmpfs of size bytes on dir, or skips the test
// where that is not allowed (it needs root). It is unmounted when the test
// ends, after the nodes started later are closed.
func mountSmallDisk(t *testing.T, dir string, size int) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		testskip.Skip(t, "cannot mount a small file system on %s (needs root): %v", dir, err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// fillDisk writes path until its file system has no space left.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			return
		}
	}
}

// A member whose data dir is a real small file system (a tmpfs), with small
// WAL segments so that its log needs new space often, has its disk filled
// and freed again and again under load. After each fill it must say so
// (Stats.LogFault), and after each free its log writes must succeed again
// by themselves, without a restart; in the end nothing acknowledged is lost
// and no token is granted twice.
func TestDiskFilledAndFreedRepeatedlyOnRealFileSystem(t *testing.T) {
	const cycles = 4
	smallDir := filepath.Join(t.TempDir(), "small")
	require.NoError(t, os.Mkdir(smallDir, 0o700))
	mountSmallDisk(t, smallDir, 8<<20)

	c := newCluster(t, 3, func(cfg *Config) {
		cfg.WALSegmentSize = 16 << 10
		if cfg.NodeID == "n2" {
			cfg.DataDir = smallDir
		}
	})
	full := c.nodes[2]
	require.Equal(t, smallDir, c.cfgs[2].DataDir)

	type grant struct {
		key   string
		lease lock.Lease
	}
	var (
		mu      sync.Mutex
		granted []grant
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key, owner := fmt.Sprintf("w%d-%d", w, i), lock.NewOwner()
				// Retried with the same owner until the outcome is known,
				// on any node.
				for attempt := 0; ; attempt++ {
					select {
					case <-stop:
						return // the outcome stays unknown: not counted
					default:
					}
					n := c.nodes[(w+attempt)%len(c.nodes)]
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					lease, err := n.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: time.Hour})
					cancel()
					if err == nil {
						mu.Lock()
						granted = append(granted, grant{key, lease})
						mu.Unlock()
						break
					}
				}
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(granted) }

	// caughtUp: the full node holds on disk everything the leader
	// committed, so its log writes succeed again.
	caughtUp := func() bool { return c.holdsAllCommitted(full) }
	filler := filepath.Join(smallDir, "filler")
	for cycle := 1; cycle <= cycles; cycle++ {
		before := count()
		require.Eventually(t, func() bool { return count() > before+20 }, patience, 5*time.Millisecond, "cycle %d: no progress before the fill", cycle)
		fillDisk(t, filler)
		require.Eventually(t, func() bool { return full.Stats().LogFault != "" }, 3*patience, 5*time.Millisecond,
			"cycle %d: the full node reports no log fault", cycle)
		assert.Contains(t, full.Stats().LogFault, "no space left on device", "cycle %d", cycle)
		during := count()
		require.Eventually(t, func() bool { return count() > during+20 }, patience, 5*time.Millisecond, "cycle %d: the others did not go on", cycle)
		require.NoError(t, os.Remove(filler))
		require.Eventually(t, func() bool { return full.Stats().LogFault == "" && caughtUp() }, 3*patience, 5*time.Millisecond,
			"cycle %d: the full node's log writes did not succeed again after space was freed (fault: %q)", cycle, full.Stats().LogFault)
	}
	close(stop)
	wg.Wait()

	// The once-full node catches up; then the others are stopped in turn,
	// so that every quorum includes it.
	require.Eventually(t, caughtUp, patience, 5*time.Millisecond, "the once-full node did not catch up")
	l := c.waitLeader()
	if l != full {
		c.stop(c.index(l))
	} else {
		c.stop(c.index(c.follower()))
	}
	l = c.waitLeader()
	tokens := map[uint64]string{}
	for _, g := range granted {
		info, err := l.Inspect(testCtx(t), g.key)
		if !assert.NoError(t, err, "key %s", g.key) {
			continue
		}
		assert.Equal(t, g.lease.Token, info.Token, "key %s", g.key)
		if other, dup := tokens[g.lease.Token]; dup {
			t.Errorf("token %d granted for %s and %s", g.lease.Token, other, g.key)
		}
		tokens[g.lease.Token] = g.key
	}
	t.Logf("%d cycles, %d grants checked", cycles, len(granted))
}

// The only voter, on a real small file system filled to the last byte,
// stays leader without an election while it waits for space, fails lock
// calls with ErrLogFault meanwhile, and commits again once space is freed.
func TestOnlyVoterOnFullRealFileSystemWaitsForSpace(t *testing.T) {
	smallDir := filepath.Join(t.TempDir(), "small")
	require.NoError(t, os.Mkdir(smallDir, 0o700))
	mountSmallDisk(t, smallDir, 8<<20)
	cfg := testConfig(t, "a")
	cfg.Bootstrap = true
	cfg.DataDir = smallDir
	cfg.WALSegmentSize = 16 << 10
	n := startNode(t, cfg)
	require.Eventually(t, n.leaderReady, patience, 10*time.Millisecond)

	fillDisk(t, filepath.Join(smallDir, "filler"))
	deadline := time.Now().Add(3 * patience)
	for i := 0; n.Stats().LogFault == ""; i++ {
		require.True(t, time.Now().Before(deadline), "no log fault reported while the disk was full")
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		n.Acquire(ctx, lock.AcquireRequest{Key: fmt.Sprintf("k%d", i), Owner: lock.NewOwner(), TTL: time.Hour})
		cancel()
	}
	assert.Contains(t, n.Stats().LogFault, "no space left on device")
	term := n.Stats().Term
	assert.Never(t, func() bool { st := n.Stats(); return st.Term != term || st.State != "Leader" }, 2*time.Second, 10*time.Millisecond,
		"the only voter left the leader's state while its disk was full")
	_, err := n.Acquire(testCtx(t), lock.AcquireRequest{Key: "during", Owner: lock.NewOwner(), TTL: time.Hour})
	assert.ErrorIs(t, err, ErrLogFault)

	require.NoError(t, os.Remove(filepath.Join(smallDir, "filler")))
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := n.Acquire(ctx, lock.AcquireRequest{Key: "probe", Owner: lock.NewOwner(), TTL: time.Hour})
		return err == nil
	}, 3*patience, 20*time.Millisecond, "the node did not commit again after space was freed")
	assert.Empty(t, n.Stats().LogFault)
	assert.Equal(t, term, n.Stats().Term, "the node did not lead throughout")
}

// A data dir on a file system smaller than one WAL segment (64 MiB by
// default, preallocated in full) is refused at start with an error that
// names the segment's size and the setting that makes it smaller.
func TestNoRoomForAWALSegmentOnRealFileSystem(t *testing.T) {
	smallDir := filepath.Join(t.TempDir(), "small")
	require.NoError(t, os.Mkdir(smallDir, 0o700))
	mountSmallDisk(t, smallDir, 20<<20)
	cfg := testConfig(t, "a")
	cfg.Bootstrap = true
	cfg.DataDir = smallDir
	_, err := New(cfg)
	require.Error(t, err)
	var cerr *ConfigError
	require.ErrorAs(t, err, &cerr)
	assert.Equal(t, "WALSegmentSize", cerr.Field)
	assert.ErrorContains(t, err, "segment file of 67108864 bytes (64 MiB")
	assert.ErrorContains(t, err, "no space left on device")

	cfg.WALSegmentSize = 1 << 20
	n, err := New(cfg)
	require.NoError(t, err, "with a segment that fits")
	require.NoError(t, n.Close())
}
