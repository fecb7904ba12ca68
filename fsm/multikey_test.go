package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func acquireAll(at time.Duration, o Owner, ttl, wait time.Duration, keys ...string) Command {
	return Command{Op: OpAcquireAll, Stamp: at, Owner: o, TTL: ttl, Wait: wait, Keys: keys}
}

// manyKeys is n distinct keys in ascending order.
func manyKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
	}
	return keys
}

// grantedKeys is the keys of the EventGranted events to owner, each with
// its token.
func grantedKeys(events []Event, owner Owner) map[string]uint64 {
	out := map[string]uint64{}
	for _, e := range events {
		if e.Kind == EventGranted && e.Owner == owner {
			out[e.Key] = e.Token
		}
	}
	return out
}

func TestAcquireAllValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Command
		want error
	}{
		{"no keys", acquireAll(0, ownerA, ms, 0), ErrKeyCount},
		{"too many keys", acquireAll(0, ownerA, ms, 0, manyKeys(MaxKeys+1)...), ErrKeyCount},
		{"duplicate", acquireAll(0, ownerA, ms, 0, "a", "a"), ErrDuplicateKey},
		{"unsorted", acquireAll(0, ownerA, ms, 0, "b", "a"), ErrKeysOrder},
		{"empty key", acquireAll(0, ownerA, ms, 0, "", "a"), ErrEmptyKey},
		{"session", Command{Op: OpAcquireAll, Owner: ownerA, Session: sessionS, Keys: []string{"a"}}, ErrKeysSession},
		{"zero owner", acquireAll(0, Owner{}, ms, 0, "a"), ErrZeroOwner},
		{"no ttl", acquireAll(0, ownerA, 0, 0, "a"), ErrTTLRange},
		{"key field", Command{Op: OpAcquireAll, Key: "a", Owner: ownerA, TTL: ms, Keys: []string{"a"}}, ErrUnusedField},
		{"semaphore", Command{Op: OpAcquireAll, Owner: ownerA, TTL: ms, Keys: []string{"a"}, Kind: KindSemaphore, Limit: 2}, ErrUnusedField},
		{"keys on an acquire", Command{Op: OpAcquire, Key: "a", Owner: ownerA, TTL: ms, Keys: []string{"a"}}, ErrUnusedField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ErrorIs(t, tt.c.Validate(), tt.want)
			m := New(nil)
			assert.Equal(t, StatusInvalid, m.Apply(tt.c).Status)
			assert.Zero(t, m.Len(), "nothing applied")
		})
	}
	assert.NoError(t, acquireAll(0, ownerA, ms, 0, manyKeys(MaxKeys)...).Validate())
}

func TestAcquireAllGrantsEveryKeyWithOneToken(t *testing.T) {
	m := newRecorder()
	m.Apply(acquire(0, "x", ownerD, time.Second, 0)) // token 1: the set's token is new
	r, events := m.apply(acquireAll(ms, ownerA, 10*ms, 0, "a", "b", "c"))
	require.Equal(t, StatusGranted, r.Status)
	assert.Equal(t, uint64(2), r.Token)
	assert.Equal(t, 11*ms, r.ExpiresAt)
	assert.Empty(t, events)
	for _, k := range []string{"a", "b", "c"} {
		st := m.Lookup(k, 0)
		assert.Equal(t, KeyState{Held: true, Owner: ownerA, Token: 2, ExpiresAt: 11 * ms, SetKeys: 3}, st, k)
	}
	assert.Equal(t, []string{"a", "b", "c"}, m.SetKeys(ownerA))
	// A retry with the same set is the same grant, not lengthened.
	r2 := m.Apply(acquireAll(5*ms, ownerA, 10*ms, time.Second, "a", "b", "c"))
	assert.Equal(t, Result{Status: StatusGranted, Token: 2, ExpiresAt: 11 * ms, Now: 5 * ms}, r2)
	// Another set by the same owner, or a single key of it, finds it held.
	assert.Equal(t, StatusHeld, m.Apply(acquireAll(5*ms, ownerA, 10*ms, 0, "a", "b")).Status)
	assert.Equal(t, StatusHeld, m.Apply(acquireAll(5*ms, ownerA, 10*ms, 0, "y")).Status)
	assert.Equal(t, StatusHeld, m.Apply(acquire(5*ms, "b", ownerA, 10*ms, 0)).Status)
	// Extend of any key extends the set.
	r = m.Apply(extend(6*ms, "c", ownerA, 20*ms))
	assert.Equal(t, StatusExtended, r.Status)
	for _, k := range []string{"a", "b", "c"} {
		assert.Equal(t, 26*ms, m.Lookup(k, 0).ExpiresAt, k)
	}
	// Expiry ends every key at once.
	_, events = m.apply(tick(26 * ms))
	require.Len(t, events, 3)
	for i, k := range []string{"a", "b", "c"} {
		assert.Equal(t, Event{Kind: EventExpired, Key: k, Owner: ownerA, Token: 2, ExpiresAt: 26 * ms, At: 26 * ms}, events[i])
	}
	assert.Equal(t, 1, m.Len(), "only x is left")
	assert.Nil(t, m.SetKeys(ownerA))
	require.NoError(t, checkInternals(m.Machine))
}

