package datadir

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// patience bounds every wait for a condition in these tests.
const patience = 10 * time.Second

// testLogger discards logs unless RAFTLOCK_TEST_LOG is set.
func testLogger(name string) hclog.Logger {
	var out io.Writer = io.Discard
	level := hclog.Off
	if os.Getenv("RAFTLOCK_TEST_LOG") != "" {
		out, level = os.Stderr, hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: out, Level: level})
}

var errNoSpace = fmt.Errorf("test disk: %w", syscall.ENOSPC)

type inmemCloser struct{ *raft.InmemStore }

func (inmemCloser) Close() error { return nil }

// A call that reaches the store after Close must neither write nor return an
// error raft would panic on: its goroutine ends, running its deferred calls.
func TestClosedStoreEndsLateCallers(t *testing.T) {
	g := &Store{store: inmemCloser{raft.NewInmemStore()}}
	require.NoError(t, g.SetUint64([]byte("term"), 1))
	require.NoError(t, g.Close())
	require.NoError(t, g.Close(), "a second Close is a no-op")

	deferred := make(chan struct{})
	returned := false
	go func() {
		defer close(deferred)
		g.SetUint64([]byte("term"), 2)
		returned = true
	}()
	<-deferred
	assert.False(t, returned, "the late call returned to raft")
	v, err := g.store.GetUint64([]byte("term"))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), v, "the late call wrote")
}

// fullStable fails stable-store writes with ENOSPC while full is set.
type fullStable struct {
	inmemCloser
	full *atomic.Bool
}

func (s fullStable) SetUint64(key []byte, val uint64) error {
	if s.full.Load() {
		return errNoSpace
	}
	return s.inmemCloser.SetUint64(key, val)
}

// A term write that finds the disk full waits for space instead of failing:
// raft panics on a failed term write, which would take the application
// down. Closing the node ends the wait without an answer.
func TestTermWriteWaitsForSpace(t *testing.T) {
	var full atomic.Bool
	full.Store(true)
	g := newStore(fullStable{inmemCloser{raft.NewInmemStore()}, &full}, nil, "mem", testLogger("mem"))
	done := make(chan error, 1)
	go func() { done <- g.SetUint64([]byte("term"), 7) }()
	require.Eventually(t, func() bool { return g.faults.fault() != "" }, patience, time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the write returned %v while the disk was full", err)
	default:
	}
	full.Store(false)
	require.NoError(t, <-done)
	v, err := g.GetUint64([]byte("term"))
	require.NoError(t, err)
	assert.Equal(t, uint64(7), v)
	// The fault ends with the write that succeeded, not with the next
	// write of the log, which an idle follower may not get for long.
	assert.Empty(t, g.faults.fault(), "the fault outlived the failing term write")

	// A term write that succeeds does not end a fault of the log itself.
	g.faults.failed(errNoSpace)
	require.NoError(t, g.SetUint64([]byte("term"), 8))
	assert.NotEmpty(t, g.faults.fault(), "a term write ended a fault of the log")
	g.faults.succeeded()

	full.Store(true)
	ended := make(chan struct{})
	returned := false
	go func() {
		defer close(ended)
		g.SetUint64([]byte("term"), 8)
		returned = true
	}()
	g.Abandon()
	<-ended
	assert.False(t, returned, "an abandoned write answered raft")
}

// The log may lose its last entries legitimately (raft removes a
// follower's conflicting suffix, or the whole log after installing a
// snapshot): the mark follows before the deletion, so the next start is
// not refused.
func TestLegitimateDeletionsLowerTheMark(t *testing.T) {
	dir := t.TempDir()
	logger := testLogger("mark")
	open := func() (*Store, raft.SnapshotStore) {
		g, _, err := OpenLogStore(dir, LogStoreWAL, 0, logger, nil)
		require.NoError(t, err)
		snaps, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
		require.NoError(t, err)
		ss, err := g.TrackDurability(dir, snaps)
		require.NoError(t, err)
		return g, ss
	}
	entries := func(from, to uint64) []*raft.Log {
		var out []*raft.Log
		for i := from; i <= to; i++ {
			out = append(out, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")})
		}
		return out
	}

	g, _ := open()
	require.NoError(t, g.StoreLogs(entries(1, 10)))
	require.NoError(t, g.DeleteRange(7, 10)) // a conflicting suffix
	require.NoError(t, g.Close())

	g, ss := open()
	last, err := g.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(6), last)
	// A snapshot at 20 installed, then the whole log deleted.
	sink, err := ss.Create(raft.SnapshotVersionMax, 20, 2, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	require.NoError(t, sink.Close())
	require.NoError(t, g.DeleteRange(1, 6))
	require.NoError(t, g.Close())

	g, _ = open()
	require.NoError(t, g.StoreLogs(entries(21, 25)))
	require.NoError(t, g.Close())
	g, _ = open()
	require.NoError(t, g.Close())

	// And the mark still catches a real loss afterwards.
	segs, err := filepath.Glob(filepath.Join(dir, WALDirName, "*.wal"))
	require.NoError(t, err)
	slices.Sort(segs)
	require.NoError(t, os.Truncate(segs[len(segs)-1], 0))
	g2, _, err := OpenLogStore(dir, LogStoreWAL, 0, logger, nil)
	require.NoError(t, err)
	defer g2.Close()
	snaps, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
	require.NoError(t, err)
	_, err = g2.TrackDurability(dir, snaps)
	require.ErrorIs(t, err, ErrLogDamaged)
	assert.True(t, strings.Contains(err.Error(), "up to index 25"), err.Error())
}
