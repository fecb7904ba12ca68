//go:build linux

package main

// -slow-disk: every system's data dirs on one FUSE loopback file system whose
// fsyncs take longer, so that all systems in the run see the same slower
// disk (raftlock's -log-sync-delay reaches raftlock alone).
//
// The file system is served by a child process (this binary, started again
// with slowDiskChildEnv set), not by the bench process itself: a Go process
// that serves a FUSE mount and also uses it can deadlock. A thread that
// faults on a page of an mmapped file of the mount (bbolt mmaps its file:
// etcd, raft-wal's metadata) blocks in the kernel until the server answers,
// and cannot be stopped for the garbage collector's stop-the-world, which
// meanwhile has stopped the goroutines that would answer.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// slowDiskChildEnv, set in the environment of the child process, makes it
// serve the slow disk instead of running the bench; its arguments are the
// backing dir, the mount point and the delay.
const slowDiskChildEnv = "RAFTLOCK_BENCH_SLOW_DISK_SERVER"

// slowDisk is the mounted file system, seen from the bench process.
type slowDisk struct {
	delay      time.Duration
	mountpoint string
	backing    string // the directory beneath, on the machine's own disk
	cmd        *exec.Cmd
	stdin      io.Closer   // closing it asks the child to unmount and exit
	lines      chan string // the child's stdout, line by line
	stderr     *lockedBuffer
	probe      string // the fsync latencies measured right after mounting
	ready      bool   // mounted; until then the server's stderr is in the error
	done       bool
}

// mountSlowDisk starts the child that mounts the slow disk, waits until the
// mount is up and measures its fsync latency.
func mountSlowDisk(delay time.Duration) (_ *slowDisk, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	d := &slowDisk{delay: delay, lines: make(chan string, 4), stderr: &lockedBuffer{}}
	defer func() {
		if err != nil {
			d.unmount()
		}
	}()
	if d.backing, err = os.MkdirTemp("", "bench-slowdisk-backing-"); err != nil {
		return d, err
	}
	if d.mountpoint, err = os.MkdirTemp("", "bench-slowdisk-"); err != nil {
		return d, err
	}
	d.cmd = exec.Command(exe, d.backing, d.mountpoint, delay.String())
	d.cmd.Env = append(os.Environ(), slowDiskChildEnv+"=1")
	d.cmd.Stderr = d.stderr
	// A process group of its own: Ctrl-C in the terminal reaches the bench
	// alone, which stops the systems and only then asks for the unmount.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := d.cmd.StdinPipe()
	if err != nil {
		return d, err
	}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		return d, err
	}
	if err := d.cmd.Start(); err != nil {
		return d, err
	}
	d.stdin = stdin
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
	}()
	select {
	case line, ok := <-d.lines:
		if !ok || line != "ready" {
			waitErr := d.cmd.Wait()
			d.cmd = nil // it has exited: unmount has only the dirs to remove
			return d, fmt.Errorf("the FUSE server failed (%v): %s", waitErr, strings.TrimSpace(d.stderr.String()))
		}
		d.ready = true
	case <-time.After(30 * time.Second):
		d.ready = true // the server's stderr, if any, comes later
		return d, fmt.Errorf("mount on %s: no answer from the FUSE server in 30s: %s", d.mountpoint, strings.TrimSpace(d.stderr.String()))
	}
	took, err := probeFsync([]string{d.mountpoint, d.backing}, 200)
	if err != nil {
		return d, fmt.Errorf("fsync probe: %w", err)
	}
	slow, beneath := took[0], took[1]
	d.probe = fmt.Sprintf("200 appends of 4 KiB each followed by fdatasync, taking turns on the slow disk and on the disk beneath it, took p50 %v, p99 %v on the slow disk, and p50 %v, p99 %v beneath",
		quantile(slow, 0.5), quantile(slow, 0.99), quantile(beneath, 0.5), quantile(beneath, 0.99))
	progress("slow disk: FUSE loopback of %s on %s, %v added to each fsync; %s", d.backing, d.mountpoint, delay, d.probe)
	return d, nil
}

