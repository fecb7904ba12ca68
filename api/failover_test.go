package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// twoNodes serves one memory store through two handlers, as two nodes of a
// cluster serve one lock state.
func twoNodes(t *testing.T) (a, b *testNode) {
	a = newTestNode(t, Config{})
	b = newTestNodeOver(t, a.store, Config{}, nil)
	return a, b
}

// hangUpServer reads each request and closes the connection without a word,
// counting the requests: a node that fails after a request went out.
func hangUpServer(t *testing.T) (url string, hits *atomic.Int32) {
	hits = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, hits
}

func TestFailoverSkipsUnreachableEndpoints(t *testing.T) {
	n := newTestNode(t, Config{})
	down := "http://" + unusedAddr(t)
	c, err := NewFailoverClient([]string{down, n.url}, ClientConfig{})
	require.NoError(t, err)
	assert.Equal(t, down, c.Endpoint(), "starts with the first")
	ctx := context.Background()

	owner := lock.NewOwner()
	lease, err := c.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute})
	require.NoError(t, err, "an acquire that could not be sent to the first goes to the second")
	assert.Equal(t, n.url, c.Endpoint(), "the endpoint that answered is remembered")
	info, err := n.store.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, lease.Token, info.Token)

	ran, err := lock.New(c).Lock("job").Run(ctx, func(context.Context) error { return nil })
	require.NoError(t, err)
	assert.True(t, ran, "package lock runs over a failover client")
	released, err := c.Release(ctx, "k", owner)
	require.NoError(t, err)
	assert.True(t, released)
	h, err := c.Health(ctx)
	require.NoError(t, err)
	assert.True(t, h.Ready)
}

func TestFailoverWhenTheNodeInUseGoesAway(t *testing.T) {
	a, b := twoNodes(t)
	c, err := NewFailoverClient([]string{a.url, b.url}, ClientConfig{})
	require.NoError(t, err)
	ctx := context.Background()
	owner := lock.NewOwner()
	lease, err := c.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, a.url, c.Endpoint())

	a.server.Close()
	info, err := c.Inspect(ctx, "k")
	require.NoError(t, err, "a read moves to the next node")
	assert.Equal(t, lease.Token, info.Token)
	assert.Equal(t, b.url, c.Endpoint())
	extended, err := c.Extend(ctx, "k", owner, 2*time.Minute)
	require.NoError(t, err, "the owner keeps its lease through another node")
	assert.Equal(t, lease.Token, extended.Token)
	released, err := c.Release(ctx, "k", owner)
	require.NoError(t, err)
	assert.True(t, released)
}

// TestFailoverNeverResendsAWriteThatWentOut: the first node took the request
// and failed; the acquire may have been done, so it is not sent elsewhere
// behind the caller's back: the caller retries it with the same owner.
func TestFailoverNeverResendsAWriteThatWentOut(t *testing.T) {
	flaky, hits := hangUpServer(t)
	n := newTestNode(t, Config{})
	c, err := NewFailoverClient([]string{flaky, n.url}, ClientConfig{})
	require.NoError(t, err)
	ctx := context.Background()

	_, err = c.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute})
	assert.ErrorIs(t, err, lock.ErrUnknownOutcome)
	assert.Equal(t, int32(1), hits.Load())
	info, err := n.store.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, info.Locked, "the second node never saw the acquire")
	assert.Equal(t, flaky, c.Endpoint(), "nothing answered yet")

	_, err = c.Inspect(ctx, "k")
	require.NoError(t, err, "a read is safe to send again, to the next node")
	assert.Equal(t, int32(2), hits.Load())
	assert.Equal(t, n.url, c.Endpoint())
	_, err = c.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, int32(2), hits.Load(), "the node that answered is asked first from then on")
}

func TestFailoverAllDown(t *testing.T) {
	one, two := "http://"+unusedAddr(t), "http://"+unusedAddr(t)
	c, err := NewFailoverClient([]string{one, two}, ClientConfig{})
	require.NoError(t, err)
	_, err = c.Acquire(context.Background(), lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute})
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.NotErrorIs(t, err, lock.ErrUnknownOutcome, "sent nowhere")
	assert.ErrorContains(t, err, "none of 2 endpoints answered")
	assert.ErrorContains(t, err, one)
	assert.ErrorContains(t, err, two)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Inspect(ctx, "k")
	assert.ErrorIs(t, err, context.Canceled, "a done context ends the round, not the next endpoint")
}

