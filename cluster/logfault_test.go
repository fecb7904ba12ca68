package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// fullDisk makes raft-wal's files behave as on a full disk while full is
// set: a new segment file is created but cannot be preallocated, and the
// metadata (wal-meta.db) cannot record a change, as with ENOSPC. Writes into
// a preallocated segment still succeed, as they do on a real disk.
type fullDisk struct {
	full atomic.Bool
	// only, when set, limits the fault to the WALs under that directory.
	only string
}

var errNoSpace = fmt.Errorf("test disk: %w", syscall.ENOSPC)

// install makes every WAL opened during the test use d.
func (d *fullDisk) install(t *testing.T) {
	old := walTestFiles
	walTestFiles = func(dir string, meta types.MetaStore, files types.SegmentFiler) (types.MetaStore, types.SegmentFiler) {
		if d.only != "" && !strings.HasPrefix(dir, d.only) {
			return meta, files
		}
		return &fullMeta{MetaStore: meta, d: d}, segment.NewFiler(dir, fullVFS{VFS: walfs.New(), d: d})
	}
	t.Cleanup(func() { walTestFiles = old })
}

type fullVFS struct {
	types.VFS
	d *fullDisk
}

func (v fullVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	if v.d.full.Load() {
		// As os.OpenFile(O_EXCL) then a failed fallocate: the file stays.
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err == nil {
			f.Close()
		}
		return nil, errNoSpace
	}
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return preallocated{WritableFile: f, size: int64(size), d: v.d}, nil
}

func (v fullVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(filepath.Join(dir, name))
	if err != nil {
		f.Close()
		return nil, err
	}
	return preallocated{WritableFile: f, size: fi.Size(), d: v.d}, nil
}

// preallocated is a segment file on a full disk: writes inside its
// preallocated size succeed, and one that runs past it writes what fits and
// fails, as on a real file system (a segment's seal runs past it).
type preallocated struct {
	types.WritableFile
	size int64
	d    *fullDisk
}

func (f preallocated) WriteAt(p []byte, off int64) (int, error) {
	if !f.d.full.Load() || off+int64(len(p)) <= f.size {
		return f.WritableFile.WriteAt(p, off)
	}
	fits := max(f.size-off, 0)
	n, err := f.WritableFile.WriteAt(p[:fits], off)
	if err != nil {
		return n, err
	}
	return n, errNoSpace
}

type fullMeta struct {
	types.MetaStore
	d *fullDisk
}

func (m *fullMeta) CommitState(s types.PersistentState) error {
	if m.d.full.Load() {
		return errNoSpace
	}
	return m.MetaStore.CommitState(s)
}

// diskFullConfig is a one-node config whose WAL rotates every few entries.
func diskFullConfig(t *testing.T) Config {
	cfg := testConfig(t, "a")
	cfg.Bootstrap = true
	cfg.WALSegmentSize = 4 << 10
	return cfg
}

// fillUntilFault acquires new keys until the node reports a log fault,
// returning the leases granted.
func fillUntilFault(t *testing.T, n *Node, d *fullDisk) map[string]lock.Lease {
	t.Helper()
	granted := map[string]lock.Lease{}
	d.full.Store(true)
	deadline := time.Now().Add(patience)
	for i := 0; n.Stats().LogFault == ""; i++ {
		require.True(t, time.Now().Before(deadline), "no log fault reported while the disk was full")
		key := fmt.Sprintf("k%03d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		lease, err := n.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: lock.NewOwner(), TTL: time.Hour})
		cancel()
		if err == nil {
			granted[key] = lease
		}
	}
	return granted
}

// checkGranted fails the test unless every lease is still held with its
// token, and a new acquire gets a higher token than all of them.
func checkGranted(t *testing.T, n *Node, granted map[string]lock.Lease) {
	t.Helper()
	var top uint64
	for key, lease := range granted {
		info, err := n.Inspect(testCtx(t), key)
		require.NoError(t, err)
		assert.Equal(t, lease.Token, info.Token, "key %s", key)
		top = max(top, lease.Token)
	}
	_, lease := acquire(t, n, "after", time.Hour)
	assert.Greater(t, lease.Token, top)
}

// Commits resume once space is back, without a restart, and nothing granted
// is lost. Before, the failed rotation left raft-wal's tail sealed and every
// later write failed with "segment is sealed".
func TestDiskFullThenFreedResumesWithoutRestart(t *testing.T) {
	d := &fullDisk{}
	d.install(t)
	n := startNode(t, diskFullConfig(t))
	require.Eventually(t, n.leaderReady, patience, 10*time.Millisecond)
	granted := fillUntilFault(t, n, d)
	require.Eventually(t, func() bool { return strings.Contains(n.Stats().LogFault, "no space left on device") },
		patience, 10*time.Millisecond, "the fault does not say the disk is full: %q", n.Stats().LogFault)

	d.full.Store(false)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := n.Acquire(ctx, lock.AcquireRequest{Key: "probe", Owner: lock.NewOwner(), TTL: time.Hour})
		return err == nil
	}, patience, 20*time.Millisecond, "the node did not commit again after space came back")
	assert.Empty(t, n.Stats().LogFault)
	checkGranted(t, n, granted)
}

