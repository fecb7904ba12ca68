package integration

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// The checkers must be able to fail: these tests run the workloads against
// stores broken on purpose and expect violations.

// doubleGranting is a store that now and then grants a held key to a
// second owner, with a fresh token, as a split-brain cluster would.
type doubleGranting struct {
	*memstore.Store
	every int // one held acquire in every grants anyway
	n     atomic.Int64
	fake  atomic.Uint64

	mu      sync.Mutex // protects holders
	holders map[string]lock.Owner
}

func (d *doubleGranting) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	lease, err := d.Store.Acquire(ctx, req)
	if errors.Is(err, lock.ErrLocked) && d.n.Add(1)%int64(d.every) == 0 {
		return lock.Lease{Token: 1<<40 + d.fake.Add(1), Remaining: req.TTL}, nil
	}
	return lease, err
}

// oneStore is a storeSet of one store.
type oneStore struct{ s lock.Store }

func (o oneStore) size() int            { return 1 }
func (o oneStore) store(int) lock.Store { return o.s }

func quickSettings(t *testing.T) settings {
	s := loadSettings(t)
	s.workload = 2 * time.Second
	s.violationsDir = t.TempDir()
	return s
}

func TestLinearizabilityCheckerCatchesADoubleGrant(t *testing.T) {
	s := quickSettings(t)
	rep := newReport("broken/double-grant", s)
	store := &doubleGranting{Store: memstore.New(), every: 50}
	t.Cleanup(func() { store.Close() })
	nem := &nemesis{rep: rep, events: newEventLog(rep.started)}
	runLinearizable(t, s, rep, oneStore{store}, nem, 6, 2)
	require.Greater(t, rep.ops, 100, "the workload ran")
	assert.NotEmpty(t, rep.violations, "a double grant is a violation")
	assert.DirExists(t, rep.artifacts, "the history is kept")
	assert.FileExists(t, rep.artifacts+"/visualization.html")
}

func TestLinearizabilityCheckerPassesACorrectStore(t *testing.T) {
	s := quickSettings(t)
	rep := newReport("memory-store", s)
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	nem := &nemesis{rep: rep, events: newEventLog(rep.started)}
	runLinearizable(t, s, rep, oneStore{store}, nem, 6, 2)
	require.Greater(t, rep.ops, 100, "the workload ran")
	assert.Empty(t, rep.violations)
	assert.Empty(t, rep.problems)
}

func TestFencedCheckerCatchesADoubleGrant(t *testing.T) {
	s := quickSettings(t)
	rep := newReport("broken/double-grant-fenced", s)
	store := &doubleGranting{Store: memstore.New(), every: 3}
	t.Cleanup(func() { store.Close() })
	nem := &nemesis{rep: rep, events: newEventLog(rep.started)}
	runFenced(t, s, rep, oneStore{store}, nem, fencedRun{
		cfg:     fencedConfig{Key: "fenced", TTL: time.Hour, Work: 5 * time.Millisecond, Writes: 4},
		holders: 4,
	})
	assert.NotEmpty(t, rep.violations, "two holders at once are a violation")
}

func TestFencedCheckerPassesExpiringLeases(t *testing.T) {
	s := quickSettings(t)
	rep := newReport("memory-store-fenced-expiry", s)
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	nem := &nemesis{rep: rep, events: newEventLog(rep.started)}
	runFenced(t, s, rep, oneStore{store}, nem, fencedRun{
		cfg:     fencedConfig{Key: "fenced", TTL: 200 * time.Millisecond, Wait: time.Second, Expiry: true, Stall: true, Work: 5 * time.Millisecond, Writes: 4},
		holders: 4,
	})
	assert.Empty(t, rep.violations)
	assert.Empty(t, rep.problems)
}

// overstating is a store that tells holders their leases last three times
// longer than they do, as a cluster whose lease clock ran fast would.
type overstating struct{ *memstore.Store }

func (o overstating) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	lease, err := o.Store.Acquire(ctx, req)
	lease.Remaining *= 3
	return lease, err
}