func TestNewFailoverClientChecksEndpoints(t *testing.T) {
	for name, endpoints := range map[string][]string{
		"none":      nil,
		"twice":     {"http://127.0.0.1:1", "127.0.0.1:1"},
		"one bad":   {"http://127.0.0.1:1", "ftp://127.0.0.1:2"},
		"one empty": {"http://127.0.0.1:1", ""},
	} {
		_, err := NewFailoverClient(endpoints, ClientConfig{})
		assert.Error(t, err, name)
	}
	c, err := NewFailoverClient([]string{"http://127.0.0.1:1", "https://127.0.0.1:2/raftlock"}, ClientConfig{})
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:1", c.Endpoint())
}

// A client given one node learns the others from /v1/cluster, and fails
// over to them when the node it was given goes away.
func TestSyncDiscoversTheOtherNodes(t *testing.T) {
	store := lock.NewMemoryStore()
	t.Cleanup(func() { _ = store.Close() })
	fc := &fakeCluster{}
	a := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	b := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	fc.set(ClusterStatus{NodeID: "a", Members: []Member{
		{ID: "a", APIAddr: a.url},
		{ID: "b", APIAddr: b.url},
		{ID: "c"},                     // serves no API: skipped
		{ID: "d", APIAddr: "ftp://x"}, // a bad address does not spoil the rest
	}})

	c, err := NewClient(a.url, ClientConfig{})
	require.NoError(t, err)
	require.NoError(t, c.Sync(context.Background()))
	assert.Equal(t, []string{a.url, b.url}, c.Endpoints())
	require.NoError(t, c.Sync(context.Background()))
	assert.Equal(t, []string{a.url, b.url}, c.Endpoints(), "nothing twice")

	a.server.Close()
	_, err = c.Inspect(context.Background(), "k")
	require.NoError(t, err, "sent to the discovered node")
	assert.Equal(t, b.url, c.Endpoint())
}

// With SyncInterval, requests trigger discovery in the background.
func TestSyncIntervalDiscoversInTheBackground(t *testing.T) {
	store := lock.NewMemoryStore()
	t.Cleanup(func() { _ = store.Close() })
	fc := &fakeCluster{}
	a := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	b := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	fc.set(ClusterStatus{NodeID: "a", Members: []Member{{ID: "a", APIAddr: a.url}, {ID: "b", APIAddr: b.url}}})

	c, err := NewClient(a.url, ClientConfig{SyncInterval: time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, err := c.Inspect(ctx, "k")
		require.NoError(t, err)
		return len(c.Endpoints()) == 2
	}, 10*time.Second, time.Millisecond)
	assert.Equal(t, []string{a.url, b.url}, c.Endpoints())

	_, err = NewClient(a.url, ClientConfig{SyncInterval: -time.Second})
	assert.ErrorContains(t, err, "SyncInterval is negative")
}

// Close stops a background Sync and makes every later call fail with
// lock.ErrClosed without reaching the node.
func TestCloseStopsTheClient(t *testing.T) {
	store := lock.NewMemoryStore()
	t.Cleanup(func() { _ = store.Close() })
	fc := &fakeCluster{}
	a := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	fc.set(ClusterStatus{NodeID: "a", Members: []Member{{ID: "a", APIAddr: a.url}}})

	c, err := NewClient(a.url, ClientConfig{SyncInterval: time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.Inspect(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "a second Close is harmless")
	if assert.True(t, c.syncMu.TryLock(), "no background Sync runs after Close") {
		c.syncMu.Unlock()
	}

	owner := lock.NewOwner()
	_, err = c.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute})
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = c.Release(ctx, "k", owner)
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = c.Inspect(ctx, "k")
	assert.ErrorIs(t, err, lock.ErrClosed)
	_, err = c.Cluster(ctx)
	assert.ErrorIs(t, err, lock.ErrClosed)
	assert.ErrorIs(t, c.Leave(ctx), lock.ErrClosed)
	assert.ErrorIs(t, c.Sync(ctx), lock.ErrClosed)

	info, err := store.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, info.Locked, "the acquire after Close never reached the node")
}
