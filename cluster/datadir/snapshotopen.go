package datadir

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// Open is raft's FileSnapshotStore.Open with the checksum checked as the
// snapshot is read rather than before: raft's reads the whole state file
// once to check it and then again to restore it, and at millions of locks
// that first pass (hundreds of megabytes, read and summed) held up a
// restart by a tenth. Here the reader sums what it reads and refuses to
// hand over the file's last bytes unless the sum matches and the file is
// as long as its metadata says, so a reader never reaches the end of a
// damaged snapshot: the state machine's restore fails, leaving its state
// as it was, and raft goes on to an older snapshot as it does after a
// failed check. The metadata file and its checksum are raft's own
// (meta.json beside state.bin, CRC-64/ECMA over the state file).
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
	return &meta.SnapshotMeta, &checkedSnapshot{
		file: f,
		path: f.Name(),
		want: meta.CRC,
		size: meta.Size,
		sum:  crc64.New(crc64.MakeTable(crc64.ECMA)),
	}, nil
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

// checkedSnapshot reads a snapshot's state file a chunk at a time, summing
// each chunk before handing any of it out; the chunk that holds the file's
// end is handed out only once the whole file matches its checksum.
type checkedSnapshot struct {
	file *os.File
	path string
	want []byte
	size int64 // the state file's length, as its metadata says
	sum  hash.Hash64

	buf     []byte // read and summed, not yet handed out
	off     int    // buf[off:] is what is left of it
	read    int64  // bytes read from the file
	checked bool   // the whole file was read and matched
	err     error  // sticky: a damaged snapshot stays refused
}

const checkedChunk = 1 << 20

func (c *checkedSnapshot) Read(p []byte) (int, error) {
	for c.off == len(c.buf) {
		if c.err != nil {
			return 0, c.err
		}
		if c.checked {
			return 0, io.EOF
		}
		c.fill()
	}
	n := copy(p, c.buf[c.off:])
	c.off += n
	return n, nil
}

// fill reads the next chunk and sums it; at the file's end (its size by
// the metadata) it checks the length and the sum, and keeps the chunk
// from the reader if either is wrong.
func (c *checkedSnapshot) fill() {
	if c.buf == nil {
		c.buf = make([]byte, checkedChunk)
	}
	want := min(int64(checkedChunk), c.size-c.read)
	n, err := io.ReadFull(c.file, c.buf[:want])
	c.buf, c.off = c.buf[:n], 0
	c.read += int64(n)
	c.sum.Write(c.buf)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		c.refuse(fmt.Errorf("snapshot state %s ends after %d bytes, its metadata says %d", c.path, c.read, c.size))
	case err != nil:
		c.refuse(fmt.Errorf("reading snapshot state %s: %w", c.path, err))
	case c.read == c.size:
		var extra [1]byte
		if m, _ := c.file.Read(extra[:]); m > 0 {
			c.refuse(fmt.Errorf("snapshot state %s is longer than the %d bytes its metadata says", c.path, c.size))
		} else if got := c.sum.Sum(nil); !bytes.Equal(got, c.want) {
			c.refuse(fmt.Errorf("snapshot state %s does not match its checksum (CRC mismatch: stored %x, computed %x)", c.path, c.want, got))
		} else {
			c.checked = true
		}
	}
}

func (c *checkedSnapshot) refuse(err error) {
	c.err = err
	c.buf, c.off = c.buf[:0], 0
}

func (c *checkedSnapshot) Close() error { return c.file.Close() }
