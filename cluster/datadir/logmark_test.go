package datadir

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// markOnDisk is the mark another opener of dir reads now.
func markOnDisk(t *testing.T, dir string) uint64 {
	t.Helper()
	m, index, _, err := openLogMark(dir, hclog.NewNullLogger())
	require.NoError(t, err)
	require.NoError(t, m.f.Close())
	return index
}

// TestLogMarkWritesRaisesAtOnceAndFlushesLowers: a raise reaches the file
// within the write pace (so a crash of the process keeps it) without a
// flush of its own each time; a lower is written and flushed before it
// returns, and close flushes what is left.
func TestLogMarkWritesRaisesAtOnceAndFlushesLowers(t *testing.T) {
	dir := t.TempDir()
	m, _, found, err := openLogMark(dir, hclog.NewNullLogger())
	require.NoError(t, err)
	require.False(t, found)
	m.start()

	state := func() (written, synced uint64, lastSync time.Time) {
		m.writeMu.Lock()
		defer m.writeMu.Unlock()
		return m.written, m.synced, m.lastSync
	}
	m.raise(10)
	require.Eventually(t, func() bool { return markOnDisk(t, dir) == 10 }, 10*time.Second, time.Millisecond)
	// Raises within one flush pace share a flush: the first is flushed
	// (nothing was for a second), the next ones are written only.
	for i := uint64(11); i <= 20; i++ {
		m.raise(i)
		require.Eventually(t, func() bool { return markOnDisk(t, dir) == i }, 10*time.Second, time.Millisecond)
	}
	written, synced, lastSync := state()
	assert.Equal(t, uint64(20), written)
	if time.Since(lastSync) < logMarkSyncPace { // the machine may be slow enough for a second flush
		assert.Less(t, synced, written, "every raise was flushed")
	}

	require.NoError(t, m.lower(15))
	written, synced, _ = state()
	assert.Equal(t, uint64(15), written)
	assert.Equal(t, uint64(15), synced, "a lower returns once flushed")
	assert.Equal(t, uint64(15), markOnDisk(t, dir))

	m.raise(30)
	require.NoError(t, m.close())
	assert.Equal(t, m.written, m.synced, "close flushes the mark")
	assert.Equal(t, uint64(30), markOnDisk(t, dir))
}

// TestLogMarkFlushesAnIdleRaise: the last raise before the log goes quiet is
// flushed within the flush pace, not left to the kernel.
func TestLogMarkFlushesAnIdleRaise(t *testing.T) {
	dir := t.TempDir()
	m, _, _, err := openLogMark(dir, hclog.NewNullLogger())
	require.NoError(t, err)
	m.start()
	t.Cleanup(func() { _ = m.close() })
	m.raise(1) // flushed at once: the first in a pace
	m.raise(2)
	require.Eventually(t, func() bool {
		m.writeMu.Lock()
		defer m.writeMu.Unlock()
		return m.written == 2 && m.synced == 2
	}, 10*time.Second, 5*time.Millisecond)
}
