//go:build unix

package cluster

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The report: in an existing 0755 data dir, snapshots/ was 0755 and
// state.bin 0644, and a snapshot holds every owner token. Under the common
// umask 022, with data dirs created 0755 beforehand (one with a snapshots/
// dir left 0755 by an earlier version), every file and directory in both
// nodes' data dirs is 0600 or 0700 after a bootstrap, a join, snapshots
// taken and installed, WAL segments rotated, and a restart of both. A file
// the node does not know is left alone.
func TestDataDirIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022) // what the library defaults assume; restored below
	t.Cleanup(func() { syscall.Umask(old) })

	dirs := make([]string, 2)
	for i := range dirs {
		dirs[i] = filepath.Join(t.TempDir(), "data")
		require.NoError(t, os.Mkdir(dirs[i], 0o755))
		require.NoError(t, os.Chmod(dirs[i], 0o755))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dirs[1], "snapshots"), 0o755))
	// Not the node's: left as it is (a DataDir given by mistake may hold anything).
	notes := filepath.Join(dirs[0], "operator-notes.txt")
	require.NoError(t, os.WriteFile(notes, nil, 0o644))
	c := newCluster(t, 2, func(cfg *Config) {
		cfg.DataDir = dirs[0]
		if cfg.NodeID == "n1" {
			cfg.DataDir = dirs[1]
		}
		cfg.WALSegmentSize = 4 << 10 // small, so that segments rotate
		cfg.TrailingLogs = 1         // so that the follower is sent a snapshot after a restart
		cfg.Voters = 1               // n1 follows as a non-voter: n0 commits while it is down
	})
	ctx := testCtx(t)

	keys := 0
	work := func() {
		for range 20 {
			keys++
			acquire(t, c.leader(), fmt.Sprintf("k%d", keys), time.Minute)
		}
	}
	work()
	for _, n := range c.nodes {
		require.NoError(t, n.raft.Snapshot().Error(), n.ID())
	}
	c.stop(1)
	work()
	require.NoError(t, c.leader().raft.Snapshot().Error())
	work()
	c.restart(1) // behind the leader's log: it is sent the leader's snapshot
	c.stop(0)
	c.restart(0)
	c.waitLeader()
	before := make([]map[string]bool, len(dirs))
	for i, dir := range dirs {
		before[i] = map[string]bool{}
		entries, err := os.ReadDir(filepath.Join(dir, walDirName))
		require.NoError(t, err)
		for _, e := range entries {
			before[i][e.Name()] = true
		}
	}
	for range 3 {
		work()
	}
	for _, n := range c.nodes {
		require.NoError(t, n.raft.Snapshot().Error(), n.ID())
	}
	held, err := c.leader().Inspect(ctx, "k1")
	require.NoError(t, err)
	require.True(t, held.Locked)
	require.Positive(t, c.nodes[1].Stats().Restores, "the follower installed a snapshot")

	for i, dir := range dirs {
		var files, newSegments, states int
		require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			require.NoError(t, err)
			if path == notes {
				return nil
			}
			info, err := d.Info()
			require.NoError(t, err)
			if d.IsDir() {
				assert.Equal(t, fs.FileMode(0o700).String(), info.Mode().Perm().String(), "%s", path)
				return nil
			}
			files++
			if filepath.Ext(path) == ".wal" && !before[i][d.Name()] {
				newSegments++ // created since the last start
			}
			if d.Name() == "state.bin" {
				states++
			}
			assert.Equal(t, fs.FileMode(0o600).String(), info.Mode().Perm().String(), "%s", path)
			return nil
		}))
		assert.Positive(t, newSegments, "%s: a WAL segment created since the last start", dir)
		assert.Positive(t, states, "%s: snapshots on disk", dir)
		t.Logf("%s: %d files", dir, files)
	}
	info, err := os.Stat(notes)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o644).String(), info.Mode().Perm().String(), "a file the node does not know")
}
