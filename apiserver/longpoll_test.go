package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

const patience = 10 * time.Second // bound on every wait for a condition

func waitersOf(t *testing.T, store lock.Store, key string) int {
	t.Helper()
	info, err := store.Inspect(context.Background(), key)
	require.NoError(t, err)
	return info.Waiters
}

// TestLongPollWokenByRelease: an acquire that waits on the server is handed
// the lock by a release sent in another request.
func TestLongPollWokenByRelease(t *testing.T) {
	n := newTestNode(t, Config{})
	holder := n.do(t, "POST", "/v1/acquire", `{"key":"k","ttl":"1m"}`)
	require.Equal(t, http.StatusOK, holder.status)

	woken := make(chan answer, 1)
	failed := make(chan error, 1)
	go func() {
		a, err := n.send(context.Background(), "POST", "/v1/acquire", `{"key":"k","ttl":"1m","wait":"30s"}`)
		if err != nil {
			failed <- err
			return
		}
		woken <- a
	}()
	require.Eventually(t, func() bool { return waitersOf(t, n.store, "k") == 1 }, patience, time.Millisecond,
		"the second acquire queues on the server")
	assert.Equal(t, 1.0, gaugeValue(t, n, "raftlock_api_waiting_requests"))

	rel := n.do(t, "POST", "/v1/release", fmt.Sprintf(`{"key":"k","owner":%q}`, holder.body["owner"]))
	require.Equal(t, http.StatusOK, rel.status, rel.raw)

	select {
	case a := <-woken:
		require.Equal(t, http.StatusOK, a.status, a.raw)
		assert.Greater(t, a.body["token"], holder.body["token"], "the hand-off is a new grant")
		assert.NotEqual(t, holder.body["owner"], a.body["owner"])
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(patience):
		t.Fatal("the waiting acquire was not woken by the release")
	}
	info, err := n.store.Inspect(context.Background(), "k")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Zero(t, info.Waiters)
	assert.Equal(t, 0.0, gaugeValue(t, n, "raftlock_api_waiting_requests"))
}

// TestDisconnectedLongPollLeavesQueue: a client that hangs up while it waits
// is taken out of the queue, so the lock is never handed to nobody.
func TestDisconnectedLongPollLeavesQueue(t *testing.T) {
	n := newTestNode(t, Config{})
	holder := n.do(t, "POST", "/v1/acquire", `{"key":"k","ttl":"1m"}`)
	require.Equal(t, http.StatusOK, holder.status)

	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	ended := make(chan error, 1)
	go func() {
		_, err := n.send(ctx, "POST", "/v1/acquire", `{"key":"k","ttl":"1m","wait":"1h"}`)
		ended <- err
	}()
	require.Eventually(t, func() bool { return waitersOf(t, n.store, "k") == 1 }, patience, time.Millisecond)

	hangUp()
	select {
	case err := <-ended:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(patience):
		t.Fatal("the request did not end with its context")
	}
	require.Eventually(t, func() bool { return waitersOf(t, n.store, "k") == 0 }, patience, time.Millisecond,
		"the server notices the hang-up and leaves the queue")
	require.Eventually(t, func() bool { return gaugeValue(t, n, "raftlock_api_waiting_requests") == 0 }, patience, time.Millisecond)

	rel := n.do(t, "POST", "/v1/release", fmt.Sprintf(`{"key":"k","owner":%q}`, holder.body["owner"]))
	require.Equal(t, http.StatusOK, rel.status)
	info, err := n.store.Inspect(context.Background(), "k")
	require.NoError(t, err)
	assert.False(t, info.Locked, "nobody was handed the lock")
}

// TestReleaseGivesUpWait: a release by the owner of a waiting acquire takes
// it out of the queue before it answers, and the acquire answers canceled.
func TestReleaseGivesUpWait(t *testing.T) {
	n := newTestNode(t, Config{})
	holder := n.do(t, "POST", "/v1/acquire", `{"key":"k","ttl":"1m"}`)
	require.Equal(t, http.StatusOK, holder.status)
	owner := lock.NewOwner().String()

	ended := make(chan answer, 1)
	failed := make(chan error, 1)
	go func() {
		a, err := n.send(context.Background(), "POST", "/v1/acquire", fmt.Sprintf(`{"key":"k","ttl":"1m","wait":"1h","owner":%q}`, owner))
		if err != nil {
			failed <- err
			return
		}
		ended <- a
	}()
	require.Eventually(t, func() bool { return waitersOf(t, n.store, "k") == 1 }, patience, time.Millisecond)

	rel := n.do(t, "POST", "/v1/release", fmt.Sprintf(`{"key":"k","owner":%q}`, owner))
	assert.Equal(t, api.CodeNotHeld, rel.errorCode(), "the owner held nothing")
	assert.Zero(t, waitersOf(t, n.store, "k"), "the wait is over by the time the release answers")

	select {
	case a := <-ended:
		assert.Equal(t, http.StatusConflict, a.status, a.raw)
		assert.Equal(t, api.CodeCanceled, a.errorCode())
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(patience):
		t.Fatal("the given-up acquire did not answer")
	}
	info, err := n.store.Inspect(context.Background(), "k")
	require.NoError(t, err)
	assert.Equal(t, holder.body["token"], float64(info.Token), "the holder keeps the key")
}