func TestAcquireAllIsAllOrNothing(t *testing.T) {
	m := New(nil)
	m.Apply(acquire(0, "b", ownerB, time.Second, 0))
	m.Apply(Command{Op: OpAcquire, Key: "sem", Owner: ownerB, TTL: time.Second, Kind: KindSemaphore, Limit: 2})
	before := m.Snapshot()

	r := m.Apply(acquireAll(0, ownerA, 10*ms, 0, "a", "b", "c"))
	assert.Equal(t, StatusHeld, r.Status)
	assert.Equal(t, uint64(1), r.Token, "the holder of the first key not free")
	r = m.Apply(acquireAll(0, ownerA, 10*ms, time.Second, "a", "sem"))
	assert.Equal(t, StatusKindMismatch, r.Status)
	assert.Equal(t, KindSemaphore, r.Kind)
	assert.Equal(t, 2, r.Limit)
	assert.Equal(t, 2, r.Waiters, "the second key is the semaphore")
	r = m.Apply(acquireAll(0, ownerB, 10*ms, time.Second, "a", "b"))
	assert.Equal(t, StatusHeld, r.Status, "the owner holds b singly")
	assert.Equal(t, before, m.Snapshot(), "nothing changed")
	assert.False(t, m.Lookup("a", 0).Held)
}

// A set waits on all its keys at once; a free key it waits for is reserved
// for it (a try-acquire finds it held, a waiter queues behind it); when
// its last key frees, it gets every key in that command, and its release
// hands each key to the next waiter in one command.
func TestAcquireAllWaitsReservesAndHandsOn(t *testing.T) {
	m := newRecorder()
	m.Apply(acquire(0, "b", ownerB, 10*ms, 0))
	r, _ := m.apply(acquireAll(ms, ownerA, 20*ms, time.Second, "a", "b"))
	require.Equal(t, StatusQueued, r.Status)
	assert.Equal(t, 1, r.Waiters)
	assert.Equal(t, KeyState{Waiters: 1, Reserved: true}, m.Lookup("a", 0))
	assert.Equal(t, 2, m.Len())
	assert.Equal(t, StatusHeld, m.Apply(acquire(2*ms, "a", ownerC, 10*ms, 0)).Status, "a reserved key is not free")
	assert.Equal(t, StatusNotHeld, m.Apply(forceRelease(2*ms, "a")).Status, "nobody holds a reserved key")
	r = m.Apply(acquire(2*ms, "a", ownerC, 10*ms, time.Second))
	require.Equal(t, StatusQueued, r.Status)
	assert.Equal(t, 2, r.Waiters, "behind the set")
	m.Apply(acquire(2*ms, "b", ownerD, 10*ms, time.Second))
	// A retry keeps the set's places.
	r = m.Apply(acquireAll(3*ms, ownerA, 20*ms, time.Second, "a", "b"))
	assert.Equal(t, StatusQueued, r.Status)
	assert.Equal(t, 1, r.Waiters)
	require.NoError(t, checkInternals(m.Machine))

	r, events := m.apply(release(4*ms, "b", ownerB))
	require.Equal(t, StatusReleased, r.Status)
	require.Len(t, events, 2)
	assert.Equal(t, map[string]uint64{"a": 2, "b": 2}, grantedKeys(events, ownerA), "both keys, one token")
	assert.Equal(t, 24*ms, events[0].ExpiresAt)
	require.NoError(t, checkInternals(m.Machine))

	// Releasing the set by either key hands each key on.
	_, events = m.apply(release(5*ms, "b", ownerA))
	assert.Equal(t, map[string]uint64{"a": 3}, grantedKeys(events, ownerC))
	assert.Equal(t, map[string]uint64{"b": 4}, grantedKeys(events, ownerD))
	assert.Equal(t, StatusNotHeld, m.Apply(release(5*ms, "a", ownerA)).Status)
	require.NoError(t, checkInternals(m.Machine))
}