func (o overstating) Extend(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error) {
	lease, err := o.Store.Extend(ctx, key, owner, ttl)
	lease.Remaining *= 3
	return lease, err
}

func TestFencedCheckerCatchesALeaseEndingBeforeItsDeadline(t *testing.T) {
	s := quickSettings(t)
	rep := newReport("broken/overstated-lease", s)
	store := overstating{memstore.New()}
	t.Cleanup(func() { store.Close() })
	nem := &nemesis{rep: rep, events: newEventLog(rep.started)}
	runFenced(t, s, rep, oneStore{store}, nem, fencedRun{
		cfg:     fencedConfig{Key: "fenced", TTL: 200 * time.Millisecond, Wait: time.Second, Expiry: true, Stall: true, Work: 5 * time.Millisecond, Writes: 4},
		holders: 4,
	})
	assert.NotEmpty(t, rep.violations, "a lease that ends before its holder's deadline is a violation")
}

func TestCheckFenced(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	clean := []window{{Client: 0, Token: 1, Start: ms(0), End: ms(10)}, {Client: 1, Token: 2, Start: ms(10), End: ms(20)}}
	events := []regEvent{
		{at: ms(1), client: 0, token: 1, ok: true},
		{at: ms(2), client: 0, token: 1, write: true, value: 1, ok: true},
		{at: ms(11), client: 1, token: 2, value: 1, ok: true},
		{at: ms(12), client: 0, token: 1, write: true, value: 2, ok: false}, // late: refused, outside its window
		{at: ms(13), client: 1, token: 2, write: true, value: 2, ok: true},
	}
	assert.Empty(t, checkFenced(clean, events))

	overlapping := []window{clean[0], {Client: 1, Token: 2, Start: ms(5), End: ms(20)}}
	assert.Len(t, checkFenced(overlapping, nil), 1, "two holders at once")

	refused := append([]regEvent(nil), events...)
	refused[3].at = ms(9) // refused while client 0 still held the lock
	assert.Len(t, checkFenced(clean, refused), 1, "a valid holder fenced off")

	lost := append([]regEvent(nil), events...)
	lost[4].value = 1 // wrote what was already there: an increment vanished
	assert.Len(t, checkFenced(clean, lost), 1, "a lost update")
}

// A holder's acquire answered with a lower token than one granted before
// it was sent is a violation, unless the holder was granted that token
// before (its own lease, answered again to the same owner): also when it
// never used that grant (window.GrantOnly), as a holder whose deadline had
// passed by the time its acquire returned after an outage.
func TestKindCheckerTokenOrderKnowsUnusedGrants(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	rw := fencedConfig{RW: true}
	unused := window{Client: 0, Token: 18, Sent: ms(1), Start: ms(5), End: ms(5), Shared: true, GrantOnly: true}
	later := window{Client: 5, Token: 22, Sent: ms(8), Start: ms(10), End: ms(50), Shared: true}
	again := window{Client: 0, Token: 18, Sent: ms(15), Start: ms(20), End: ms(30), Shared: true}
	assert.Empty(t, checkKindWindows(rw, []window{unused, later, again}), "the same owner's lease, answered again")
	assert.Len(t, checkKindWindows(rw, []window{later, again}), 1, "a lower token for an acquire sent after a higher grant")
	stale := window{Client: 1, Token: 19, Sent: ms(15), Start: ms(20), End: ms(30), Shared: true}
	assert.Len(t, checkKindWindows(rw, []window{unused, later, stale}), 1, "another client's lower token is still caught")
	writer := window{Client: 2, Token: 23, Sent: ms(2), Start: ms(4), End: ms(6)}
	assert.Empty(t, checkKindWindows(rw, []window{unused, writer}), "an unused grant holds no time")
	assert.Empty(t, checkFenced([]window{{Client: 3, Token: 1, Start: ms(0), End: ms(10)}, {Client: 4, Token: 2, Start: ms(3), End: ms(3), GrantOnly: true}}, nil),
		"an unused grant overlaps nobody")
}

func TestDurabilityVerifyCatchesLostState(t *testing.T) {
	s := quickSettings(t)
	rep := newReport("broken/durability", s)
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	w := &durWorkload{rep: rep}
	c := &durClient{workClient: &workClient{owner: lock.NewOwner(), stores: oneStore{store}, rng: s.rng(1), unexpected: &errorLog{}},
		keys: []string{"a", "b", "c"}, state: map[string]*durState{}}
	ctx := context.Background()
	lease, err := store.Acquire(ctx, lock.AcquireRequest{Key: "a", Owner: c.owner, TTL: time.Hour})
	require.NoError(t, err)
	c.state["a"] = &durState{locked: true, token: lease.Token}
	c.state["b"] = &durState{}
	c.state["c"] = &durState{}
	assert.Equal(t, 3, w.verify([]*durClient{c}, oneStore{store}, ctx))
	assert.Empty(t, rep.violations, "the store matches what was acknowledged")

	c.state["b"] = &durState{locked: true, token: 99} // acknowledged, but the store forgot it
	c.state["a"].token++                              // a different grant
	w.verify([]*durClient{c}, oneStore{store}, ctx)
	assert.Len(t, rep.violations, 2)
}

// loosened is a store that lets one holder more into every semaphore than
// asked, and turns every write of a read/write lock into a read, as a
// state machine that miscounted holders would.
type loosened struct{ *memstore.Store }

func (l loosened) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	switch req.Kind {
	case lock.KindSemaphore:
		req.Limit++
	case lock.KindRWLock:
		req.Shared = true
	}
	return l.Store.Acquire(ctx, req)
}

// The kinds checker passes the memory store's semaphores and read/write
// locks (with expiring leases and stalls), and catches a store that lets
// too many in.
func TestKindCheckerPassesACorrectStoreAndCatchesALooseOne(t *testing.T) {
	for _, cfg := range []fencedConfig{
		{Key: "sem", TTL: 200 * time.Millisecond, Wait: time.Second, Expiry: true, Stall: true, Work: 5 * time.Millisecond, Writes: 4, Limit: 2},
		{Key: "rw", TTL: 200 * time.Millisecond, Wait: time.Second, Expiry: true, Stall: true, Work: 5 * time.Millisecond, Writes: 4, RW: true},
	} {
		s := quickSettings(t)
		rep := newReport("memory-store-kinds/"+cfg.Key, s)
		store := memstore.New()
		t.Cleanup(func() { store.Close() })
		nem := &nemesis{rep: rep, events: newEventLog(rep.started)}
		runFenced(t, s, rep, oneStore{store}, nem, fencedRun{cfg: cfg, holders: 5})
		t.Log(rep.line())
		assert.Empty(t, rep.violations, cfg.Key)
		assert.Empty(t, rep.problems, cfg.Key)

		rep = newReport("broken/loose-"+cfg.Key, s)
		loose := loosened{memstore.New()}
		t.Cleanup(func() { loose.Close() })
		nem = &nemesis{rep: rep, events: newEventLog(rep.started)}
		runFenced(t, s, rep, oneStore{loose}, nem, fencedRun{cfg: cfg, holders: 5})
		t.Log(rep.line())
		assert.NotEmpty(t, rep.violations, "%s: too many holders at once are a violation", cfg.Key)
	}
}

// The group model passes the memory store's semaphores and read/write
// locks, and catches a store that lets too many in.
func TestGroupLinearizabilityCheckerPassesACorrectStoreAndCatchesALooseOne(t *testing.T) {
	for _, kind := range []linKind{{limit: 2}, {rw: true}} {
		s := quickSettings(t)
		rep := newReport("memory-store-kinds", s)
		store := memstore.New()
		t.Cleanup(func() { store.Close() })
		nem := &nemesis{rep: rep, events: newEventLog(rep.started)}
		runLinearizableKind(t, s, rep, oneStore{store}, nem, 6, 2, kind)
		require.Greater(t, rep.ops, 100, "the workload ran")
		assert.Empty(t, rep.violations, "%+v", kind)
		assert.Empty(t, rep.problems, "%+v", kind)

		rep = newReport("broken/loose-kinds", s)
		loose := loosened{memstore.New()}
		t.Cleanup(func() { loose.Close() })
		nem = &nemesis{rep: rep, events: newEventLog(rep.started)}
		runLinearizableKind(t, s, rep, oneStore{loose}, nem, 6, 2, kind)
		assert.NotEmpty(t, rep.violations, "%+v: too many holders are not linearizable", kind)
	}
}

