package election_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/election"
	"github.com/raftlock/raftlock/lock/memstore"
)

const patience = 10 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*patience)
	t.Cleanup(cancel)
	return ctx
}

func newStore(t *testing.T) *memstore.Store {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// replicaStore is one replica's view of the shared store: it counts the
// acquires of the election's key, and can be cut off from the store.
type replicaStore struct {
	lock.Store
	electionKey string
	acquires    atomic.Int32
	extends     atomic.Int32
	down        atomic.Bool
}

func (s *replicaStore) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if s.down.Load() {
		return lock.Lease{}, lock.ErrUnavailable
	}
	if req.Key == s.electionKey {
		s.acquires.Add(1)
	}
	return s.Store.Acquire(ctx, req)
}

func (s *replicaStore) Release(ctx context.Context, key string, owner lock.Owner) (bool, error) {
	if s.down.Load() {
		return false, lock.ErrUnavailable
	}
	return s.Store.Release(ctx, key, owner)
}

func (s *replicaStore) Extend(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error) {
	if s.down.Load() {
		return lock.Lease{}, lock.ErrUnavailable
	}
	if key == s.electionKey {
		s.extends.Add(1)
	}
	return s.Store.Extend(ctx, key, owner, ttl)
}

func (s *replicaStore) List(ctx context.Context, req lock.ListRequest) ([]lock.LockInfo, error) {
	return s.Store.(lock.Lister).List(ctx, req)
}

func replica(shared lock.Store, name string) *replicaStore {
	return &replicaStore{Store: shared, electionKey: "election:" + name}
}

type campaignResult struct {
	lead *election.Leadership
	err  error
}

func campaign(ctx context.Context, e *election.Election, value string) <-chan campaignResult {
	done := make(chan campaignResult, 1)
	go func() {
		lead, err := e.Campaign(ctx, value)
		done <- campaignResult{lead, err}
	}()
	return done
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		require.FailNow(t, "timed out waiting for "+what)
		panic("unreachable")
	}
}

func waitForCampaigners(t *testing.T, store lock.Store, e *election.Election, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := store.Inspect(context.Background(), e.Key())
		return err == nil && info.Waiters == n
	}, patience, time.Millisecond, "%d campaigners queue", n)
}

func ended(lead *election.Leadership) bool {
	select {
	case <-lead.Done():
		return true
	default:
		return false
	}
}

func TestCampaignObserveResign(t *testing.T) {
	ctx := testCtx(t)
	e := election.New(lock.New(newStore(t)), "scheduler")

	_, err := e.Leader(ctx)
	assert.ErrorIs(t, err, election.ErrNoLeader)

	lead, err := e.Campaign(ctx, "10.0.0.7:8080")
	require.NoError(t, err)
	assert.NotZero(t, lead.Term())
	assert.Equal(t, "10.0.0.7:8080", lead.Value())
	assert.False(t, ended(lead))

	got, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, lead.Term(), got.Term)
	assert.Equal(t, "10.0.0.7:8080", got.Value)
	assert.Positive(t, got.Remaining)

	require.NoError(t, lead.Resign(ctx))
	assert.True(t, ended(lead), "Done is closed once Resign returns")
	assert.ErrorIs(t, context.Cause(lead.Context()), election.ErrResigned)
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, election.ErrNoLeader)
	assert.NoError(t, lead.Resign(ctx), "resigning again is a no-op")
}

func TestResignHandsOverWithoutPolling(t *testing.T) {
	ctx := testCtx(t)
	shared := newStore(t)
	a := election.New(lock.New(shared), "scheduler")
	bStore := replica(shared, "scheduler")
	b := election.New(lock.New(bStore), "scheduler")

	leadA, err := a.Campaign(ctx, "a")
	require.NoError(t, err)
	bDone := campaign(ctx, b, "b")
	waitForCampaigners(t, shared, a, 1)
	select {
	case <-bDone:
		require.FailNow(t, "b was elected while a leads")
	default:
	}

	require.NoError(t, leadA.Resign(ctx))
	res := receive(t, bDone, "b to be elected")
	require.NoError(t, res.err)
	assert.Greater(t, res.lead.Term(), leadA.Term(), "a new term")
	assert.Equal(t, int32(1), bStore.acquires.Load(), "b queued once and was handed the key: no polling")

	got, err := a.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, election.Leader{Term: res.lead.Term(), Remaining: got.Remaining, Value: "b"}, got)
	require.NoError(t, res.lead.Resign(ctx))
}

