package datadir

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// How raft-wal (v0.4.2) keeps the log, and what this file adds.
//
// The log is a list of segment files (<base index>-<id>.wal, preallocated to
// the segment size) and wal-meta.db, a BoltDB file that lists the segments
// and also holds raft's term and vote. A write appends entry frames and a
// commit frame carrying a CRC-32C of everything written since the previous
// commit, in one pwrite, then fdatasyncs. When a segment is full, the write
// also appends an index frame ("sealed"); another goroutine then records the
// seal in wal-meta.db and creates the next segment.
//
// At open, raft-wal trusts wal-meta.db and reads the last (unsealed) segment
// up to the first frame it cannot parse, checks the CRC of the final batch
// only, and drops that batch if the CRC fails (a torn write, never
// acknowledged). It never checks the CRC of earlier batches, nor of sealed
// segments: a flipped byte there is served as data, and a broken frame
// header in the middle of the last segment silently ends the log there.
// Three states also leave it unable to append again, forever ("segment is
// sealed"), even across restarts: a seal written to the segment but not
// recorded in wal-meta.db (that write or the creation of the next segment
// failed, typically for lack of space), a seal whose commit frame is torn,
// and, in a running process, any failure of the rotation that follows a seal.
//
// checkWAL runs before raft-wal opens the log, and:
//   - refuses a log whose wal-meta.db is gone but whose segments are not, or
//     whose wal-meta.db lists a sealed segment that is gone;
//   - verifies the CRC of every committed batch (all but the final batch of
//     the last segment, whose loss the log mark judges) and refuses a log
//     where one fails;
//   - completes a seal that reached the segment but not wal-meta.db, and
//     erases a seal whose commit frame is torn (it was never acknowledged).
//
// A Store opens the log again after a write fails (see reopen), so a
// node that ran out of space recovers once space is back, without a restart.

// ErrLogDamaged says the node's raft log lost or corrupted entries it had
// stored, or files it needs: the node refuses to start. The error names the
// file and says what to do.
var ErrLogDamaged = errors.New("raft log damaged")

// WALMetaFileName is raft-wal's list of segment files, in WALDirName; it
// also holds raft's term and vote.
const WALMetaFileName = metadb.FileName

// Frame types of raft-wal's segment format (segment/format.go).
const (
	walFrameInvalid = 0
	walFrameEntry   = 1
	walFrameIndex   = 2
	walFrameCommit  = 3

	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// segmentScan is what a read of one segment file found.
type segmentScan struct {
	commits []walCommit
	// indexAt is the file offset of the index frame's header; -1 if none.
	indexAt int64
	// entries is the number of entry frames read (committed or not).
	entries int
}

type walCommit struct {
	offset  int64
	crcOK   bool
	entries int  // entry frames before this commit
	sealed  bool // an index frame precedes it
}

// scanSegment reads a segment's frames the way raft-wal's recovery does (up
// to the first frame it cannot parse) and checks every commit's CRC.
//
// It streams the file through a small buffer instead of reading it whole: a
// segment is preallocated to the segment size (64 MiB by default), and at
// start-up a fresh allocation of that size per segment, zeroed and then
// returned to the OS, cost more than the scan itself.
func scanSegment(path string) (segmentScan, error) {
	f, err := os.Open(path)
	if err != nil {
		return segmentScan{}, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, segmentScanBuffer)
	s := segmentScan{indexAt: -1}
	// The first batch includes the file header.
	crc, err := crcThrough(r, 0, walFileHeaderLen)
	if err != nil {
		return s, eofEnds(err)
	}
	off := int64(walFileHeaderLen)
	for {
		h, err := r.Peek(walFrameHeaderLen)
		if err != nil {
			return s, eofEnds(err)
		}
		typ := h[0]
		n := int64(binary.LittleEndian.Uint32(h[4:8]))
		switch typ {
		case walFrameEntry, walFrameIndex:
			// Counted even when the frame runs past the end of the file, as
			// raft-wal does: a seal torn by a short write (ENOSPC past the
			// preallocated size) still makes it see the segment sealed.
			if typ == walFrameEntry {
				s.entries++
			} else {
				s.indexAt = off
			}
			size := walFrameHeaderLen + n + (walFrameHeaderLen-n%walFrameHeaderLen)%walFrameHeaderLen
			if crc, err = crcThrough(r, crc, size); err != nil {
				return s, eofEnds(err)
			}
			off += size
		case walFrameCommit:
			s.commits = append(s.commits, walCommit{offset: off, crcOK: crc == uint32(n), entries: s.entries, sealed: s.indexAt >= 0})
			if _, err := r.Discard(walFrameHeaderLen); err != nil {
				return s, err // Peek returned these bytes
			}
			crc = 0 // the next batch starts after the commit frame
			off += walFrameHeaderLen
		default: // zeros past the end, or a frame raft-wal cannot parse either
			return s, nil
		}
	}
}

// segmentScanBuffer is the read buffer of scanSegment.
const segmentScanBuffer = 256 << 10

// crcThrough reads the next n bytes of r into the CRC-32C crc. Fewer than
// n bytes before the end of the file is io.ErrUnexpectedEOF or io.EOF.
func crcThrough(r *bufio.Reader, crc uint32, n int64) (uint32, error) {
	for n > 0 {
		p, err := r.Peek(int(min(n, int64(r.Size()))))
		crc = crc32.Update(crc, walCRC, p)
		r.Discard(len(p))
		n -= int64(len(p))
		if err != nil && n > 0 {
			return crc, err
		}
	}
	return crc, nil
}

// eofEnds is a scan's error: none where the file ended, which ends the
// frames raft-wal reads too.
func eofEnds(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil
	}
	return err
}

