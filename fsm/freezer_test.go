package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomCommands makes commands over a small key and owner space, with time
// moving on, so that keys are added, handed off, queued on, expired and
// removed on both sides of a freeze's cursor.
func randomCommands(rng *rand.Rand, now *time.Duration, nKeys int) func() Command {
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	return func() Command {
		*now += time.Duration(rng.IntN(3)) * ms
		key, o := keys[rng.IntN(len(keys))], numberedOwner(rng.IntN(5))
		ttl := time.Duration(1+rng.IntN(40)) * ms
		if rng.IntN(4) == 0 {
			// A semaphore of 2 or a read/write key among the mutexes, so
			// that holders come and go, in groups, on both sides of the
			// cursor.
			key = "g" + key
			switch rng.IntN(4) {
			case 0, 1:
				limit, shared := 0, rng.IntN(2) == 0
				if key[len(key)-1]%2 == 0 {
					limit = 2
				}
				return acquireKind(*now, key, o, ttl, time.Duration(rng.IntN(20))*ms, limit, shared)
			case 2:
				return release(*now, key, o)
			default:
				return cancelWait(*now, key, o)
			}
		}
		switch rng.IntN(8) {
		case 0, 1:
			wait := time.Duration(0)
			if rng.IntN(2) == 0 {
				wait = time.Duration(1+rng.IntN(20)) * ms
			}
			return acquire(*now, key, o, ttl, wait)
		case 2:
			return release(*now, key, o)
		case 3:
			return extend(*now, key, o, ttl)
		case 4:
			return cancelWait(*now, key, o)
		case 5:
			return newTerm(*now)
		case 6:
			return dropUnclaimed(*now)
		default:
			return tick(*now)
		}
	}
}

// However the machine changes between chunks, a Freezer writes exactly the
// snapshot of the moment it started.
func TestFreezerCopiesTheStateOfItsStart(t *testing.T) {
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 1))
		now := ms
		// Few keys: queues, hand-offs and wait expiries; many: adds and removals.
		next := randomCommands(rng, &now, []int{12, 40}[seed%2])
		m := New(nil)
		for range 150 {
			m.Apply(next())
		}
		want, keysAtStart := m.Snapshot(), m.Len()
		fz := m.StartFreeze()
		var got chunkRecorder
		for chunks := 0; ; chunks++ {
			require.Less(t, chunks, 1000, "seed %d: the copy does not end", seed)
			for range rng.IntN(8) {
				m.Apply(next())
			}
			done, err := fz.Next(1 + rng.IntN(6))
			require.NoError(t, err, "seed %d", seed)
			require.NoError(t, fz.Flush(&got))
			if done {
				break
			}
		}
		require.Equal(t, want, got.buf.Bytes(), "seed %d", seed)
		if keysAtStart > 6 { // more than one Next can copy
			assert.Greater(t, got.writes, 1, "seed %d: written a chunk at a time", seed)
		}
		assert.Nil(t, m.freezer, "seed %d: the machine is no longer told of changes", seed)
		require.NoError(t, New(nil).Restore(got.buf.Bytes()), "seed %d", seed)
	}
}

func TestFreezerOfAnEmptyMachine(t *testing.T) {
	m := New(nil)
	fz := m.StartFreeze()
	m.Apply(acquire(ms, "added", ownerA, time.Second, 0))
	done, err := fz.Next(10)
	require.NoError(t, err)
	require.True(t, done)
	var got bytes.Buffer
	require.NoError(t, fz.Flush(&got))
	assert.Equal(t, New(nil).Snapshot(), got.Bytes())
}

func TestRestoreFailsARunningFreezer(t *testing.T) {
	m := populated(t)
	fz := m.StartFreeze()
	_, err := fz.Next(1)
	require.NoError(t, err)
	require.NoError(t, m.Restore(New(nil).Snapshot()))
	_, err = fz.Next(1)
	assert.ErrorIs(t, err, errFreezeRestored)
}

func TestStartFreezeStopsThePreviousOne(t *testing.T) {
	m := populated(t)
	first := m.StartFreeze()
	second := m.StartFreeze()
	_, err := first.Next(1)
	assert.Error(t, err)
	done, err := second.Next(100)
	require.NoError(t, err)
	assert.True(t, done)
}

type chunkRecorder struct {
	buf    bytes.Buffer
	writes int
}

func (c *chunkRecorder) Write(p []byte) (int, error) {
	c.writes++
	return c.buf.Write(p)
}

func TestFreezerFlushReportsTheWritersError(t *testing.T) {
	fz := populated(t).StartFreeze()
	_, err := fz.Next(100)
	require.NoError(t, err)
	broken := errors.New("disk full")
	assert.ErrorIs(t, fz.Flush(failingWriter{broken}), broken)
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }
