package apiserver

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// httpOnly keeps a client on the HTTP routes: the tests that use it check
// how the routes fail over when connections fail (stale pooled ones, hang
// ups); the stream's failures are stream_test.go's.
var httpOnly = api.ClientConfig{NoStream: true}

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
	c, err := api.NewFailoverClient([]string{down, n.url}, api.ClientConfig{})
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
	c, err := api.NewFailoverClient([]string{a.url, b.url}, api.ClientConfig{})
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

// TestFailoverResendsOnlySafeWritesThatWentOut: the first node took the
// request on a new connection and hung up without an answer. A release or
// an extend is safe to repeat and goes to the next node. An acquire is not
// sent elsewhere behind the caller's back: a node still at work on it would
// give back, seeing the caller gone, a grant the next node reported; the
// caller retries it with the same owner.
func TestFailoverResendsOnlySafeWritesThatWentOut(t *testing.T) {
	flaky, hits := hangUpServer(t)
	n := newTestNode(t, Config{})
	c, err := api.NewFailoverClient([]string{flaky, n.url}, httpOnly)
	require.NoError(t, err)
	ctx := context.Background()

	owner := lock.NewOwner()
	_, err = c.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute})
	assert.ErrorIs(t, err, lock.ErrUnknownOutcome)
	assert.Equal(t, int32(1), hits.Load())
	info, err := n.store.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, info.Locked, "the second node never saw the acquire")
	assert.Equal(t, flaky, c.Endpoint(), "nothing answered yet")

	lease, err := n.store.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute})
	require.NoError(t, err)
	c2, err := api.NewFailoverClient([]string{flaky, n.url}, httpOnly)
	require.NoError(t, err)
	extended, err := c2.Extend(ctx, "k", owner, 2*time.Minute)
	require.NoError(t, err, "the extend moves on to the node that answers")
	assert.Equal(t, lease.Token, extended.Token)
	assert.Equal(t, int32(2), hits.Load(), "the first node was tried once")
	assert.Equal(t, n.url, c2.Endpoint())

	c3, err := api.NewFailoverClient([]string{flaky, n.url}, httpOnly)
	require.NoError(t, err)
	released, err := c3.Release(ctx, "k", owner)
	require.NoError(t, err, "the release moves on to the node that answers")
	assert.True(t, released)
	assert.Equal(t, int32(3), hits.Load(), "the first node was tried once")

	_, err = c.Inspect(ctx, "k")
	require.NoError(t, err, "a read is safe to send again, to the next node")
	assert.Equal(t, int32(4), hits.Load())
	assert.Equal(t, n.url, c.Endpoint())
	_, err = c.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, int32(4), hits.Load(), "the node that answered is asked first from then on")
}

// killableNode is a node whose server can die with connections still open:
// after kill, it accepts no new connection, and it hangs up without a word
// on every request that reaches it over a connection the client kept alive
// (a stale pooled connection, as a node that crashed leaves behind before
// the client's kernel learns of it).
type killableNode struct {
	url   string
	dead  atomic.Bool
	hits  atomic.Int32 // requests received after kill
	conns atomic.Int32 // connections accepted
	srv   *httptest.Server
}

func newKillableNode(t *testing.T, store lock.Store) *killableNode {
	k := &killableNode{}
	h := NewHandler(store, Config{})
	k.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k.dead.Load() {
			k.hits.Add(1)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	k.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			k.conns.Add(1)
		}
	}
	k.srv.Start()
	t.Cleanup(k.srv.Close)
	k.url = k.srv.URL
	return k
}

func (k *killableNode) kill(t *testing.T) {
	k.dead.Store(true)
	require.NoError(t, k.srv.Listener.Close()) // new connections are refused
}

