package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
)

// oneNodeWithLocks starts a one-node cluster, grants count locks, stops it
// and returns its config and the segment files of its WAL, oldest first.
func oneNodeWithLocks(t *testing.T, count int) (Config, []string) {
	t.Helper()
	c := newCluster(t, 1, nil)
	for i := range count {
		acquire(t, c.nodes[0], fmt.Sprintf("k%03d", i), time.Hour)
	}
	c.stop(0)
	segs, err := filepath.Glob(filepath.Join(c.cfgs[0].DataDir, walDirName, "*.wal"))
	require.NoError(t, err)
	require.NotEmpty(t, segs)
	slices.Sort(segs)
	cfg := c.cfgs[0]
	cfg.Bootstrap = false
	return cfg, segs
}

// usedBytes is how far a (preallocated) segment file holds data.
func usedBytes(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	return int64(end)
}

func requireRefused(t *testing.T, cfg Config, mentions string) {
	t.Helper()
	n, err := New(cfg)
	if err == nil {
		n.Close()
	}
	require.ErrorIs(t, err, ErrLogDamaged)
	assert.Contains(t, err.Error(), mentions)
	assert.Contains(t, err.Error(), "-join", "says what to do")
	// Refused, it leaves the data dir usable for another attempt.
	_, err = New(cfg)
	assert.ErrorIs(t, err, ErrLogDamaged)
}

// A log cut short (a lost tail) is refused; before, the node started with
// the locks of what was left and granted their keys again with lower tokens.
func TestTruncatedLogIsRefused(t *testing.T) {
	cfg, segs := oneNodeWithLocks(t, 120)
	tail := segs[len(segs)-1]
	require.NoError(t, os.Truncate(tail, usedBytes(t, tail)/2))
	requireRefused(t, cfg, "log-mark")
}

// A segment truncated to nothing is refused; before, the node started with
// an empty log and never elected itself.
func TestEmptiedSegmentIsRefused(t *testing.T) {
	cfg, segs := oneNodeWithLocks(t, 20)
	require.NoError(t, os.Truncate(segs[len(segs)-1], 0))
	requireRefused(t, cfg, "ends at index 0")
}

// Bytes flipped in the middle of the log are refused, whether they break a
// frame (the log then ends there) or only data (the checksum catches it).
func TestCorruptedLogIsRefused(t *testing.T) {
	for _, at := range []float64{0.3, 0.5, 0.7} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			cfg, segs := oneNodeWithLocks(t, 120)
			tail := segs[len(segs)-1]
			f, err := os.OpenFile(tail, os.O_RDWR, 0)
			require.NoError(t, err)
			off := int64(float64(usedBytes(t, tail)) * at)
			buf := make([]byte, 64)
			_, err = f.ReadAt(buf, off)
			require.NoError(t, err)
			for i := range buf {
				buf[i] ^= 0xff
			}
			_, err = f.WriteAt(buf, off)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			requireRefused(t, cfg, filepath.Join(cfg.DataDir, walDirName))
		})
	}
}

// A missing wal-meta.db is refused in plain words; before: "file exists".
func TestMissingWALMetadataIsRefused(t *testing.T) {
	cfg, _ := oneNodeWithLocks(t, 5)
	require.NoError(t, os.Remove(filepath.Join(cfg.DataDir, walDirName, walMetaFileName)))
	requireRefused(t, cfg, "wal-meta.db is missing")
}

// A sealed segment that is gone is refused, naming it.
func TestMissingSegmentIsRefused(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.WALSegmentSize = 4 << 10 })
	for i := range 200 {
		acquire(t, c.nodes[0], fmt.Sprintf("k%03d", i), time.Hour)
	}
	c.stop(0)
	segs, err := filepath.Glob(filepath.Join(c.cfgs[0].DataDir, walDirName, "*.wal"))
	require.NoError(t, err)
	require.Greater(t, len(segs), 2)
	slices.Sort(segs)
	require.NoError(t, os.Remove(segs[1]))
	cfg := c.cfgs[0]
	cfg.Bootstrap = false
	requireRefused(t, cfg, filepath.Base(segs[1]))
}

