package datadir

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeSnapshot stores state as a snapshot in a fresh store under dir and
// returns the store, the snapshot's id and its state file.
func writeSnapshot(t *testing.T, state []byte) (*privateSnapshots, string, string) {
	t.Helper()
	dir := t.TempDir()
	store, err := OpenSnapshotStore(dir, 2, hclog.NewNullLogger())
	require.NoError(t, err)
	sink, err := store.Create(raft.SnapshotVersionMax, 10, 2, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	_, err = sink.Write(state)
	require.NoError(t, err)
	require.NoError(t, sink.Close())
	return store, sink.ID(), filepath.Join(dir, "snapshots", sink.ID(), "state.bin")
}

// readAll reads a snapshot through Open in small reads, as a decoder
// does, and returns what it was handed and the error that ended it.
func readAll(t *testing.T, store *privateSnapshots, id string) ([]byte, error) {
	t.Helper()
	meta, rc, err := store.Open(id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var got bytes.Buffer
	buf := make([]byte, 4096+7)
	for {
		n, err := rc.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			require.Equal(t, meta.Size, int64(got.Len()), "the size in the metadata")
			return got.Bytes(), nil
		}
		if err != nil {
			return got.Bytes(), err
		}
	}
}

func snapshotState(n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(int64(n))).Read(b)
	return b
}

func TestSnapshotOpenReadsWholeSnapshots(t *testing.T) {
	for _, n := range []int{0, 1, checkedChunk - 1, checkedChunk, checkedChunk + 1, 3*checkedChunk + 5} {
		state := snapshotState(n)
		store, id, _ := writeSnapshot(t, state)
		got, err := readAll(t, store, id)
		require.NoError(t, err, "%d bytes", n)
		require.True(t, bytes.Equal(state, got), "%d bytes read back differently", n)
	}
}

// A damaged snapshot is never read to its end: the reader is refused the
// chunk that holds the end, so a decoder cannot take the damaged state
// for a whole one. Raft's own Open refused it before any read. So it is
// whichever sum checks it: the sum file's CRC-32C, raft's CRC-64 where
// there is no sum file, or both where the sum file's is wrong.
func TestSnapshotOpenRefusesDamagedSnapshots(t *testing.T) {
	const n = 2*checkedChunk + 100
	damage := map[string]func(path string){
		"a flipped byte early": func(path string) { flipByte(t, path, 10) },
		"a flipped byte last":  func(path string) { flipByte(t, path, n-1) },
		"truncated":            func(path string) { require.NoError(t, os.Truncate(path, n-1)) },
		"truncated to nothing": func(path string) { require.NoError(t, os.Truncate(path, 0)) },
		"longer":               func(path string) { appendByte(t, path) },
	}
	sumFiles := map[string]func(sumPath string){
		"sum file":       func(string) {},
		"no sum file":    func(sumPath string) { require.NoError(t, os.Remove(sumPath)) },
		"wrong sum file": func(sumPath string) { writeSumFile(t, sumPath, n, 12345) },
	}
	for name, hurt := range damage {
		for sumName, sumFile := range sumFiles {
			t.Run(name+"/"+sumName, func(t *testing.T) {
				state := snapshotState(n)
				store, id, path := writeSnapshot(t, state)
				sumFile(filepath.Join(filepath.Dir(path), stateSumFileName))
				hurt(path)
				got, err := readAll(t, store, id)
				require.Error(t, err)
				require.Less(t, len(got), n, "the reader was handed the whole state")
				require.True(t, bytes.HasPrefix(state, got) || name != "truncated", "what was handed out is the file's start")
				// A later read is refused too.
				_, rc, err := store.Open(id)
				require.NoError(t, err)
				_, err = io.Copy(io.Discard, rc)
				require.Error(t, err)
				require.NoError(t, rc.Close())
			})
		}
	}
}