// A node stopped while its disk was full starts again once space is back.
// Before, the seal that reached the segment but not wal-meta.db made every
// write fail with "segment is sealed" after the restart too.
func TestDiskFullThenRestartAfterSpaceFreed(t *testing.T) {
	d := &fullDisk{}
	d.install(t)
	cfg := diskFullConfig(t)
	n, err := New(cfg)
	require.NoError(t, err)
	require.Eventually(t, n.leaderReady, patience, 10*time.Millisecond)
	granted := fillUntilFault(t, n, d)
	require.NoError(t, n.Close())

	d.full.Store(false)
	n = startNode(t, cfg)
	require.Eventually(t, n.leaderReady, patience, 10*time.Millisecond, "the node did not lead again after the restart")
	checkGranted(t, n, granted)
}

// The temporary directories of snapshots that failed are removed at start
// (and by the snapshot itself when it fails while the node runs).
func TestFailedSnapshotDirsAreRemoved(t *testing.T) {
	c := newCluster(t, 1, nil)
	acquire(t, c.nodes[0], "k", time.Hour)
	c.stop(0)
	left := filepath.Join(c.cfgs[0].DataDir, "snapshots", "2-5-1700000000000.tmp")
	require.NoError(t, os.MkdirAll(left, 0o700))
	c.restart(0)
	_, err := os.Stat(left)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// Under load, on a three-node cluster, the leader's disk fills and is freed
// again: the others go on, the full node recovers by itself, and nothing
// acknowledged is lost or granted twice, including after the node that
// had led is stopped and the once-full node must be part of every quorum.
func TestDiskFullUnderLoadLosesNothing(t *testing.T) {
	d := &fullDisk{}
	d.install(t)
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.WALSegmentSize = 4 << 10
		if d.only == "" {
			d.only = cfg.DataDir // node 0's, which bootstraps and leads first
		}
	})
	full := c.nodes[0]
	t.Logf("the full node leads: %v", full.IsLeader())

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
				select {
				case <-stop:
					return
				default:
				}
				key, owner := fmt.Sprintf("w%d-%d", w, i), lock.NewOwner()
				// Retried with the same owner until the outcome is known,
				// on any node.
				for attempt := 0; ; attempt++ {
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
					select {
					case <-stop:
						return // the outcome stays unknown: not counted
					default:
					}
				}
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(granted) }
	require.Eventually(t, func() bool { return count() > 50 }, patience, 5*time.Millisecond)
	d.full.Store(true)
	require.Eventually(t, func() bool { return full.Stats().LogFault != "" }, patience, 5*time.Millisecond, "the full node reports no fault")
	during := count()
	require.Eventually(t, func() bool { return count() > during+50 }, patience, 5*time.Millisecond, "the others did not go on")
	d.full.Store(false)
	require.Eventually(t, func() bool { return full.Stats().LogFault == "" }, patience, 5*time.Millisecond, "the full node did not recover")
	after := count()
	require.Eventually(t, func() bool { return count() > after+50 }, patience, 5*time.Millisecond)
	close(stop)
	wg.Wait()

	// The once-full node catches up; then whoever leads now goes, so that
	// every quorum includes it.
	l := c.waitLeader()
	require.Eventually(t, func() bool {
		applied, _ := full.sm.appliedIndex()
		return applied >= l.raft.CommitIndex()
	}, patience, 5*time.Millisecond, "the once-full node did not catch up")
	if l != full {
		c.stop(c.index(l))
	} else {
		c.stop(c.index(c.follower()))
	}
	l = c.waitLeader()
	tokens := map[uint64]string{}
	for _, g := range granted {
		info, err := l.Inspect(testCtx(t), g.key)
		require.NoError(t, err)
		assert.Equal(t, g.lease.Token, info.Token, "key %s", g.key)
		if other, dup := tokens[g.lease.Token]; dup {
			t.Errorf("token %d granted for %s and %s", g.lease.Token, other, g.key)
		}
		tokens[g.lease.Token] = g.key
	}
	t.Logf("%d grants checked", len(granted))
}