func TestLostLeaseHandsOver(t *testing.T) {
	ctx := testCtx(t)
	shared := newStore(t)
	const ttl = 300 * time.Millisecond
	aStore := replica(shared, "scheduler")
	a := election.New(lock.New(aStore), "scheduler", election.TTL(ttl))
	b := election.New(lock.New(shared), "scheduler", election.TTL(ttl))

	leadA, err := a.Campaign(ctx, "a")
	require.NoError(t, err)
	bDone := campaign(ctx, b, "b")
	waitForCampaigners(t, shared, a, 1)

	aStore.down.Store(true) // a is cut off: its keep-alive cannot extend the lease
	receive(t, leadA.Done(), "a to learn that it lost the leadership")
	assert.ErrorIs(t, context.Cause(leadA.Context()), lock.ErrNotHeld)

	res := receive(t, bDone, "b to be elected once a's lease ran out")
	require.NoError(t, res.err)
	assert.Greater(t, res.lead.Term(), leadA.Term())
	got, err := b.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, res.lead.Term(), got.Term)
	assert.Equal(t, "b", got.Value)

	assert.NoError(t, leadA.Resign(ctx), "resigning a lost leadership is not an error")
	require.NoError(t, res.lead.Resign(ctx))
}

func TestCampaignCanceledWhileQueued(t *testing.T) {
	ctx := testCtx(t)
	store := newStore(t)
	e := election.New(lock.New(store), "scheduler")
	leadA, err := e.Campaign(ctx, "a")
	require.NoError(t, err)

	bCtx, cancelB := context.WithCancel(ctx)
	bDone := campaign(bCtx, e, "b")
	waitForCampaigners(t, store, e, 1)
	cancelB()
	res := receive(t, bDone, "the canceled campaign to return")
	assert.Nil(t, res.lead)
	assert.ErrorIs(t, res.err, context.Canceled)

	info, err := store.Inspect(ctx, e.Key())
	require.NoError(t, err)
	assert.Zero(t, info.Waiters, "the canceled campaigner left the queue")
	assert.Equal(t, leadA.Term(), info.Token, "a still leads")
	assert.False(t, ended(leadA))
	require.NoError(t, leadA.Resign(ctx))
}

func TestCampaignContextBoundsOnlyTheCampaign(t *testing.T) {
	ctx := testCtx(t)
	shared := newStore(t)
	s := replica(shared, "scheduler")
	e := election.New(lock.New(s), "scheduler", election.TTL(60*time.Millisecond))

	campaignCtx, cancel := context.WithCancel(ctx)
	lead, err := e.Campaign(campaignCtx, "")
	require.NoError(t, err)
	cancel()

	// Several keep-alive rounds later, the leadership is still there.
	require.Eventually(t, func() bool { return s.extends.Load() >= 5 }, patience, time.Millisecond)
	assert.False(t, ended(lead))
	got, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, lead.Term(), got.Term)
	assert.Empty(t, got.Value, "no value was published")
	require.NoError(t, lead.Resign(ctx))
}

// Many campaigners taking turns: never two leaders at once, and terms go up.
func TestOneLeaderAtATime(t *testing.T) {
	ctx := testCtx(t)
	store := newStore(t)
	const campaigners, rounds = 4, 5
	var leaders atomic.Int32
	var mu sync.Mutex
	var terms []uint64
	var wg sync.WaitGroup
	for i := range campaigners {
		wg.Go(func() {
			e := election.New(lock.New(store), "scheduler")
			for range rounds {
				lead, err := e.Campaign(ctx, string(rune('a'+i)))
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, int32(1), leaders.Add(1), "one leader at a time")
				mu.Lock()
				terms = append(terms, lead.Term())
				mu.Unlock()
				leaders.Add(-1)
				assert.NoError(t, lead.Resign(ctx))
			}
		})
	}
	wg.Wait()
	require.Len(t, terms, campaigners*rounds)
	for i := 1; i < len(terms); i++ {
		assert.Greater(t, terms[i], terms[i-1], "terms increase")
	}
}

// listlessStore hides the memory store's List.
type listlessStore struct{ lock.Store }

// The value rides with the election key's metadata: no listing needed.
func TestLeaderValueNeedsNoListingStore(t *testing.T) {
	ctx := testCtx(t)
	e := election.New(lock.New(listlessStore{newStore(t)}), "scheduler")
	lead, err := e.Campaign(ctx, "a")
	require.NoError(t, err)
	got, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, lead.Term(), got.Term)
	assert.Equal(t, "a", got.Value)
	require.NoError(t, lead.Resign(ctx))
}

