//go:build linux

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/internal/testskip"
)

// An agent whose data dir has less room than one WAL segment file does not
// start, and says how large a segment is and which flag makes it smaller.
// The small file system is a tmpfs: the test needs root, and says so when
// it skips.
func TestAgentOnDiskSmallerThanASegmentNamesTheFlag(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "small")
	require.NoError(t, os.Mkdir(dir, 0o700))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=20m,mode=0700"); err != nil {
		testskip.Skip(t, "cannot mount a small file system on %s (needs root): %v", dir, err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })

	_, stderr, code := runBinary(t, nil, "agent", "-http", "127.0.0.1:0", "-bind", "127.0.0.1:0",
		"-node-id", "a", "-data-dir", dir, "-bootstrap")
	assert.Equal(t, exitUsage, code, stderr)
	assert.Contains(t, stderr, "segment file of 67108864 bytes (64 MiB")
	assert.Contains(t, stderr, "set a smaller -wal-segment-size")
	assert.Contains(t, stderr, "in -data-dir")
	assert.Contains(t, stderr, "no space left on device")
}
