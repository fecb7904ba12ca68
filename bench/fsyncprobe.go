package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"time"
)

// probeFsync appends n blocks of 4 KiB to a new file in each dir, each
// followed by fdatasync (dd oflag=dsync, as a log does), and returns how long
// each took, per dir. The dirs take turns, so that the disk's drift (large
// on a shared machine) weighs on each alike.
func probeFsync(dirs []string, n int) ([][]time.Duration, error) {
	files := make([]*os.File, len(dirs))
	for i, dir := range dirs {
		f, err := os.CreateTemp(dir, "fsync-probe-")
		if err != nil {
			return nil, err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		files[i] = f
	}
	block := bytes.Repeat([]byte{'x'}, 4096)
	took := make([][]time.Duration, len(dirs))
	for range n {
		for i, f := range files {
			t0 := time.Now()
			if _, err := f.Write(block); err != nil {
				return nil, err
			}
			if err := fdatasync(f); err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name(), err)
			}
			took[i] = append(took[i], time.Since(t0))
		}
	}
	return took, nil
}

func quantile(d []time.Duration, q float64) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[int(q*float64(len(d)-1))].Round(time.Microsecond)
}

// diskNote is the machine's own fsync latency in the directory where the
// systems keep their data, for every run: figures of systems that sync
// their logs can only be read beside it.
func diskNote(dir string) string {
	if dir == "" {
		dir = os.TempDir()
	}
	took, err := probeFsync([]string{dir}, 200)
	if err != nil {
		return fmt.Sprintf("disk: could not time its syncs: %v", err)
	}
	return fmt.Sprintf("disk: 4 KiB append + fdatasync in %s before the run, 200 times: p50 %v, p99 %v", dir, quantile(took[0], 0.5), quantile(took[0], 0.99))
}