// A leader that campaigned with an older version published its value only
// as a key: Leader and Observe still find it by listing.
func TestLeaderValueOfAnOlderLeaderIsListed(t *testing.T) {
	ctx := testCtx(t)
	c := lock.New(newStore(t))
	e := election.New(c, "scheduler")
	l := c.Lock(e.Key()) // no metadata, as an older Campaign
	require.NoError(t, l.Acquire(ctx))
	require.NoError(t, c.Lock("election-leader:"+strconv.FormatUint(l.Token(), 10)+":scheduler:10.0.0.9").Acquire(ctx))
	got, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.9", got.Value)
	for ld, err := range e.Observe(ctx) {
		require.NoError(t, err)
		assert.Equal(t, l.Token(), ld.Term)
		assert.Equal(t, "10.0.0.9", ld.Value)
		break
	}
}

// failingStore fails every call.
type failingStore struct{ lock.Store }

func (failingStore) Acquire(context.Context, lock.AcquireRequest) (lock.Lease, error) {
	return lock.Lease{}, lock.ErrUnavailable
}

func (failingStore) Inspect(context.Context, string) (lock.KeyInfo, error) {
	return lock.KeyInfo{}, lock.ErrUnavailable
}

func TestStoreErrors(t *testing.T) {
	ctx := testCtx(t)
	e := election.New(lock.New(failingStore{}), "scheduler")
	_, err := e.Campaign(ctx, "a")
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, lock.ErrUnavailable)
}

// publishFailingStore grants the election's key but fails the value's.
type publishFailingStore struct{ lock.Store }

func (s publishFailingStore) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if strings.HasPrefix(req.Key, "election-leader:") {
		return lock.Lease{}, lock.ErrUnavailable
	}
	return s.Store.Acquire(ctx, req)
}

func TestCampaignFailsWhenTheValueCannotBePublished(t *testing.T) {
	ctx := testCtx(t)
	store := newStore(t)
	e := election.New(lock.New(publishFailingStore{store}), "scheduler")
	lead, err := e.Campaign(ctx, "a")
	assert.Nil(t, lead)
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	locked, err := lock.New(store).Lock(e.Key()).IsLocked(ctx)
	require.NoError(t, err)
	assert.False(t, locked, "the leadership was given back")
}

func TestInvalidArguments(t *testing.T) {
	ctx := testCtx(t)
	c := lock.New(newStore(t))
	tests := []struct {
		name  string
		e     *election.Election
		value string
		want  []error
	}{
		{"nil client", election.New(nil, "x"), "", []error{election.ErrInvalid}},
		{"empty name", election.New(c, ""), "", []error{election.ErrInvalid}},
		{"ttl", election.New(c, "x", election.TTL(0)), "", []error{election.ErrInvalid, lock.ErrInvalidTTL}},
		{"name too long", election.New(c, strings.Repeat("x", lock.MaxKeyLen)), "", []error{election.ErrInvalid, lock.ErrInvalidKey}},
		{"value too long", election.New(c, "x"), strings.Repeat("v", lock.MaxKeyLen-30), []error{election.ErrInvalid, lock.ErrInvalidKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lead, err := tt.e.Campaign(ctx, tt.value)
			assert.Nil(t, lead)
			for _, want := range tt.want {
				assert.ErrorIs(t, err, want)
			}
			assert.True(t, strings.HasPrefix(err.Error(), "election: "), "message %q", err)
			if tt.value == "" {
				_, err = tt.e.Leader(ctx)
				assert.ErrorIs(t, err, election.ErrInvalid)
			}
		})
	}
}

// A name containing the separator cannot make one election read another's
// value: the term, unique across keys, comes first.
func TestValuesDoNotLeakAcrossElections(t *testing.T) {
	ctx := testCtx(t)
	c := lock.New(newStore(t))
	short := election.New(c, "a")
	long := election.New(c, "a:1")
	// With the name first ("<name>:<term>:<value>"), a's first term (1) would
	// read "a:1:" + "<a:1's term>:long" as its value.
	leadShort, err := short.Campaign(ctx, "short")
	require.NoError(t, err)
	require.Equal(t, uint64(1), leadShort.Term())
	leadLong, err := long.Campaign(ctx, "long")
	require.NoError(t, err)
	for _, tt := range []struct {
		e    *election.Election
		want string
	}{{short, "short"}, {long, "long"}} {
		got, err := tt.e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, tt.want, got.Value, "election %q", tt.e.Name())
	}
	require.NoError(t, errors.Join(leadLong.Resign(ctx), leadShort.Resign(ctx)))
}
