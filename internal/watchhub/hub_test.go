package watchhub

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const forever = time.Hour

// waitAsync runs Wait in a goroutine and returns its answer's channel, once
// the hub has registered it (or Wait has returned).
func waitAsync(t *testing.T, h *Hub, ctx context.Context, scope string, prefix bool, after uint64) <-chan error {
	t.Helper()
	before := h.Watchers()
	done := make(chan error, 1)
	go func() { done <- h.Wait(ctx, scope, prefix, after, forever) }()
	require.Eventually(t, func() bool { return h.Watchers() > before || len(done) > 0 }, 10*time.Second, time.Millisecond)
	return done
}

func answered(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
		return nil
	}
}

func TestWaitAnswersAtOnceForAChangeAlreadyRecorded(t *testing.T) {
	h := New(8, 8, 0)
	h.Record(5, "a")
	ctx := context.Background()
	// A change at 5 after index 4 was applied before the caller waits: at once.
	assert.NoError(t, h.Wait(ctx, "a", false, 4, forever))
	assert.NoError(t, h.Wait(ctx, "", true, 4, forever), "the empty prefix covers every key")
	assert.Zero(t, h.Watchers())
}

func TestWaitWakesOnTheKeyOrPrefixOnlyAndCleansUp(t *testing.T) {
	h := New(8, 8, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := waitAsync(t, h, ctx, "orders/1", false, 0)
	pre := waitAsync(t, h, ctx, "orders/", true, 0)
	other := waitAsync(t, h, ctx, "users/", true, 0)
	require.Equal(t, 3, h.Watchers())

	h.Record(1, "orders/2")
	assert.NoError(t, answered(t, pre), "a key under the prefix wakes the prefix watcher")
	assert.Len(t, key, 0, "another key does not wake a key watcher")
	h.Record(2, "orders/1")
	assert.NoError(t, answered(t, key))
	assert.Len(t, other, 0)
	assert.Equal(t, 1, h.Watchers())
	cancel()
	assert.ErrorIs(t, answered(t, other), context.Canceled)
	assert.Zero(t, h.Watchers(), "no registration survives its ctx")
	assert.Empty(t, h.keys)
	assert.Empty(t, h.prefixes)
}

func TestWaitAnswersAtOnceWhenTheRingNoLongerCoversTheIndex(t *testing.T) {
	h := New(2, 8, 0)
	h.Record(1, "a")
	h.Record(2, "b")
	h.Record(3, "c") // drops the change at 1
	ctx := context.Background()
	assert.NoError(t, h.Wait(ctx, "zzz", false, 0, forever), "index 0 is older than the ring")
	done := waitAsync(t, h, ctx, "zzz", false, 1)
	h.Record(4, "d")
	assert.Len(t, done, 0, "index 1 is still covered: changes above it are all in the ring")
	h.Reset(10)
	assert.NoError(t, answered(t, done), "a reset wakes everyone")
	assert.NoError(t, h.Wait(ctx, "zzz", false, 9, forever), "an index from before the reset answers at once")
}

func TestWaitEndsAfterItsWaitAndRefusesPastTheMaximum(t *testing.T) {
	h := New(8, 1, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := waitAsync(t, h, ctx, "a", false, 0)
	assert.ErrorIs(t, h.Wait(ctx, "b", false, 0, forever), ErrFull)
	cancel()
	assert.ErrorIs(t, answered(t, done), context.Canceled)
	assert.NoError(t, h.Wait(context.Background(), "a", false, 0, time.Millisecond), "the wait runs out: nil, like a wake")
	assert.Zero(t, h.Watchers())
}

func TestCloseWakesWatchers(t *testing.T) {
	h := New(8, 8, 0)
	done := waitAsync(t, h, context.Background(), "a", true, 0)
	h.Close()
	assert.ErrorIs(t, answered(t, done), ErrClosed)
	assert.ErrorIs(t, h.Wait(context.Background(), "a", false, 0, forever), ErrClosed)
}

// Prefix watchers are found whether there are fewer distinct prefixes than
// the key is long, or more.
func TestManyPrefixesAndFew(t *testing.T) {
	for _, extra := range []int{0, 40} {
		h := New(8, 100, 0)
		ctx, cancel := context.WithCancel(context.Background())
		for i := range extra {
			waitAsync(t, h, ctx, "other/"+strconv.Itoa(i), true, 0)
		}
		empty := waitAsync(t, h, ctx, "", true, 0)
		dir := waitAsync(t, h, ctx, "orders/", true, 0)
		h.Record(1, "orders/1")
		assert.NoError(t, answered(t, empty), "with %d other prefixes", extra)
		assert.NoError(t, answered(t, dir), "with %d other prefixes", extra)
		assert.Equal(t, extra, h.Watchers())
		cancel()
		require.Eventually(t, func() bool { return h.Watchers() == 0 }, 10*time.Second, time.Millisecond)
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	h := New(64, 8, 0)
	key := "orders/1"
	var i uint64
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		h.Record(i, key)
	})
	assert.Zero(t, allocs)
}

// A model check of Wait's decision to answer at once: after random changes
// (several keys per index at times, old ones pushed out of a small ring),
// for every scope and index it answers at once exactly when a change to the
// scope above that index was recorded, or the ring no longer holds every
// change above it (spurious, allowed). Otherwise it registers, and Record
// wakes it (TestWaitWakesOnTheKeyOrPrefixOnlyAndCleansUp).
func TestWaitAgreesWithAModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "a/b", "a/c", "b", "b/a"}
	scopes := []struct {
		scope  string
		prefix bool
	}{{"a", false}, {"a/b", false}, {"b", false}, {"a/", true}, {"b", true}, {"", true}, {"c", true}}
	for round := range 50 {
		h := New(4, 100, 0)
		var changes []change
		var index uint64
		for range rng.IntN(10) {
			index += uint64(1 + rng.IntN(2))
			for range 1 + rng.IntN(2) { // one entry may change several keys
				k := keys[rng.IntN(len(keys))]
				h.Record(index, k)
				changes = append(changes, change{index, k})
			}
		}
		covered := uint64(0)
		if len(changes) > 4 {
			covered = changes[len(changes)-5].index
		}
		for after := uint64(0); after <= index+1; after++ {
			for _, sc := range scopes {
				want := after < covered
				for _, c := range changes {
					if c.index > after && (c.key == sc.scope || sc.prefix && strings.HasPrefix(c.key, sc.scope)) {
						want = true
					}
				}
				got := h.changedLocked(sc.scope, sc.prefix, after) || after < h.covered
				require.Equal(t, want, got, "round %d: scope %q (prefix %v) after %d; changes %v", round, sc.scope, sc.prefix, after, changes)
			}
		}
	}
}