func checkWAL(dir, dataDir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	hasMeta, segments := false, 0
	for _, e := range entries {
		switch {
		case e.Name() == WALMetaFileName:
			hasMeta = true
		case strings.HasSuffix(e.Name(), ".wal"):
			segments++
		}
	}
	metaPath := filepath.Join(dir, WALMetaFileName)
	if !hasMeta {
		if segments > 0 {
			return damagedLogError(dataDir, fmt.Sprintf("%s is missing (it lists the log's segment files and holds the node's raft term and vote), but %d segment files remain in %s", metaPath, segments, dir))
		}
		return nil
	}

	db := &metadb.BoltMetaDB{}
	state, err := db.Load(dir)
	if err != nil {
		db.Close()
		return damagedLogError(dataDir, fmt.Sprintf("%s cannot be read: %v", metaPath, err))
	}
	defer db.Close()
	for i, si := range state.Segments {
		path := filepath.Join(dir, segment.FileName(si))
		tail := si.SealTime.IsZero()
		if tail && i != len(state.Segments)-1 {
			return damagedLogError(dataDir, fmt.Sprintf("%s lists the unsealed segment %s before others", metaPath, path))
		}
		scan, err := scanSegment(path)
		if errors.Is(err, fs.ErrNotExist) {
			if tail {
				// raft-wal records a segment before creating its file: a
				// crash in between leaves none, and it creates the file.
				continue
			}
			return damagedLogError(dataDir, fmt.Sprintf("segment file %s, listed in %s, is missing", path, metaPath))
		}
		if err != nil {
			return fmt.Errorf("cluster: reading raft log segment %s: %w", path, err)
		}
		checked := scan.commits
		if tail && len(checked) > 0 {
			checked = checked[:len(checked)-1] // the final batch may be torn: raft-wal drops it
		}
		for _, c := range checked {
			if !c.crcOK {
				return damagedLogError(dataDir, fmt.Sprintf("segment file %s is corrupt: the checksum of the entries committed before offset %d does not match", path, c.offset))
			}
		}
		if !tail {
			if len(scan.commits) == 0 || !scan.commits[len(scan.commits)-1].sealed {
				return damagedLogError(dataDir, fmt.Sprintf("sealed segment file %s ends early (after %d entries)", path, scan.entries))
			}
			continue
		}
		if scan.indexAt < 0 {
			continue
		}
		final := walCommit{}
		if len(scan.commits) > 0 {
			final = scan.commits[len(scan.commits)-1]
		}
		if final.sealed && final.crcOK {
			if err := completeSeal(db, state, si, scan, final); err != nil {
				return fmt.Errorf("cluster: completing the interrupted rotation of raft log segment %s: %w", path, err)
			}
			continue
		}
		// The seal's batch is torn, so it was never acknowledged; raft-wal
		// would still see the index frame and refuse every append.
		if err := eraseTornSeal(path, scan.indexAt); err != nil {
			return fmt.Errorf("cluster: erasing the torn end of raft log segment %s: %w", path, err)
		}
	}
	return nil
}

// completeSeal records in wal-meta.db what raft-wal's rotation would have:
// the tail sealed, and a next segment, which raft-wal creates at open.
func completeSeal(db *metadb.BoltMetaDB, state types.PersistentState, tail types.SegmentInfo, scan segmentScan, final walCommit) error {
	now := time.Now()
	last := tail.BaseIndex + uint64(final.entries) - 1
	tail.SealTime = now
	tail.MaxIndex = last
	tail.IndexStart = uint64(scan.indexAt) + walFrameHeaderLen
	next := types.SegmentInfo{
		ID:         state.NextSegmentID,
		BaseIndex:  last + 1,
		MinIndex:   last + 1,
		SizeLimit:  tail.SizeLimit,
		Codec:      tail.Codec,
		CreateTime: now,
	}
	segs := append([]types.SegmentInfo(nil), state.Segments...)
	segs[len(segs)-1] = tail
	segs = append(segs, next)
	return db.CommitState(types.PersistentState{NextSegmentID: state.NextSegmentID + 1, Segments: segs})
}

func eraseTornSeal(path string, indexAt int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var zero [walFrameHeaderLen]byte
	if _, err := f.WriteAt(zero[:], indexAt); err != nil {
		return err
	}
	return f.Sync()
}

// damagedLogError is the refusal to start on a damaged log: what is wrong,
// and what the operator can do.
func damagedLogError(dataDir, what string) error {
	return fmt.Errorf("cluster: %w: %s. The node may have granted locks and fencing tokens that its log no longer holds, so it will not start. "+
		"If it is a member of a cluster of several nodes: stop it, empty its data dir %s, and start it again with -join (Config.Join) "+
		"naming a running member; it rejoins empty and receives the cluster's state from the leader. "+
		"If it is a single node: restore the data dir from a backup; starting from what remains would grant again locks and tokens granted before",
		ErrLogDamaged, what, dataDir)
}