// When the waiter a key is reserved for leaves (its wait ends, its owner
// cancels, or nobody claims it after a leader change), the key goes to its
// next waiter in that same command.
func TestAcquireAllLeavingWaiterHandsOnReservedKeys(t *testing.T) {
	setup := func() *recorder {
		m := newRecorder()
		m.Apply(acquire(0, "b", ownerB, time.Second, 0))
		m.Apply(acquireAll(0, ownerA, 10*ms, 5*ms, "a", "b", "c"))
		m.Apply(acquire(0, "a", ownerC, 10*ms, time.Second))
		m.Apply(acquire(0, "c", ownerD, 10*ms, time.Second))
		require.Equal(t, KeyState{Waiters: 2, Reserved: true}, m.Lookup("a", 0))
		return m
	}
	t.Run("wait ends", func(t *testing.T) {
		m := setup()
		_, events := m.apply(tick(5 * ms))
		require.Len(t, events, 5)
		for i, k := range []string{"a", "b", "c"} {
			assert.Equal(t, Event{Kind: EventWaitExpired, Key: k, Owner: ownerA, At: 5 * ms}, events[i])
		}
		assert.Equal(t, map[string]uint64{"a": 2}, grantedKeys(events, ownerC))
		assert.Equal(t, map[string]uint64{"c": 3}, grantedKeys(events, ownerD))
		require.NoError(t, checkInternals(m.Machine))
	})
	t.Run("cancel on any key", func(t *testing.T) {
		m := setup()
		r, events := m.apply(cancelWait(ms, "b", ownerA))
		assert.Equal(t, StatusCanceled, r.Status)
		assert.Equal(t, uint64(1), r.Token, "b's holder")
		assert.Equal(t, map[string]uint64{"a": 2}, grantedKeys(events, ownerC))
		assert.Equal(t, map[string]uint64{"c": 3}, grantedKeys(events, ownerD))
		assert.Equal(t, 0, m.Lookup("b", 0).Waiters)
		require.NoError(t, checkInternals(m.Machine))
	})
	t.Run("unclaimed", func(t *testing.T) {
		m := setup()
		m.Apply(newTerm(ms))
		m.Apply(acquire(ms, "a", ownerC, 10*ms, time.Second)) // C and D claim theirs
		m.Apply(acquire(ms, "c", ownerD, 10*ms, time.Second))
		r, events := m.apply(dropUnclaimed(ms))
		assert.Equal(t, 3, r.Waiters, "the set's three records")
		for _, k := range []string{"a", "b", "c"} {
			assert.Contains(t, events, Event{Kind: EventUnclaimed, Key: k, Owner: ownerA, At: ms})
		}
		assert.Equal(t, map[string]uint64{"a": 2}, grantedKeys(events, ownerC))
		assert.Equal(t, map[string]uint64{"c": 3}, grantedKeys(events, ownerD))
		require.NoError(t, checkInternals(m.Machine))
	})
	t.Run("unclaimed at a hand-off", func(t *testing.T) {
		m := setup()
		m.Apply(newTerm(ms))
		m.Apply(acquire(ms, "a", ownerC, 10*ms, time.Second))
		_, events := m.apply(release(ms, "b", ownerB))
		assert.Contains(t, events, Event{Kind: EventUnclaimed, Key: "a", Owner: ownerA, At: ms})
		assert.Equal(t, map[string]uint64{"a": 2}, grantedKeys(events, ownerC))
		assert.Equal(t, StatusNotHeld, m.Apply(release(ms, "c", ownerD)).Status, "D did not claim: dropped too")
		require.NoError(t, checkInternals(m.Machine))
	})
	t.Run("force-release of the set", func(t *testing.T) {
		m := setup()
		_, events := m.apply(release(ms, "b", ownerB))
		require.Equal(t, map[string]uint64{"a": 2, "b": 2, "c": 2}, grantedKeys(events, ownerA))
		r, events := m.apply(forceRelease(2*ms, "c"))
		assert.Equal(t, Result{Status: StatusReleased, Token: 2, Now: 2 * ms, Waiters: 0}, r)
		assert.Equal(t, map[string]uint64{"a": 3}, grantedKeys(events, ownerC))
		assert.Equal(t, map[string]uint64{"c": 4}, grantedKeys(events, ownerD))
		assert.False(t, m.Lookup("b", 0).Held)
		require.NoError(t, checkInternals(m.Machine))
	})
}

