//go:build !linux

package main

import (
	"errors"
	"os"
	"time"
)

// slowDisk needs FUSE as Linux has it; see slowdisk_linux.go.
type slowDisk struct{}

func mountSlowDisk(time.Duration) (*slowDisk, error) {
	return nil, errors.New("needs Linux (a FUSE file system)")
}

func (*slowDisk) dir() string              { return "" }
func (*slowDisk) note(string) string       { return "" }
func (*slowDisk) unmount() (string, error) { return "", nil }
func isSlowDiskChild() bool                { return false }
func serveSlowDisk([]string) error         { return errors.New("needs Linux") }

// fdatasync is f.Sync where Go has no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }
