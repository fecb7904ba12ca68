//go:build unix

package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Lock takes an exclusive lock on dir for this node's lifetime. Two
// nodes on one data dir would each append to the same log as if alone; the
// second is refused at once rather than left waiting on a file lock inside
// the log store.
func Lock(dir string) (unlock func() error, err error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, configError("DataDir", "{DataDir} %s is in use by another node (a process still running on it?)", dir)
		}
		return nil, fmt.Errorf("cluster: locking %s: %w", path, err)
	}
	// Closing the file releases the lock.
	return f.Close, nil
}