// Strict FIFO per key: a set at the head of a key is never passed there,
// and a set behind a single waiter waits for it.
func TestAcquireAllFIFOWithSingleWaiters(t *testing.T) {
	m := newRecorder()
	m.Apply(acquire(0, "a", ownerB, 10*ms, 0))
	m.Apply(acquire(0, "b", ownerC, 10*ms, 0))
	m.Apply(acquire(0, "a", ownerD, 10*ms, time.Second)) // D first on a
	m.Apply(acquireAll(0, ownerA, 10*ms, time.Second, "a", "b"))
	_, events := m.apply(release(ms, "b", ownerC))
	assert.Empty(t, events, "b is reserved for the set, which still waits for a")
	assert.True(t, m.Lookup("b", 0).Reserved)
	_, events = m.apply(release(ms, "a", ownerB))
	assert.Equal(t, map[string]uint64{"a": 3}, grantedKeys(events, ownerD), "D was first on a")
	_, events = m.apply(release(2*ms, "a", ownerD))
	assert.Equal(t, map[string]uint64{"a": 4, "b": 4}, grantedKeys(events, ownerA))
	require.NoError(t, checkInternals(m.Machine))
}

// Two sets over the same keys (listed in either order: the command sorts
// them) never deadlock: the older waits at the head of every queue it
// shares with the younger.
func TestAcquireAllNoDeadlock(t *testing.T) {
	m := newRecorder()
	m.Apply(acquire(0, "b", ownerC, 10*ms, 0))
	m.Apply(acquire(0, "c", ownerD, 10*ms, 0))
	require.Equal(t, StatusQueued, m.Apply(acquireAll(0, ownerA, 10*ms, time.Second, "a", "b", "c")).Status)
	require.Equal(t, StatusQueued, m.Apply(acquireAll(0, ownerB, 10*ms, time.Second, "a", "b", "c")).Status)
	_, events := m.apply(release(ms, "c", ownerD))
	assert.Empty(t, events)
	_, events = m.apply(release(ms, "b", ownerC))
	assert.Len(t, grantedKeys(events, ownerA), 3)
	_, events = m.apply(release(2*ms, "a", ownerA))
	assert.Len(t, grantedKeys(events, ownerB), 3)
	require.NoError(t, checkInternals(m.Machine))
}

func TestAcquireAllQueueFull(t *testing.T) {
	m := New(nil)
	m.Apply(acquire(0, "b", ownerB, time.Second, 0))
	for i := range MaxWaiters {
		m.Apply(acquire(0, "b", numberedOwner(i), time.Second, time.Second))
	}
	before := m.Snapshot()
	r := m.Apply(acquireAll(0, ownerA, ms, time.Second, "a", "b"))
	assert.Equal(t, StatusQueueFull, r.Status)
	assert.Equal(t, before, m.Snapshot())
}

