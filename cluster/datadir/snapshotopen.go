package datadir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Open is raft's FileSnapshotStore.Open with the checksum checked as the
// snapshot is read rather than before: raft's reads the whole state file
// once to check it and then again to restore it, and at millions of locks
// that first pass (hundreds of megabytes, read and summed) held up a
// restart by a tenth. Here the file is read and summed a chunk ahead of
// the reader, on a goroutine of its own (reading and summing 457 MB took a
// quarter of a ten-million-lock restore's decoding goroutine), and the
// chunk that holds the file's end is handed over only if the sum matches
// and the file is as long as its metadata says, so a reader never reaches
// the end of a damaged snapshot: the state machine's restore fails,
// leaving its state as it was, and raft goes on to an older snapshot as it
// does after a failed check. The metadata file and its checksum are raft's
// own (meta.json beside state.bin, CRC-64/ECMA over the state file); the
// state is checked by the CRC-32C of its sum file instead when it has one
// (see stateSumFileName).
func (s *privateSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	dir := filepath.Join(s.path, id)
	meta, err := readSnapshotMeta(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: opening snapshot %s: %w", id, err)
	}
	f, err := os.Open(filepath.Join(dir, "state.bin"))
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: opening snapshot %s: %w", id, err)
	}
	check := stateCheck{size: meta.Size, want: meta.CRC, sum: newCRC64}
	if fast, ok := readStateSum(filepath.Join(dir, stateSumFileName), meta.Size); ok {
		byCRC64 := check
		check.fallback = &byCRC64
		check.want, check.sum = fast, newCRC32C
	}
	c := &checkedSnapshot{
		file:   f,
		logger: s.logger,
		chunks: make(chan checkedChunkRead, readAheadChunks),
		free:   make(chan []byte, readAheadChunks+1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go c.readAhead(check)
	return &meta.SnapshotMeta, c, nil
}

// snapshotMetaFile is raft's meta.json: the snapshot's metadata and the
// checksum of its state file.
type snapshotMetaFile struct {
	raft.SnapshotMeta
	CRC []byte
}

func readSnapshotMeta(path string) (*snapshotMetaFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m snapshotMetaFile
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m.Size < 0 || len(m.CRC) != crc64.Size {
		return nil, fmt.Errorf("%s: no valid size and checksum", path)
	}
	return &m, nil
}

// checkedSnapshot hands out a snapshot's state file as readAhead reads
// and sums it, a chunk at a time.
type checkedSnapshot struct {
	file   *os.File
	logger hclog.Logger
	chunks chan checkedChunkRead // from readAhead, in file order
	free   chan []byte           // chunks handed out, back to readAhead
	stop   chan struct{}         // closed by Close: readAhead returns
	done   chan struct{}         // closed when readAhead has returned
	closed sync.Once

	cur []byte // the chunk being handed out
	off int    // cur[off:] is what is left of it
	eof bool   // cur is the file's last chunk, checked
	err error  // sticky: a damaged snapshot stays refused
}

// checkedChunkRead is a chunk readAhead read and summed, or why there is
// none: a damaged or unreadable file.
type checkedChunkRead struct {
	b    []byte
	last bool // b ends the file, whose length and sum matched
	err  error
}

const (
	checkedChunk    = 1 << 20
	readAheadChunks = 3 // read and summed ahead of the one being handed out
)

func (c *checkedSnapshot) Read(p []byte) (int, error) {
	for c.off == len(c.cur) {
		if c.err != nil {
			return 0, c.err
		}
		if c.eof {
			return 0, io.EOF
		}
		c.next()
	}
	n := copy(p, c.cur[c.off:])
	c.off += n
	return n, nil
}

// next hands the current chunk back to readAhead and takes the next one.
func (c *checkedSnapshot) next() {
	if c.cur != nil {
		c.free <- c.cur[:cap(c.cur)] // never blocks: free holds every chunk there is
	}
	c.cur, c.off = nil, 0
	r, ok := <-c.chunks
	switch {
	case !ok:
		c.err = errors.New("reading snapshot state: the snapshot was closed")
	case r.err != nil:
		c.err = r.err
	default:
		c.cur, c.eof = r.b, r.last
	}
}

// stateCheck is what a state file is checked against: its length, and the
// sum its metadata or its sum file holds. fallback, if set, is the check
// by raft's own CRC-64, made in a second pass when the faster sum does not
// match: the sum file may be what is damaged.
type stateCheck struct {
	size     int64
	want     []byte
	sum      func() hash.Hash
	fallback *stateCheck
}

func newCRC64() hash.Hash  { return crc64.New(crc64.MakeTable(crc64.ECMA)) }
func newCRC32C() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) }

// readAhead reads the state file, check.size bytes by its metadata, a
// chunk at a time, sums each and sends it on chunks, up to readAheadChunks
// ahead of the reader; at the file's end it checks the length and the sum,
// and sends an error instead of the last chunk if either is wrong. It
// stops at the first error, after the last chunk, or when Close stops it.
func (c *checkedSnapshot) readAhead(check stateCheck) {
	defer close(c.done)
	defer close(c.chunks)
	path, size := c.file.Name(), check.size
	sum := check.sum()
	var read int64
	made := 0
	for {
		var buf []byte
		select {
		case buf = <-c.free:
		case <-c.stop:
			return
		default:
			if made < readAheadChunks+1 {
				buf = make([]byte, checkedChunk)
				made++
			} else {
				select {
				case buf = <-c.free:
				case <-c.stop:
					return
				}
			}
		}
		n, err := io.ReadFull(c.file, buf[:min(int64(checkedChunk), size-read)])
		read += int64(n)
		sum.Write(buf[:n])
		r := checkedChunkRead{b: buf[:n]}
		switch {
		case err == io.ErrUnexpectedEOF || err == io.EOF:
			r.err = fmt.Errorf("snapshot state %s ends after %d bytes, its metadata says %d", path, read, size)
		case err != nil:
			r.err = fmt.Errorf("reading snapshot state %s: %w", path, err)
		case read == size:
			var extra [1]byte
			if m, _ := c.file.Read(extra[:]); m > 0 {
				r.err = fmt.Errorf("snapshot state %s is longer than the %d bytes its metadata says", path, size)
			} else if got := sum.Sum(nil); !bytes.Equal(got, check.want) {
				r.err = fmt.Errorf("snapshot state %s does not match its checksum (CRC mismatch: stored %x, computed %x)", path, check.want, got)
				if check.fallback != nil && c.matches(*check.fallback) {
					r.err, r.last = nil, true
					c.logger.Warn("a snapshot's sum file does not match its state, which its CRC-64 confirms: restoring it; the disk damaged the sum file",
						"file", filepath.Join(filepath.Dir(path), stateSumFileName), "what_to_do", "check the disk")
				}
			} else {
				r.last = true
			}
		}
		if r.err != nil {
			r.b = nil
		}
		select {
		case c.chunks <- r:
		case <-c.stop:
			return
		}
		if r.err != nil || r.last {
			return
		}
	}
}

// matches reads the whole state file again and reports whether it passes
// check.
func (c *checkedSnapshot) matches(check stateCheck) bool {
	sum := check.sum()
	n, err := io.Copy(sum, io.NewSectionReader(c.file, 0, check.size+1))
	return err == nil && n == check.size && bytes.Equal(sum.Sum(nil), check.want)
}

// Close stops readAhead, waits for it, and closes the file.
func (c *checkedSnapshot) Close() error {
	err := os.ErrClosed
	c.closed.Do(func() {
		close(c.stop)
		<-c.done
		err = c.file.Close()
	})
	return err
}