// TestFailoverMovesOnFromStalePooledConnections: the node in use dies with
// kept-alive connections in the client's pool. Release, extend, a
// same-owner acquire and the reads each go on to the next node and do not
// report an unknown outcome. Go's transport may try each stale connection
// once before it dials (and is refused); it never sends twice on one.
func TestFailoverMovesOnFromStalePooledConnections(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	for _, op := range []string{"release", "extend", "acquire again", "inspect", "list"} {
		t.Run(op, func(t *testing.T) {
			dying := newKillableNode(t, store)
			alive := newTestNodeOver(t, store, Config{}, nil)
			c, err := api.NewFailoverClient([]string{dying.url, alive.url}, httpOnly)
			require.NoError(t, err)
			ctx := context.Background()
			key := "k/" + op
			owner := lock.NewOwner()
			lease, err := c.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute})
			require.NoError(t, err)
			// Several connections in the pool, all to the node about to die.
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					_, err := c.Inspect(ctx, key)
					assert.NoError(t, err)
				})
			}
			wg.Wait()
			require.Equal(t, dying.url, c.Endpoint())

			dying.kill(t)
			switch op {
			case "release":
				released, err := c.Release(ctx, key, owner)
				require.NoError(t, err)
				assert.True(t, released)
				info, err := store.Inspect(ctx, key)
				require.NoError(t, err)
				assert.False(t, info.Locked, "released through the live node")
			case "extend":
				extended, err := c.Extend(ctx, key, owner, 2*time.Minute)
				require.NoError(t, err)
				assert.Equal(t, lease.Token, extended.Token)
				assert.Greater(t, extended.Remaining, time.Minute)
			case "acquire again":
				again, err := c.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute})
				require.NoError(t, err)
				assert.Equal(t, lease.Token, again.Token, "the same grant")
			case "inspect":
				info, err := c.Inspect(ctx, key)
				require.NoError(t, err)
				assert.Equal(t, lease.Token, info.Token)
			case "list":
				list, err := c.List(ctx, lock.ListRequest{Prefix: key})
				require.NoError(t, err)
				require.Len(t, list, 1)
				assert.Equal(t, lease.Token, list[0].Token)
			}
			assert.Equal(t, alive.url, c.Endpoint(), "the live node answered")
			hits := dying.hits.Load()
			assert.LessOrEqual(t, hits, dying.conns.Load(), "at most once per stale connection")

			// From then on, the live node is asked first.
			_, err = c.Inspect(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, hits, dying.hits.Load(), "the dead node is not asked again")
		})
	}
}

// TestClientResendsOnAClosedKeptAliveConnection: a single node closed the
// kept-alive connection the client picks (as after its idle timeout, or a
// restart). The Idempotency-Key header lets Go's transport send the write
// again on a fresh connection to the same node instead of reporting an
// unknown outcome, though there is no other endpoint to move to.
func TestClientResendsOnAClosedKeptAliveConnection(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	h := NewHandler(store, Config{})
	var hangUpNext atomic.Bool
	var hungUp atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hangUpNext.CompareAndSwap(true, false) {
			hungUp.Add(1)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := api.NewClient(srv.URL, httpOnly)
	require.NoError(t, err)
	ctx := context.Background()
	owner := lock.NewOwner()
	_, err = c.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute})
	require.NoError(t, err) // leaves a kept-alive connection in the pool

	hangUpNext.Store(true)
	released, err := c.Release(ctx, "k", owner)
	require.NoError(t, err, "sent again on a new connection")
	assert.True(t, released)
	assert.Equal(t, int32(1), hungUp.Load(), "the kept-alive connection was tried first")
}

func TestFailoverAllDown(t *testing.T) {
	one, two := "http://"+unusedAddr(t), "http://"+unusedAddr(t)
	c, err := api.NewFailoverClient([]string{one, two}, api.ClientConfig{})
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
		_, err := api.NewFailoverClient(endpoints, api.ClientConfig{})
		assert.Error(t, err, name)
	}
	c, err := api.NewFailoverClient([]string{"http://127.0.0.1:1", "https://127.0.0.1:2/raftlock"}, api.ClientConfig{})
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:1", c.Endpoint())
}