// multiMachine has every multi-key state: a set held (with metadata),
// a set waiting with a reserved key and single waiters behind it, and a
// set waiting behind a lock-delay.
func multiMachine(tb testing.TB) *Machine {
	tb.Helper()
	held := acquireAll(ms, ownerA, 50*ms, 0, "h/1", "h/2")
	held.Meta = "job=1"
	return fixtureMachine(tb, []Command{
		createSession(0, sessionT, 10*ms, 50*ms),
		acquireIn(0, "d", ownerB, sessionT, 0, ""),
		held,
		acquireAll(2*ms, ownerC, 20*ms, time.Second, "d", "h/2", "r"),
		acquire(2*ms, "r", ownerD, 20*ms, time.Second),
		newTerm(3 * ms),
		acquire(3*ms, "h/1", ownerD, 20*ms, time.Second),
		tick(11 * ms), // T expires: d stays delayed
	}, StatusInvalid, StatusNoSession, StatusHeld)
}

func TestAcquireAllSnapshot(t *testing.T) {
	m := multiMachine(t)
	require.NoError(t, checkInternals(m))
	require.True(t, m.Lookup("d", 0).Delayed)
	require.True(t, m.Lookup("r", 0).Reserved)
	snap := m.Snapshot()
	m2 := restoredCopy(t, m, snap, "d", "h/1", "h/2", "r")
	// Both go on alike.
	for _, c := range []Command{acquireAll(12*ms, ownerC, 20*ms, time.Second, "d", "h/2", "r"), tick(51 * ms), tick(61 * ms), release(62*ms, "r", ownerC)} {
		assert.Equal(t, m.Apply(c), m2.Apply(c))
		assert.Equal(t, m.Snapshot(), m2.Snapshot())
	}

	// The version 5 fixture restores to this state.
	path := filepath.Join("testdata", "snapshot-v5.bin")
	if os.Getenv("FSM_UPDATE_FIXTURES") != "" {
		require.NoError(t, os.WriteFile(path, asV5(t, snap), 0o644))
	}
	v5, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, asV5(t, snap), v5, "the fixture is multiMachine's state")
	m3 := New(nil)
	require.NoError(t, m3.Restore(v5))
	assert.Equal(t, snap, m3.Snapshot(), "version 6 writes it with no releases remembered")

	// Version 4 has no reserved keys, set holders or set waiters.
	v4 := asV5(t, snap)
	v4[0] = 4
	assert.ErrorIs(t, New(nil).Restore(v4), ErrBadEncoding)

	// A freeze copied while sets are granted and released gives the bytes
	// of its start.
	m = multiMachine(t)
	fz := m.StartFreeze()
	m.Apply(release(12*ms, "h/1", ownerA))
	m.Apply(acquireAll(12*ms, ownerB, 5*ms, 0, "new/1", "new/2"))
	m.Apply(tick(61 * ms))
	assert.Equal(t, snap, frozenBytes(t, fz))
}

func TestAcquireAllRestoreRejects(t *testing.T) {
	snap := multiMachine(t).Snapshot()
	require.NoError(t, New(nil).Restore(snap))
	// Every single-byte change either fails or restores a state that
	// passes the internal checks (the fuzzer does this at large).
	for i := range snap {
		for _, delta := range []byte{1, 0xff} {
			in := bytes.Clone(snap)
			in[i] += delta
			m := New(nil)
			if err := m.Restore(in); err == nil {
				require.NoError(t, checkInternals(m), "byte %d +%d", i, delta)
			}
		}
	}
}

// multiLog generates random logs of single-key and multi-key commands on a
// few keys, with leader changes, force-releases, a semaphore key (kind
// mismatches) and session-bound single waiters.
type multiLog struct {
	r      *rand.Rand
	clock  time.Duration
	keys   []string
	owners []Owner
}

func newMultiLog(seed uint64) *multiLog {
	g := &multiLog{r: rand.New(rand.NewPCG(seed, seed^0x51ed270b27a1c5f3))}
	g.keys = []string{"a", "b", "c", "d", "sem"}
	for i := range 6 {
		g.owners = append(g.owners, Owner{byte(0x20 * (i + 1)), 15: byte(i + 1)})
	}
	return g
}