// dir is where the systems put their data dirs.
func (d *slowDisk) dir() string { return d.mountpoint }

// note describes the slow disk for the report, with the server's counts
// once it has unmounted.
func (d *slowDisk) note(counts string) string {
	s := fmt.Sprintf("-slow-disk %v: the data dirs of every system are on one FUSE loopback file system (go-fuse, served by a child process) whose fsync and fdatasync, of files and of directories, each take %v longer; everything else passes through. %s",
		d.delay, d.delay, d.probe)
	if counts != "" {
		s += "; the FUSE server saw " + counts
	}
	return s
}

// unmount asks the child to unmount and waits for it; it returns the
// child's counts of the operations it served. It may be called more than
// once.
func (d *slowDisk) unmount() (counts string, err error) {
	if d.done {
		return "", nil
	}
	d.done = true
	if d.cmd != nil && d.cmd.Process != nil {
		if d.stdin != nil {
			d.stdin.Close()
		}
		waited := make(chan error, 1)
		go func() {
			for line := range d.lines {
				if c, ok := strings.CutPrefix(line, "counts "); ok {
					counts = c
				}
			}
			waited <- d.cmd.Wait()
		}()
		select {
		case err = <-waited:
		case <-time.After(time.Minute):
			d.cmd.Process.Kill()
			err = errors.New("the FUSE server did not exit within a minute; killed")
			<-waited
		}
		if msg := strings.TrimSpace(d.stderr.String()); msg != "" && d.ready {
			progress("slow disk: FUSE server: %s", msg)
		}
	}
	if d.mountpoint != "" {
		// Remove, not RemoveAll: if the file system is still mounted, the
		// files beneath stay where they are and this fails.
		if rmErr := os.Remove(d.mountpoint); rmErr != nil && err == nil {
			err = fmt.Errorf("unmount: %w", rmErr)
		}
	}
	if d.backing != "" {
		os.RemoveAll(d.backing)
	}
	return counts, err
}

// lockedBuffer is the child's stderr, written by exec's copier and read by
// the bench.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// isSlowDiskChild says whether this process is the slow disk's server.
func isSlowDiskChild() bool { return os.Getenv(slowDiskChildEnv) != "" }

// serveSlowDisk is the child: it mounts the slow disk, says "ready" on
// stdout, serves until its stdin closes (the bench is done with it, or died)
// or it gets SIGTERM, unmounts, and says what it served.
func serveSlowDisk(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("want backing dir, mount point and delay, got %q", args)
	}
	backing, mountpoint := args[0], args[1]
	delay, err := time.ParseDuration(args[2])
	if err != nil {
		return err
	}
	loopback, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return err
	}
	disk := &slowFS{delay: delay}
	root := &slowNode{LoopbackNode: loopback.(*fs.LoopbackNode), disk: disk}
	root.RootData.RootNode = root
	// Every access goes through this mount, so the kernel may cache names
	// and attributes (go-fuse's default of 1s).
	second := time.Second
	opts := &fs.Options{
		EntryTimeout: &second,
		AttrTimeout:  &second,
		MountOptions: fuse.MountOptions{
			FsName: "bench-slowdisk",
			Name:   "slowdisk",
			// As root, mount(2) itself; without fusermount on the machine
			// there is nothing to fall back to, and its error is the one to
			// report.
			DirectMount:       true,
			DirectMountStrict: !haveFusermount(),
		},
	}
	server, err := fs.Mount(mountpoint, root, opts)
	if err != nil {
		return fmt.Errorf("mount %s on %s: %w", backing, mountpoint, err)
	}
	fmt.Println("ready")

	stop := make(chan struct{}, 2)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stop <- struct{}{}
	}()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	signal.Ignore(os.Interrupt)
	select {
	case <-stop:
	case <-term:
	}
	if err := server.Unmount(); err != nil {
		// Still busy (the bench died with files open): detach it now; the
		// kernel ends the connection, and with it Wait, once the last file
		// is closed.
		fmt.Fprintf(os.Stderr, "unmount %s: %v; detaching it\n", mountpoint, err)
		if err := syscall.Unmount(mountpoint, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("detach %s: %w", mountpoint, err)
		}
		server.Wait()
	}
	fmt.Printf("counts %d file fsyncs, %d directory fsyncs, %d writes (0 writes: the kernel passes reads and writes straight to the files beneath)\n",
		disk.fsyncs.Load(), disk.fsyncdirs.Load(), disk.writes.Load())
	return nil
}