// failingWrites makes every write of raft-wal's segment files fail with
// ENOSPC while fail is set, for the WAL under the directory set in dir:
// whatever that node is sent, it can store none of it, as on a full disk.
type failingWrites struct {
	dir  atomic.Pointer[string]
	fail atomic.Bool
}

func (d *failingWrites) install(t *testing.T) {
	old := walTestFiles
	walTestFiles = func(dir string, meta types.MetaStore, files types.SegmentFiler) (types.MetaStore, types.SegmentFiler) {
		return meta, segment.NewFiler(dir, failingVFS{VFS: walfs.New(), d: d, dir: dir})
	}
	t.Cleanup(func() { walTestFiles = old })
}

func (d *failingWrites) failing(dir string) bool {
	only := d.dir.Load()
	return d.fail.Load() && only != nil && strings.HasPrefix(dir, *only)
}

// failingWriteLatency is how long a failing write takes.
const failingWriteLatency = 20 * time.Millisecond

type failingVFS struct {
	types.VFS
	d   *failingWrites
	dir string
}

func (v failingVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return failingFile{WritableFile: f, v: v}, nil
}

func (v failingVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return failingFile{WritableFile: f, v: v}, nil
}

type failingFile struct {
	types.WritableFile
	v failingVFS
}

func (f failingFile) WriteAt(p []byte, off int64) (int, error) {
	if f.v.d.failing(f.v.dir) {
		// A failing disk is slow to say so: meanwhile the leader sends the
		// next request, as it does to a real member under load.
		time.Sleep(failingWriteLatency)
		return 0, errNoSpace
	}
	return f.WritableFile.WriteAt(p, off)
}

// A follower whose log writes fail for a moment, again and again under
// load, is sent the entries again each time its writes succeed, and catches
// up. Before, a write that failed while the leader had a second request on
// the way to it could stop the leader from ever sending it entries again
// (heartbeats went on, so nothing noticed): raft's pipelined replication
// stopped reading the follower's answers at the refusal, and its next send
// then waited for a reader forever. The follower's disk was freed, but no
// write came to clear its fault. (That failure also made the leader's Close
// hang, so the test then ran into go test's timeout, whose goroutine dump
// shows raft's pipelineSend and decodeResponses stuck.)
func TestFollowerWhoseWritesFailAgainAndAgainCatchesUp(t *testing.T) {
	const cycles = 25
	d := &failingWrites{}
	d.install(t)
	c := newCluster(t, 3, nil)
	follower := c.follower()
	dir := c.cfgs[c.index(follower)].DataDir
	d.dir.Store(&dir)
	var working []*Node
	for _, n := range c.nodes {
		if n != follower {
			working = append(working, n)
		}
	}

	var granted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := working[(w+i)%len(working)]
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := n.Acquire(ctx, lock.AcquireRequest{Key: fmt.Sprintf("w%d-%d", w, i), Owner: lock.NewOwner(), TTL: time.Hour})
				cancel()
				if err == nil {
					granted.Add(1)
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })

	caughtUp := func() bool { return c.holdsAllCommitted(follower) }
	for cycle := 1; cycle <= cycles; cycle++ {
		before := granted.Load()
		require.Eventually(t, func() bool { return granted.Load() > before+10 }, patience, time.Millisecond, "cycle %d: no progress", cycle)
		d.fail.Store(true)
		require.Eventually(t, func() bool { return follower.Stats().LogFault != "" }, patience, time.Millisecond,
			"cycle %d: the follower's writes did not fail", cycle)
		during := granted.Load()
		require.Eventually(t, func() bool { return granted.Load() > during+10 }, patience, time.Millisecond, "cycle %d: the others did not go on", cycle)
		d.fail.Store(false)
		// raft retries a failing follower after a backoff of at most about
		// 10 s; the patience is generous beyond that.
		require.Eventually(t, func() bool { return follower.Stats().LogFault == "" && caughtUp() }, 3*patience, 5*time.Millisecond,
			"cycle %d: the follower was sent no entries after its writes could succeed again (fault: %q)", cycle, follower.Stats().LogFault)
	}
}