func (g *multiLog) next() Command {
	g.clock += time.Duration(g.r.IntN(1500)) * time.Microsecond
	stamp := g.clock
	key := g.keys[g.r.IntN(len(g.keys)-1)]
	o := g.owners[g.r.IntN(len(g.owners))]
	ttl := time.Duration(1+g.r.IntN(20)) * ms
	var wait time.Duration
	if g.r.IntN(4) > 0 {
		wait = time.Duration(1+g.r.IntN(40000)) * time.Microsecond
	}
	switch n := g.r.IntN(100); {
	case n < 30:
		var keys []string
		for _, k := range g.keys {
			if g.r.IntN(3) == 0 && (k != "sem" || g.r.IntN(4) == 0) {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			keys = []string{key}
		}
		c := acquireAll(stamp, o, ttl, wait, keys...)
		if g.r.IntN(3) == 0 {
			c.Meta = "m"
		}
		return c
	case n < 50:
		return acquire(stamp, key, o, ttl, wait)
	case n < 53:
		return Command{Op: OpAcquire, Stamp: stamp, Key: "sem", Owner: o, TTL: ttl, Wait: wait, Kind: KindSemaphore, Limit: 2}
	case n < 55:
		return createSession(stamp, sessionS, time.Duration(1+g.r.IntN(30))*ms, time.Duration(g.r.IntN(3))*ms)
	case n < 57:
		return acquireIn(stamp, key, o, sessionS, wait, "")
	case n < 59:
		return renewSession(stamp, sessionS)
	case n < 72:
		return release(stamp, key, o)
	case n < 78:
		return extend(stamp, key, o, ttl)
	case n < 86:
		return cancelWait(stamp, key, o)
	case n < 90:
		return tick(stamp)
	case n < 92:
		return newTerm(stamp)
	case n < 94:
		return dropUnclaimed(stamp)
	default:
		return forceRelease(stamp, key)
	}
}

// The multi-key property test: random logs mixing sets with single keys,
// checked after every step for the machine's invariants (checkInternals,
// with checkSets: never a partial grant, a reserved key has a set at the
// head of its queue, no waiting set that could be granted), for grants
// that always cover a whole set with one new token, for strictly growing
// tokens, for replicas that stay byte-identical (one fed the commands
// through their encoding, one restored from a snapshot now and then), and
// for a freeze that gives its start's bytes.
func TestRandomMultiKeySequencesKeepInvariants(t *testing.T) {
	const steps = 3000
	for _, seed := range randomSeeds(t, 8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			g := newMultiLog(seed)
			m := newRecorder()
			replica := New(nil)
			var lastToken uint64
			grants := 0
			var fz *Freezer
			var fzWant []byte
			var fzBuf bytes.Buffer
			for i := range steps {
				c := g.next()
				r, events := m.apply(c)
				fail := func(err error) {
					t.Fatalf("seed %d step %d %s %+v -> %+v events %+v: %v", seed, i, c.Op, c, r, events, err)
				}
				b, err := c.AppendBinary(nil)
				if err == nil {
					dc, derr := DecodeCommand(b)
					require.NoError(t, derr)
					if rr := replica.Apply(dc); rr != r {
						fail(fmt.Errorf("replica answered %+v", rr))
					}
				} else {
					replica.Apply(c)
				}
				if err := checkInternals(m.Machine); err != nil {
					fail(err)
				}
				// Grants by hand-off: a set's keys all at once, one token.
				byOwner := map[Owner]map[string]uint64{}
				for _, e := range events {
					if e.Kind == EventGranted {
						if byOwner[e.Owner] == nil {
							byOwner[e.Owner] = map[string]uint64{}
						}
						byOwner[e.Owner][e.Key] = e.Token
						if e.Token < lastToken {
							fail(fmt.Errorf("token %d after %d", e.Token, lastToken))
						}
						lastToken = e.Token
					}
				}
				for o, got := range byOwner {
					// An owner may hold other keys singly: only its set's
					// keys count, and those all or none.
					keys := m.SetKeys(o)
					n := 0
					for _, k := range keys {
						if _, ok := got[k]; ok {
							n++
						}
					}
					if n == 0 {
						continue
					}
					grants++
					if n != len(keys) {
						fail(fmt.Errorf("set of %x granted %v of %v", o[:1], got, keys))
					}
					for _, k := range keys {
						if got[k] != got[keys[0]] {
							fail(fmt.Errorf("set of %x granted with several tokens %v", o[:1], got))
						}
					}
				}
				if c.Op == OpAcquireAll && r.Status == StatusGranted {
					for _, k := range c.Keys {
						if st := m.Lookup(k, 0); !st.Held || st.Owner != c.Owner || st.Token != r.Token || st.SetKeys != len(c.Keys) {
							fail(fmt.Errorf("granted set, but %q reads %+v", k, st))
						}
					}
					if r.Token > lastToken {
						lastToken = r.Token
						grants++
					}
				}
				if c.Op == OpAcquire && r.Status == StatusGranted {
					lastToken = max(lastToken, r.Token)
				}
				want, wantOK := earliestDeadline(m.Machine)
				got, ok := m.NextDeadline()
				if got != want || ok != wantOK {
					fail(fmt.Errorf("next deadline %v,%v want %v,%v", got, ok, want, wantOK))
				}
				if i%50 == 0 {
					snap := m.Snapshot()
					if !bytes.Equal(snap, replica.Snapshot()) {
						fail(fmt.Errorf("replica's snapshot differs"))
					}
					if err := replica.Restore(snap); err != nil {
						fail(fmt.Errorf("restore: %w", err))
					}
					if !bytes.Equal(snap, replica.Snapshot()) {
						fail(fmt.Errorf("restored snapshot differs"))
					}
				}
				// A freeze runs a chunk per step over some hundred steps.
				if fz == nil && i%300 == 0 {
					fz, fzWant = m.StartFreeze(), m.Snapshot()
					fzBuf.Reset()
				} else if fz != nil {
					done, err := fz.Next(1)
					if err != nil {
						fail(err)
					}
					require.NoError(t, fz.Flush(&fzBuf))
					if done {
						if !bytes.Equal(fzWant, fzBuf.Bytes()) {
							fail(fmt.Errorf("freeze gave other bytes than its start's"))
						}
						fz = nil
					}
				}
			}
			assert.Positive(t, grants, "some sets were granted")
		})
	}
}