func haveFusermount() bool {
	for _, name := range []string{"fusermount3", "fusermount"} {
		if _, err := exec.LookPath(name); err == nil {
			return true
		}
	}
	return false
}

// slowFS is what the nodes of the slow disk share.
type slowFS struct {
	delay                     time.Duration
	fsyncs, fsyncdirs, writes atomic.Int64
}

// slowNode is a loopback node whose fsyncs take disk.delay longer. The
// bridge asks the node (NodeFsyncer) before the file handle, so the
// handles stay go-fuse's own loopback files, with every interface they
// implement (passthrough, allocate, locks, lseek...).
type slowNode struct {
	*fs.LoopbackNode
	disk *slowFS
}

var (
	_ fs.NodeFsyncer        = (*slowNode)(nil)
	_ fs.NodeWrapChilder    = (*slowNode)(nil)
	_ fs.NodeOpendirHandler = (*slowNode)(nil)
	_ fs.NodeWriter         = (*slowNode)(nil)
	_ fs.NodeWritever       = (*slowNode)(nil)
)

// WrapChild makes every node of the tree (looked up, created, made) a
// slowNode.
func (n *slowNode) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if ln, ok := ops.(*fs.LoopbackNode); ok {
		return &slowNode{LoopbackNode: ln, disk: n.disk}
	}
	return ops
}

func (n *slowNode) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	fsyncer, ok := f.(fs.FileFsyncer)
	if !ok {
		return syscall.ENOTSUP
	}
	n.disk.fsyncs.Add(1)
	time.Sleep(n.disk.delay)
	return fsyncer.Fsync(ctx, flags)
}

// Write counts the writes that reach the server (none when the kernel
// passes them through) and hands them to the file.
func (n *slowNode) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	n.disk.writes.Add(1)
	if w, ok := f.(fs.FileWriter); ok {
		return w.Write(ctx, data, off)
	}
	return 0, syscall.ENOTSUP
}

// Writev is Write for data in pieces (the bridge needs it once a node
// writes: it does not fall back to the file's Writev).
func (n *slowNode) Writev(ctx context.Context, f fs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	n.disk.writes.Add(1)
	if w, ok := f.(fs.FileWritever); ok {
		return w.Writev(ctx, data, off)
	}
	if w, ok := f.(fs.FileWriter); ok {
		return w.Write(ctx, bytes.Join(data, nil), off)
	}
	return 0, syscall.ENOTSUP
}

func (n *slowNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if dir, ok := fh.(loopbackDir); ok {
		fh = &slowDir{loopbackDir: dir, disk: n.disk}
	}
	return fh, fuseFlags, errno
}

// loopbackDir is what go-fuse's loopback directory handle implements.
type loopbackDir interface {
	fs.FileReaddirenter
	fs.FileSeekdirer
	fs.FileReleasedirer
	fs.FileFsyncdirer
	fs.FileIoctler
}

// slowDir is a directory handle whose fsyncs take disk.delay longer.
type slowDir struct {
	loopbackDir
	disk *slowFS
}

func (d *slowDir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	d.disk.fsyncdirs.Add(1)
	time.Sleep(d.disk.delay)
	return d.loopbackDir.Fsyncdir(ctx, flags)
}

// fdatasync is a log's sync of f: its data, not its times.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