// A client given one node learns the others from /v1/cluster, and fails
// over to them when the node it was given goes away.
func TestSyncDiscoversTheOtherNodes(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	fc := &fakeCluster{}
	a := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	b := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	fc.set(api.ClusterStatus{NodeID: "a", Members: []api.Member{
		{ID: "a", APIAddr: a.url},
		{ID: "b", APIAddr: b.url},
		{ID: "c"},                     // serves no API: skipped
		{ID: "d", APIAddr: "ftp://x"}, // a bad address does not spoil the rest
	}})

	c, err := api.NewClient(a.url, api.ClientConfig{})
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
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	fc := &fakeCluster{}
	a := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	b := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	fc.set(api.ClusterStatus{NodeID: "a", Members: []api.Member{{ID: "a", APIAddr: a.url}, {ID: "b", APIAddr: b.url}}})

	c, err := api.NewClient(a.url, api.ClientConfig{SyncInterval: time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, err := c.Inspect(ctx, "k")
		require.NoError(t, err)
		return len(c.Endpoints()) == 2
	}, 10*time.Second, time.Millisecond)
	assert.Equal(t, []string{a.url, b.url}, c.Endpoints())

	_, err = api.NewClient(a.url, api.ClientConfig{SyncInterval: -time.Second})
	assert.ErrorContains(t, err, "SyncInterval is negative")
}

// TestFailoverReleaseDoneByTheFailedAttempt: the first node released the
// key and reset the connection before answering; the client sends the
// release on to the next node, which answers released: the store
// remembers that this owner's release ended the lease. Had the lease ended
// otherwise before (run out, force-released), the resent release is told
// not held.
func TestFailoverReleaseDoneByTheFailedAttempt(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	h := NewHandler(store, Config{})
	var hits atomic.Int32
	actsThenDies := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h.ServeHTTP(httptest.NewRecorder(), r) // does the work, loses the answer
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(actsThenDies.Close)
	alive := newTestNodeOver(t, store, Config{}, nil)
	ctx := context.Background()
	c, err := api.NewFailoverClient([]string{actsThenDies.URL, alive.url}, httpOnly)
	require.NoError(t, err)

	owner := lock.NewOwner()
	_, err = store.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute})
	require.NoError(t, err)
	released, err := c.Release(ctx, "k", owner)
	require.NoError(t, err, "the resend's answer is known")
	assert.True(t, released, "the failed attempt released it, and the next node says so")
	assert.Equal(t, int32(1), hits.Load())
	info, err := store.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, info.Locked, "released, by the first attempt")

	// Force-released before the release: the failed attempt ended nothing.
	owner = lock.NewOwner()
	_, err = store.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Minute})
	require.NoError(t, err)
	_, err = store.ForceRelease(ctx, "k")
	require.NoError(t, err)
	c, err = api.NewFailoverClient([]string{actsThenDies.URL, alive.url}, httpOnly)
	require.NoError(t, err)
	released, err = c.Release(ctx, "k", owner)
	require.NoError(t, err)
	assert.False(t, released, "the lease had ended otherwise")
	assert.Equal(t, int32(2), hits.Load(), "sent to the node that fails first, then on")
}

// Close makes every later call fail with lock.ErrClosed without reaching the
// node. (That it stops a background Sync is api's TestCloseStopsBackgroundSync.)
func TestCloseStopsTheClient(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	fc := &fakeCluster{}
	a := newTestNodeOver(t, store, Config{Cluster: fc}, nil)
	fc.set(api.ClusterStatus{NodeID: "a", Members: []api.Member{{ID: "a", APIAddr: a.url}}})

	c, err := api.NewClient(a.url, api.ClientConfig{SyncInterval: time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.Inspect(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "a second Close is harmless")

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
