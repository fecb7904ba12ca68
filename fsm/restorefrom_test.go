package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallWindow makes RestoreFrom slide a window of two record parts for the
// rest of the test, so that records straddle its refills.
func smallWindow(tb testing.TB) {
	old := restoreWindow
	restoreWindow = 2 * maxRecordPart
	tb.Cleanup(func() { restoreWindow = old })
}

// bigRecordsMachine is latestMachine with keys whose records are as large
// as the limits allow (512-byte keys, 1 KiB of metadata, waiters with
// metadata), many windows' worth of them.
func bigRecordsMachine(tb testing.TB) *Machine {
	m := latestMachine(tb)
	for i := range 300 {
		key := fmt.Sprintf("big/%03d/%s", i, strings.Repeat("k", MaxKeyLen-8))
		c := acquire(15*ms, key, numberedOwner(1000+i), time.Second, 0)
		c.Meta = strings.Repeat("m", MaxMetaLen)
		require.Equal(tb, StatusGranted, m.Apply(c).Status)
		if i%3 == 0 {
			w := acquire(15*ms, key, numberedOwner(5000+i), time.Second, time.Second)
			w.Meta = strings.Repeat("w", MaxMetaLen)
			require.Equal(tb, StatusQueued, m.Apply(w).Status)
		}
	}
	return m
}

// RestoreFrom restores what Restore does, from every fixture version and a
// state of large records, whether the window holds the whole snapshot or
// slides over it, and however the stream hands out its bytes.
func TestRestoreFromMatchesRestore(t *testing.T) {
	snaps := map[string][]byte{"big": bigRecordsMachine(t).Snapshot(), "latest": latestMachine(t).Snapshot(), "empty": New(nil).Snapshot()}
	for _, v := range []int{4, 5, 6} {
		b, err := os.ReadFile(filepath.Join("testdata", fmt.Sprintf("snapshot-v%d.bin", v)))
		require.NoError(t, err)
		snaps[fmt.Sprint("v", v)] = b
	}
	require.Greater(t, len(snaps["big"]), 50*2*maxRecordPart, "the big state spans many small windows")
	for _, small := range []bool{false, true} {
		if small {
			smallWindow(t)
		}
		for name, snap := range snaps {
			for _, reader := range []struct {
				name string
				wrap func(io.Reader) io.Reader
			}{{"whole", func(r io.Reader) io.Reader { return r }}, {"halves", iotest.HalfReader}, {"bytes", iotest.OneByteReader}} {
				t.Run(fmt.Sprintf("small=%v/%s/%s", small, name, reader.name), func(t *testing.T) {
					want := New(nil)
					require.NoError(t, want.Restore(snap))
					m := New(nil)
					require.NoError(t, m.RestoreFrom(reader.wrap(bytes.NewReader(snap)), int64(len(snap))))
					require.NoError(t, checkInternals(m))
					assert.Equal(t, want.Snapshot(), m.Snapshot())
				})
			}
		}
	}
}

// A stream shorter or longer than the size it was given, or one that
// fails, is refused and leaves the state as it was; a failing stream's
// error is returned, not taken for a bad encoding.
func TestRestoreFromRefuses(t *testing.T) {
	smallWindow(t)
	snap := bigRecordsMachine(t).Snapshot()
	size := int64(len(snap))
	broken := errors.New("disk on fire")
	for _, c := range []struct {
		name string
		src  io.Reader
		size int64
		want error
	}{
		{"stream shorter than its size", bytes.NewReader(snap[:len(snap)-1]), size, ErrBadEncoding},
		{"size shorter than the stream", bytes.NewReader(snap), size - 1, ErrBadEncoding},
		{"stream longer than its size", io.MultiReader(bytes.NewReader(snap), strings.NewReader("x")), size, ErrBadEncoding},
		{"size longer than the stream", bytes.NewReader(snap), size + 1, ErrBadEncoding},
		{"negative size", bytes.NewReader(snap), -1, ErrBadEncoding},
		{"no bytes", strings.NewReader(""), 0, ErrBadEncoding},
		{"stream fails midway", io.MultiReader(bytes.NewReader(snap[:len(snap)/2]), iotest.ErrReader(broken)), size, broken},
		{"stream fails at its end", io.MultiReader(bytes.NewReader(snap), iotest.ErrReader(broken)), size, broken},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := populated(t)
			before := m.Snapshot()
			err := m.RestoreFrom(c.src, c.size)
			require.ErrorIs(t, err, c.want)
			if c.want == broken {
				assert.NotErrorIs(t, err, ErrBadEncoding)
			}
			assert.Equal(t, before, m.Snapshot(), "state unchanged")
			assert.NoError(t, checkInternals(m))
		})
	}
}
