package cluster

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// readSnapshot returns the snapshot's bytes whatever the size it was told:
// right, too small, too large, none.
func TestReadSnapshotWhateverTheSizeSaid(t *testing.T) {
	snap := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	for _, size := range []int64{int64(len(snap)), int64(len(snap)) - 1, int64(len(snap)) + 1, 1, 0, -1, 10 * int64(len(snap))} {
		// OneByteReader: every short read must be read on from, not taken for the end.
		got, err := readSnapshot(iotest.OneByteReader(bytes.NewReader(snap)), size)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(got, snap) {
			t.Fatalf("size %d: read %d bytes, want the snapshot's %d", size, len(got), len(snap))
		}
	}
	got, err := readSnapshot(bytes.NewReader(nil), 100)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty snapshot told 100 bytes: %d bytes, %v", len(got), err)
	}
}

// A read error is returned, not a shorter snapshot.
func TestReadSnapshotFailsWithItsReader(t *testing.T) {
	broken := errors.New("disk gone")
	for _, size := range []int64{0, 10, 1000} {
		r := io.MultiReader(bytes.NewReader(make([]byte, 100)), iotest.ErrReader(broken))
		if _, err := readSnapshot(r, size); !errors.Is(err, broken) {
			t.Fatalf("size %d: error %v, want %v", size, err, broken)
		}
	}
}