// The multi-key checker finds two holders of one key at once (even when
// their sets differ elsewhere), a token that did not grow on a key, and a
// partial grant a holder saw; sets that share no key may overlap.
func TestMultiKeyCheckerFindsViolations(t *testing.T) {
	w := func(client int, token uint64, start, end int64, keys ...string) window {
		return window{Client: client, Token: token, Start: start, End: end, Sent: start - 1, Keys: keys}
	}
	assert.Empty(t, checkMultiWindows([]window{w(1, 1, 10, 20, "a", "b"), w(2, 2, 12, 18, "c", "d"), w(3, 3, 21, 30, "a", "c")}), "disjoint sets overlap; shared keys take turns")
	assert.NotEmpty(t, checkMultiWindows([]window{w(1, 1, 10, 20, "a", "b"), w(2, 2, 15, 25, "b", "c")}), "b held twice at once")
	assert.NotEmpty(t, checkMultiWindows([]window{w(1, 5, 10, 20, "a", "b"), w(2, 4, 30, 40, "b")}), "b's token went down")
	partial := w(1, 1, 10, 20, "a", "b")
	partial.Partial = `"b" read as locked=false`
	assert.NotEmpty(t, checkMultiWindows([]window{partial}))
}

// Every checker passes an empty history, so a run whose clients completed
// nothing (here: a workload over before it began) must be a problem of the
// run, whichever workload it was; one that did its work is not.
func TestCheckersRefuseAnEmptyRun(t *testing.T) {
	empty := func(t *testing.T) settings {
		s := quickSettings(t)
		s.workload = time.Nanosecond
		return s
	}
	run := map[string]func(t *testing.T, s settings, rep *report, store lock.Store){
		"linearizable": func(t *testing.T, s settings, rep *report, store lock.Store) {
			runLinearizable(t, s, rep, oneStore{store}, &nemesis{rep: rep, events: newEventLog(rep.started)}, 4, 2)
		},
		"fenced": func(t *testing.T, s settings, rep *report, store lock.Store) {
			runFenced(t, s, rep, oneStore{store}, &nemesis{rep: rep, events: newEventLog(rep.started)}, fencedRun{
				cfg:     fencedConfig{Key: "fenced", TTL: time.Hour, Work: time.Millisecond, Writes: 2},
				holders: 2,
			})
		},
		"durable": func(_ *testing.T, s settings, rep *report, store lock.Store) {
			w := &durWorkload{rep: rep}
			c := &durClient{workClient: &workClient{owner: lock.NewOwner(), stores: oneStore{store}, rng: s.rng(1), unexpected: &errorLog{}},
				keys: []string{"a", "b"}, state: map[string]*durState{"a": {}, "b": {}}}
			ctx, cancel := context.WithTimeout(context.Background(), s.workload)
			defer cancel()
			for ctx.Err() == nil {
				w.step(c, context.Background())
			}
			w.summarize([]*durClient{c}, w.verify([]*durClient{c}, oneStore{store}, context.Background()), "at the end", &errorLog{})
		},
	}
	for name, run := range run {
		t.Run(name, func(t *testing.T) {
			s := empty(t)
			rep := newReport("empty/"+name, s)
			store := memstore.New()
			t.Cleanup(func() { store.Close() })
			run(t, s, rep, store)
			assert.Empty(t, rep.violations)
			if assert.NotEmpty(t, rep.problems, "a run with nothing to check is not evidence") {
				assert.Contains(t, rep.problems[0], "0 acquires granted")
			}

			s = quickSettings(t)
			s.workload = 300 * time.Millisecond
			rep = newReport("some/"+name, s)
			run(t, s, rep, store)
			require.Positive(t, rep.ops, "the workload ran")
			assert.Empty(t, rep.violations)
			assert.Empty(t, rep.problems, "a run that did its work")
		})
	}
}