// Honest restarts are never refused: after snapshots and compaction, with
// rotations, many times over.
func TestHonestRestartsAreAccepted(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) {
		cfg.WALSegmentSize = 4 << 10
		cfg.SnapshotThreshold = 16
		cfg.SnapshotInterval = 50 * time.Millisecond
		cfg.TrailingLogs = 4
	})
	var last lock.Lease
	for round := range 4 {
		for i := range 30 {
			_, last = acquire(t, c.nodes[0], fmt.Sprintf("r%d-%d", round, i), time.Hour)
		}
		if round%2 == 1 {
			require.NoError(t, c.nodes[0].raft.Snapshot().Error())
		}
		c.stop(0)
		c.restart(0)
		c.waitLeader()
		info, err := c.nodes[0].Inspect(testCtx(t), fmt.Sprintf("r%d-%d", round, 29))
		require.NoError(t, err)
		assert.Equal(t, last.Token, info.Token)
	}
}

// A member of three whose log was cut short refuses to start; emptied and
// started with Join it rejoins, and nothing granted is lost, even once the
// others' leader is gone.
func TestTruncatedMemberRefusedThenRejoinsEmpty(t *testing.T) {
	c := newCluster(t, 3, nil)
	granted := map[string]lock.Lease{}
	for i := range 80 {
		key := fmt.Sprintf("k%03d", i)
		_, granted[key] = acquire(t, c.leader(), key, time.Hour)
	}
	f := c.index(c.follower())
	c.stop(f)
	segs, err := filepath.Glob(filepath.Join(c.cfgs[f].DataDir, walDirName, "*.wal"))
	require.NoError(t, err)
	slices.Sort(segs)
	tail := segs[len(segs)-1]
	require.NoError(t, os.Truncate(tail, usedBytes(t, tail)/2))

	cfg := c.cfgs[f]
	cfg.Bootstrap, cfg.Join = false, nil
	_, err = New(cfg)
	require.ErrorIs(t, err, ErrLogDamaged)

	// What the error says: empty the data dir, start with Join.
	require.NoError(t, os.RemoveAll(cfg.DataDir))
	before := c.leader().raft.Stats()["latest_configuration"]
	cfg.Join = []string{c.leader().Addr()}
	c.nodes[f] = startNode(t, cfg)
	c.waitLeader()
	// It lost its vote record and the entries it had helped commit, so the
	// leader removed its old entry and added it again (it moves to the end
	// of the configuration), rather than count it as the voter it was.
	require.Eventually(t, func() bool { return c.leader().raft.Stats()["latest_configuration"] != before },
		patience, 5*time.Millisecond, "the wiped member was not removed and added again")
	after := c.leader().raft.GetConfiguration()
	require.NoError(t, after.Error())
	var voter bool
	for _, s := range after.Configuration().Servers {
		voter = voter || (string(s.ID) == cfg.NodeID && s.Suffrage == raft.Voter)
	}
	assert.True(t, voter, "the rejoined member is a voter again")

	// The old leader goes: the rejoined member is now one of two voters
	// left, so the new leader's log had to come through it or the third.
	c.stop(c.index(c.leader()))
	l := c.waitLeader()
	for key, lease := range granted {
		info, err := l.Inspect(testCtx(t), key)
		require.NoError(t, err)
		assert.Equal(t, lease.Token, info.Token, "key %s", key)
	}
}

// A byte flipped inside an entry, frames intact, is caught by the batch
// checksums raft-wal writes but checks only for the last batch; before, the
// node served the corrupt entry.
func TestFlippedEntryDataIsRefused(t *testing.T) {
	cfg, segs := oneNodeWithLocks(t, 60)
	tail := segs[len(segs)-1]
	b, err := os.ReadFile(tail)
	require.NoError(t, err)
	// Find the entry frames (type 1: header of 8 bytes, length at 4..8,
	// payload padded to 8).
	var entries []int64
	for off := int64(walFileHeaderLen); off+walFrameHeaderLen <= int64(len(b)) && b[off] != walFrameInvalid; {
		n := int64(b[off+4]) | int64(b[off+5])<<8 | int64(b[off+6])<<16 | int64(b[off+7])<<24
		if b[off] == walFrameEntry {
			entries = append(entries, off)
		}
		if b[off] == walFrameCommit {
			n = 0
		}
		off += walFrameHeaderLen + n + (walFrameHeaderLen-n%walFrameHeaderLen)%walFrameHeaderLen
	}
	require.Greater(t, len(entries), 20)
	at := entries[len(entries)/2] + walFrameHeaderLen + 2
	f, err := os.OpenFile(tail, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{b[at] ^ 0x5a}, at)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	requireRefused(t, cfg, "checksum")
}