// A snapshot is checked by the CRC-32C of its sum file when it has one
// (raft's CRC-64 is not computed then: a wrong one in meta.json goes
// unseen), and a sum file that is damaged, missing or wrong never makes a
// whole snapshot refused.
func TestSnapshotOpenChecksBySumFile(t *testing.T) {
	const n = 2*checkedChunk + 100
	cases := map[string]struct {
		sumFile    func(t *testing.T, sumPath string)
		wrongCRC64 bool // meta.json's CRC-64 damaged too
		ok         bool
		warns      bool // the operator is told the sum file is damaged
	}{
		"whole":                        {sumFile: func(*testing.T, string) {}, ok: true},
		"whole, wrong CRC-64":          {sumFile: func(*testing.T, string) {}, wrongCRC64: true, ok: true},
		"missing":                      {sumFile: func(t *testing.T, p string) { require.NoError(t, os.Remove(p)) }, ok: true},
		"missing, wrong CRC-64":        {sumFile: func(t *testing.T, p string) { require.NoError(t, os.Remove(p)) }, wrongCRC64: true},
		"a flipped byte":               {sumFile: func(t *testing.T, p string) { flipByte(t, p, 9) }, ok: true},
		"a flipped byte, wrong CRC-64": {sumFile: func(t *testing.T, p string) { flipByte(t, p, 9) }, wrongCRC64: true},
		"truncated":                    {sumFile: func(t *testing.T, p string) { require.NoError(t, os.Truncate(p, 5)) }, ok: true},
		"another length":               {sumFile: func(t *testing.T, p string) { writeSumFile(t, p, n+1, 0) }, ok: true},
		"a wrong sum":                  {sumFile: func(t *testing.T, p string) { writeSumFile(t, p, n, 12345) }, ok: true, warns: true},
		"a wrong sum, wrong CRC-64":    {sumFile: func(t *testing.T, p string) { writeSumFile(t, p, n, 12345) }, wrongCRC64: true},
		"a directory":                  {sumFile: func(t *testing.T, p string) { require.NoError(t, os.Remove(p)); require.NoError(t, os.Mkdir(p, 0o700)) }, ok: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			state := snapshotState(n)
			store, id, path := writeSnapshot(t, state)
			sumPath := filepath.Join(filepath.Dir(path), stateSumFileName)
			require.FileExists(t, sumPath, "the store writes a sum file beside each snapshot")
			tc.sumFile(t, sumPath)
			if tc.wrongCRC64 {
				metaPath := filepath.Join(filepath.Dir(path), "meta.json")
				meta, err := readSnapshotMeta(metaPath)
				require.NoError(t, err)
				meta.CRC[0] ^= 1
				b, err := json.Marshal(meta)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(metaPath, b, 0o600))
			}
			var logged bytes.Buffer
			store.logger = hclog.New(&hclog.LoggerOptions{Output: &logged})
			got, err := readAll(t, store, id)
			assert.Equal(t, tc.warns, strings.Contains(logged.String(), stateSumFileName), "a warning naming the sum file: %q", logged.String())
			if tc.ok {
				require.NoError(t, err)
				assert.True(t, bytes.Equal(state, got), "read back differently")
			} else {
				require.Error(t, err)
				assert.Less(t, len(got), n, "the reader was handed the whole state")
			}
		})
	}
}

func writeSumFile(t *testing.T, path string, size int64, sum uint32) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, encodeStateSum(size, sum), 0o600))
}

// Reading ahead stops with Close, whether the snapshot was read to its
// end, read in part or not read at all: raft closes a snapshot it sends
// to a follower whose connection broke half-way.
func TestSnapshotOpenCloseStopsReadingAhead(t *testing.T) {
	const n = (readAheadChunks+3)*checkedChunk + 9
	store, id, _ := writeSnapshot(t, snapshotState(n))
	for _, readFirst := range []int{0, 1, checkedChunk + 1, n} {
		_, rc, err := store.Open(id)
		require.NoError(t, err)
		got, err := io.CopyN(io.Discard, rc, int64(readFirst))
		require.NoError(t, err)
		require.Equal(t, int64(readFirst), got)
		require.NoError(t, rc.Close())
		select {
		case <-rc.(*checkedSnapshot).done:
		default:
			t.Fatalf("after reading %d bytes, Close returned while the read-ahead goes on", readFirst)
		}
		assert.ErrorIs(t, rc.Close(), os.ErrClosed, "a second Close")
	}
}

func TestSnapshotOpenRefusesDamagedMetadata(t *testing.T) {
	store, id, path := writeSnapshot(t, snapshotState(100))
	meta := filepath.Join(filepath.Dir(path), "meta.json")
	for name, content := range map[string]string{
		"not json":    "{",
		"no checksum": `{"ID":"x","Index":10,"Term":2,"Size":100}`,
		"bad size":    `{"ID":"x","Index":10,"Term":2,"Size":-1,"CRC":"AAAAAAAAAAA="}`,
	} {
		require.NoError(t, os.WriteFile(meta, []byte(content), 0o600))
		_, _, err := store.Open(id)
		require.Error(t, err, name)
	}
}

func flipByte(t *testing.T, path string, at int64) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	var b [1]byte
	_, err = f.ReadAt(b[:], at)
	require.NoError(t, err)
	b[0] ^= 0x40
	_, err = f.WriteAt(b[:], at)
	require.NoError(t, err)
}

func appendByte(t *testing.T, path string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write([]byte{0})
	require.NoError(t, err)
}

// Whatever a sum file holds, reading it never panics, and it is taken
// only when it is a whole sum of the state's length.
func FuzzStateSum(f *testing.F) {
	f.Add(encodeStateSum(100, 7), int64(100))
	f.Add(encodeStateSum(100, 7)[:15], int64(100))
	f.Add([]byte{}, int64(0))
	f.Add(bytes.Repeat([]byte{0xff}, stateSumLen), int64(-1))
	f.Fuzz(func(t *testing.T, content []byte, size int64) {
		path := filepath.Join(t.TempDir(), stateSumFileName)
		require.NoError(t, os.WriteFile(path, content, 0o600))
		sum, ok := readStateSum(path, size)
		if !ok {
			return
		}
		require.Len(t, sum, 4)
		require.Equal(t, encodeStateSum(size, binary.BigEndian.Uint32(sum)), content, "taken, but not a whole sum of this length")
	})
}