// holdsAllCommitted reports whether n's log holds on disk every entry the
// current leader has committed; false while no node leads. (Unlike
// waitLeader, it may be called from a condition of require.Eventually.)
func (c *testCluster) holdsAllCommitted(n *Node) bool {
	for _, l := range c.nodes {
		if l != nil && l.leaderReady() {
			last, err := n.store.LastIndex()
			return err == nil && last >= l.raft.CommitIndex()
		}
	}
	return false
}

// The only voter whose disk fills stays leader and waits for space: it
// does not step down and elect itself again every heartbeat timeout (raft
// steps a leader down when its log write fails, which helps only where
// another member can lead). Meanwhile it says why it cannot commit, in
// Stats and in the error of every lock call (at once: not after a wait
// for a leader), writes one line about it rather than a flood, and
// commits again by itself once space is back, with nothing lost.
func TestOnlyVoterWithFullDiskWaitsForSpaceAsLeader(t *testing.T) {
	d := &fullDisk{}
	d.install(t)
	cfg := diskFullConfig(t)
	var logs lockedBuffer
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "a", Output: &logs, Level: hclog.Info})
	n := startNode(t, cfg)
	require.Eventually(t, n.leaderReady, patience, 10*time.Millisecond)
	logged := len(logs.String())
	granted := fillUntilFault(t, n, d)
	term := n.Stats().Term

	assert.Never(t, func() bool { st := n.Stats(); return st.Term != term || st.State != "Leader" }, 2*time.Second, 10*time.Millisecond,
		"the only voter left the leader's state while its disk was full")
	st := n.Stats()
	assert.Contains(t, st.LogFault, "no space left on device")
	assert.Equal(t, term, st.Term, "elections while the disk was full")

	_, err := n.Acquire(testCtx(t), lock.AcquireRequest{Key: "during", Owner: lock.NewOwner(), TTL: time.Hour})
	assert.ErrorIs(t, err, ErrLogFault)
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.ErrorContains(t, err, "free space on the file system")
	assert.NotContains(t, errorText(err), "election")
	_, err = n.Inspect(testCtx(t), "during")
	assert.ErrorIs(t, err, ErrLogFault, "a read")
	_, err = n.Acquire(testCtx(t), lock.AcquireRequest{Key: "during", Owner: lock.NewOwner(), TTL: time.Hour, Wait: time.Minute})
	assert.ErrorIs(t, err, ErrLogFault, "a waiting acquire")

	during := logs.String()[logged:]
	assert.Equal(t, 0, strings.Count(during, "entering leader state"), "elections")
	assert.Equal(t, 1, strings.Count(during, "\n"), "lines written while the disk was full:\n%s", during[:min(len(during), 4000)])
	assert.Contains(t, during, `what_to_do="the disk is full: free space on the file system of`)

	d.full.Store(false)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := n.Acquire(ctx, lock.AcquireRequest{Key: "probe", Owner: lock.NewOwner(), TTL: time.Hour})
		return err == nil
	}, patience, 20*time.Millisecond, "the node did not commit again after space came back")
	assert.Empty(t, n.Stats().LogFault)
	assert.Equal(t, term, n.Stats().Term, "the node did not lead throughout")
	checkGranted(t, n, granted)
}

// A node whose disk has no room for one WAL segment file does not start,
// and says how large a segment is and which setting makes it smaller.
func TestNoRoomForAWALSegmentNamesItsSize(t *testing.T) {
	d := &fullDisk{}
	d.install(t)
	d.full.Store(true)
	cfg := diskFullConfig(t)
	_, err := New(cfg)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalidConfig)
	var cerr *ConfigError
	require.ErrorAs(t, err, &cerr)
	assert.Equal(t, "WALSegmentSize", cerr.Field)
	assert.ErrorContains(t, err, "segment file of 4096 bytes (4 KiB")
	assert.ErrorContains(t, err, "no space left on device")
	assert.ErrorContains(t, err, "free space there, or set a smaller WALSegmentSize")
}
