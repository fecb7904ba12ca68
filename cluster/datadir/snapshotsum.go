package datadir

import (
	"encoding/binary"
	"hash"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// stateSumFileName is a file this store writes beside a snapshot's
// state.bin once raft has written the snapshot: the state file's length
// and its CRC-32C. Checking a state file by raft's CRC-64 (Go computes it
// a byte at a time, about 2 GB/s) took a sixth of a restart's CPU at ten
// million locks; CRC-32C, computed by the processor's own instruction, is
// ten times as fast and catches the same damage a disk does (a torn,
// truncated or flipped file). It is an addition, not a replacement:
// raft's meta.json keeps its CRC-64, so an older build, which ignores
// this file, checks the snapshot as before, and a snapshot without the
// file (written by an older build, or the node stopped before it was
// written) is checked by the CRC-64. A damaged sum file is never a reason
// to refuse a whole snapshot: one that does not read as a sum for this
// state's length is ignored, and one whose sum does not match makes Open
// check the file again by its CRC-64 before refusing it.
const stateSumFileName = "state.crc32c"

// The sum file: the state's length, its CRC-32C, and the CRC-32C of
// these 12 bytes, so that a file that is not whole is seen as such.
const stateSumLen = 16

func encodeStateSum(size int64, sum uint32) []byte {
	b := make([]byte, stateSumLen)
	binary.BigEndian.PutUint64(b, uint64(size))
	binary.BigEndian.PutUint32(b[8:], sum)
	binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:12], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// readStateSum is the CRC-32C (as hash.Hash.Sum writes it) of a state file
// of size bytes, from the sum file at path, if that holds one.
func readStateSum(path string, size int64) ([]byte, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) != stateSumLen ||
		binary.BigEndian.Uint32(b[12:]) != crc32.Checksum(b[:12], crc32.MakeTable(crc32.Castagnoli)) ||
		binary.BigEndian.Uint64(b) != uint64(size) {
		return nil, false
	}
	return b[8:12], true
}

// summingSink is raft's snapshot sink, summing the state as it passes; its
// Close writes the sum file once raft has written the snapshot whole.
type summingSink struct {
	raft.SnapshotSink
	store  string // the store's directory
	logger hclog.Logger
	sum    hash.Hash32
	size   int64
}

func (s *summingSink) Write(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	s.sum.Write(p[:n])
	s.size += int64(n)
	return n, err
}

// Close lets raft finish the snapshot (its state, meta.json, the rename
// that makes it visible), then writes the sum file into it: by a rename,
// so that no reader sees half of one. It is not synced, and an error
// writing it is only logged: the snapshot is whole and durable without it
// (Open checks it by its CRC-64 then), and a sum file a crash leaves
// wrong is never trusted alone.
func (s *summingSink) Close() error {
	if err := s.SnapshotSink.Close(); err != nil {
		return err
	}
	dir := filepath.Join(s.store, s.ID())
	tmp := filepath.Join(dir, stateSumFileName+".tmp")
	err := os.WriteFile(tmp, encodeStateSum(s.size, s.sum.Sum32()), PrivateFileMode)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, stateSumFileName))
	}
	if err != nil {
		os.Remove(tmp)
		s.logger.Warn("could not write a snapshot's CRC-32C beside it; its CRC-64 will check it instead, more slowly",
			"snapshot", s.ID(), "error", err)
	}
	return nil
}