// TestGrantToVanishedClientIsReleased: when the store grants the lock just as
// the client hangs up, the handler releases it rather than leave it held
// until its TTL by an owner nobody knows.
func TestGrantToVanishedClientIsReleased(t *testing.T) {
	store := &grantOnCancelStore{entered: make(chan lock.Owner, 1), released: make(chan lock.Owner, 1)}
	n := newTestNodeOver(t, store, Config{}, nil)
	owner := lock.NewOwner()

	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	go func() {
		_, _ = n.send(ctx, "POST", "/v1/acquire", fmt.Sprintf(`{"key":"k","ttl":"1m","wait":"1m","owner":%q}`, owner))
	}()
	select {
	case got := <-store.entered:
		require.Equal(t, owner, got)
	case <-time.After(patience):
		t.Fatal("the acquire did not reach the store")
	}
	hangUp()
	select {
	case got := <-store.released:
		assert.Equal(t, owner, got, "the handler released the abandoned grant")
	case <-time.After(patience):
		t.Fatal("the abandoned grant was not released")
	}
}

// grantOnCancelStore grants every acquire at the moment its context ends: the
// race between a hand-off and a hang-up, made certain.
type grantOnCancelStore struct {
	failingStore
	entered  chan lock.Owner
	released chan lock.Owner
}

func (s *grantOnCancelStore) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	s.entered <- req.Owner
	<-ctx.Done()
	return lock.Lease{Token: 1, Remaining: req.TTL}, nil
}

func (s *grantOnCancelStore) Release(_ context.Context, _ string, owner lock.Owner) (bool, error) {
	s.released <- owner
	return true, nil
}

// TestClientCancelLeavesQueue: the Go client's context ends a long-poll with
// an error matching the context's, and only once the node has left the queue
// (the client's clean-up release waits for that).
func TestClientCancelLeavesQueue(t *testing.T) {
	n := newTestNode(t, Config{})
	holder := lock.NewOwner()
	_, err := n.client.Acquire(context.Background(), lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan error, 1)
	go func() {
		_, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Hour})
		ended <- err
	}()
	require.Eventually(t, func() bool { return waitersOf(t, n.store, "k") == 1 }, patience, time.Millisecond)
	cancel()
	select {
	case err := <-ended:
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, lock.ErrUnknownOutcome, "the client's clean-up release answered, so the outcome is known")
	case <-time.After(patience):
		t.Fatal("the acquire did not end with its context")
	}
	assert.Zero(t, waitersOf(t, n.store, "k"), "out of the queue by the time Acquire returns, as lock.Store promises")
}

// TestLongPollOutlivesServerTimeouts: the server NewServer builds does not
// cut an acquire that waits longer than its read timeout.
func TestLongPollOutlivesServerTimeouts(t *testing.T) {
	store := memstore.New()
	srv := NewServer("", NewHandler(store, Config{}))
	srv.ReadTimeout = 50 * time.Millisecond // far shorter than the wait below
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = store.Close()
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	})
	c, err := api.NewClient(ln.Addr().String(), api.ClientConfig{})
	require.NoError(t, err)

	_, err = c.Acquire(context.Background(), lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Acquire(context.Background(), lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: 300 * time.Millisecond})
	var held *lock.HeldError
	require.ErrorAs(t, err, &held, "the wait ran out and the server said so")
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
}

// TestConcurrentWaitersServedInOrder: several long-polls on one key are all
// served, one after the other, each by the previous holder's release.
func TestConcurrentWaitersServedInOrder(t *testing.T) {
	n := newTestNode(t, Config{})
	const waiters = 8
	var wg sync.WaitGroup
	tokens := make(chan uint64, waiters+1)
	errs := make(chan error, waiters+1)
	for i := 0; i < waiters+1; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := lock.NewOwner()
			lease, err := n.client.Acquire(context.Background(), lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute, Wait: time.Minute})
			if err != nil {
				errs <- err
				return
			}
			tokens <- lease.Token
			if ok, err := n.client.Release(context.Background(), "k", owner); !ok || err != nil {
				errs <- fmt.Errorf("release: %v %w", ok, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	close(tokens)
	for err := range errs {
		require.NoError(t, err)
	}
	seen := map[uint64]bool{}
	for tok := range tokens {
		seen[tok] = true
	}
	assert.Len(t, seen, waiters+1, "every caller got its own grant")
}

var errNoMetric = errors.New("metric not found")