// BenchmarkApplyAcquireAll: a set of 4 keys (of 1,024, with 100,000 other
// keys held) taken and released, one iteration per set; and the hand-off
// of a set between two owners that queue for it in turn.
func BenchmarkApplyAcquireAll(b *testing.B) {
	b.Run("free", func(b *testing.B) {
		m := heldMachine(100_000)
		keys := lockKeys(1024)
		for i := range keys {
			keys[i] = "bench/" + keys[i]
		}
		slices.Sort(keys)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			j := (i * 4) % len(keys)
			stamp := time.Duration(i) * time.Microsecond
			if r := m.Apply(acquireAll(stamp, ownerA, time.Second, 0, keys[j:j+4]...)); r.Status != StatusGranted {
				b.Fatal(r)
			}
			if r := m.Apply(release(stamp, keys[j], ownerA)); r.Status != StatusReleased {
				b.Fatal(r)
			}
		}
	})
	b.Run("handoff", func(b *testing.B) {
		m := New(nil)
		set := []string{"a", "b", "c", "d"}
		owners := []Owner{ownerA, ownerB}
		for _, o := range owners {
			m.Apply(acquireAll(0, o, time.Second, time.Hour, set...))
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			o := owners[i%2]
			stamp := time.Duration(i) * time.Microsecond
			if r := m.Apply(release(stamp, "c", o)); r.Status != StatusReleased {
				b.Fatal(r)
			}
			if r := m.Apply(acquireAll(stamp, o, time.Second, time.Hour, set...)); r.Status != StatusQueued {
				b.Fatal(r)
			}
		}
	})
}
