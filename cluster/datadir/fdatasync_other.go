//go:build !linux

package datadir

import "os"

// fdatasync flushes f: fsync where the system has no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }
