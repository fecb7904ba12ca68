package apiserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/streamwire"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

func (h *Handler) openStreams() int {
	h.streams.mu.Lock()
	defer h.streams.mu.Unlock()
	return len(h.streams.all)
}

// routeCounter counts the requests a handler gets, by path.
type routeCounter struct {
	next http.Handler
	mu   sync.Mutex
	n    map[string]int
}

func (rc *routeCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.n[r.URL.Path]++
	rc.mu.Unlock()
	rc.next.ServeHTTP(w, r)
}

func (rc *routeCounter) lockRequests() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.n["/v1/acquire"] + rc.n["/v1/release"] + rc.n["/v1/extend"] + rc.n["/v1/batch"]
}

// streamNode is a handler over a memory store, served through a
// routeCounter, and a client of it whose stream is up.
type streamNode struct {
	h      *Handler
	store  *memstore.Store
	routes *routeCounter
	url    string
	client *api.Client
}

func newStreamNode(t *testing.T, cfg Config, token string) *streamNode {
	t.Helper()
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	n := &streamNode{h: NewHandler(store, cfg), store: store}
	n.routes = &routeCounter{next: n.h, n: map[string]int{}}
	srv := httptest.NewServer(n.routes)
	t.Cleanup(func() {
		srv.Close()
		_ = n.h.CloseStreams(canceledContext())
	})
	n.url = srv.URL
	n.client = n.newClient(t, token)
	return n
}

func canceledContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// newClient returns a client of the node once its stream is up.
func (n *streamNode) newClient(t *testing.T, token string) *api.Client {
	t.Helper()
	c, err := api.NewClient(n.url, api.ClientConfig{Token: token})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	streamCarries(t, c, n.routes)
	return c
}

// streamCarries returns once c's operations go on its stream to the node
// served through routes. The first operation goes over HTTP and opens the
// stream in the background; the node counts the stream as soon as it has
// written the upgrade's answer, before the client has read it, and until
// the client has, its operations still take the HTTP routes. So it sends
// extends of a key nobody holds (whatever their answer) until one takes
// no route. An extend rather than a release: a test's store may hold the
// first release.
func streamCarries(t *testing.T, c *api.Client, routes *routeCounter) {
	t.Helper()
	require.Eventually(t, func() bool {
		before := routes.lockRequests()
		_, _ = c.Extend(context.Background(), "app/warm-up", lock.NewOwner(), time.Minute)
		return routes.lockRequests() == before
	}, patience, time.Millisecond, "the client's operations go on its stream")
}

// TestStreamCarriesLockOperations: once a client's stream is up, its
// acquires (waiting ones too), extends and releases go on it, not on the
// HTTP routes, and mean what they mean there: a queued acquire is handed
// the lock by the release, with a greater token.
func TestStreamCarriesLockOperations(t *testing.T) {
	n := newStreamNode(t, Config{}, "")
	ctx := context.Background()
	before := n.routes.lockRequests()
	locks := lock.New(n.client)

	extended := locks.Lock("jobs/extended", lock.TTL(time.Minute))
	require.NoError(t, extended.Acquire(ctx))
	require.NoError(t, extended.Extend(ctx, lock.TTL(2*time.Minute)))
	_, second := handOff(t, locks, n.store, "jobs/nightly")
	released, err := second.Release(ctx)
	require.NoError(t, err)
	assert.True(t, released)

	_, err = n.client.Extend(ctx, "jobs/nightly", lock.NewOwner(), time.Minute)
	assert.ErrorIs(t, err, lock.ErrNotHeld, "an error answer reads as on the route")
	assert.Equal(t, before, n.routes.lockRequests(), "no lock operation took an HTTP route")
	assert.Equal(t, 1, n.h.openStreams())
}

// TestStreamManyCallersAtOnce: operations of many goroutines in flight
// together on one stream each get their own answer.
func TestStreamManyCallersAtOnce(t *testing.T) {
	n := newStreamNode(t, Config{}, "")
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			key := fmt.Sprintf("k/%d", i)
			for range 20 {
				o := lock.NewOwner()
				lease, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: o, TTL: time.Minute})
				if !assert.NoError(t, err) {
					return
				}
				assert.Positive(t, lease.Token)
				released, err := n.client.Release(ctx, key, o)
				assert.NoError(t, err)
				assert.True(t, released)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 1, n.h.openStreams())
}

// TestStreamCancelWithdrawsTheWaiter: a waiting acquire whose context ends
// leaves the queue at once (the client sends a cancel on the stream), so
// the holder's release leaves the key free rather than granted to nobody.
func TestStreamCancelWithdrawsTheWaiter(t *testing.T) {
	n := newStreamNode(t, Config{}, "")
	ctx := context.Background()
	holder := lock.NewOwner()
	_, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)

	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := n.client.Acquire(waitCtx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
		done <- err
	}()
	require.Eventually(t, func() bool { return waitersOf(t, n.store, "k") == 1 }, patience, time.Millisecond)
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(patience):
		t.Fatal("the canceled acquire did not return")
	}
	require.Eventually(t, func() bool { return waitersOf(t, n.store, "k") == 0 }, patience, time.Millisecond, "the waiter is withdrawn")
	released, err := n.client.Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, released)
	info, err := n.client.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, info.Locked, "nobody was granted the key")
}

// TestStreamRightsFollowTheTokens: a stream's operations are checked
// against its token's rules as they are now: tokens reloaded while the
// stream is open apply to its next operation, and a token no longer known
// ends the stream (its operations then take the HTTP routes, and are
// refused there too).
func TestStreamRightsFollowTheTokens(t *testing.T) {
	tokens, err := NewTokens([]Token{{Name: "app", Secret: "app-secret-0123456789", Rules: []api.TokenRule{{Prefix: "app/", Right: "lock"}}}})
	require.NoError(t, err)
	n := newStreamNode(t, Config{Tokens: tokens}, "app-secret-0123456789")
	client := n.client
	ctx := context.Background()

	_, err = client.Acquire(ctx, lock.AcquireRequest{Key: "app/a", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	_, err = client.Acquire(ctx, lock.AcquireRequest{Key: "other/a", Owner: lock.NewOwner(), TTL: time.Minute})
	var se *api.ServerError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, api.CodePermissionDenied, se.Code)

	wider, err := NewTokens([]Token{{Name: "app", Secret: "app-secret-0123456789", Rules: []api.TokenRule{{Prefix: "", Right: "lock"}}}})
	require.NoError(t, err)
	require.NoError(t, n.h.SetTokens(wider))
	_, err = client.Acquire(ctx, lock.AcquireRequest{Key: "other/a", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err, "the reloaded rules apply on the open stream")
	assert.Equal(t, 1, n.h.openStreams())

	others, err := NewTokens([]Token{{Name: "other", Secret: "other-secret-0123456789", Rules: []api.TokenRule{{Prefix: "", Right: "lock"}}}})
	require.NoError(t, err)
	require.NoError(t, n.h.SetTokens(others))
	_, err = client.Acquire(ctx, lock.AcquireRequest{Key: "app/b", Owner: lock.NewOwner(), TTL: time.Minute})
	require.ErrorAs(t, err, &se)
	assert.Equal(t, api.CodeUnauthorized, se.Code)
	require.Eventually(t, func() bool { return n.h.openStreams() == 0 }, patience, time.Millisecond, "the stream of a token no longer known ends")
}

// rawStream opens a stream by hand, for the tests of the wire itself.
func rawStream(t *testing.T, url string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprintf(conn, "GET /v1/stream HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", strings.TrimPrefix(url, "http://"), streamwire.Protocol)
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.NoError(t, conn.SetDeadline(time.Now().Add(patience)))
	return conn, br
}

func readAnswer(t *testing.T, br *bufio.Reader) (streamwire.Answer, api.ErrorDetail) {
	t.Helper()
	p, err := streamwire.NewReader(br, 1<<20).Next()
	require.NoError(t, err)
	a, err := streamwire.ParseAnswer(p)
	require.NoError(t, err)
	var body api.ErrorBody
	_ = json.Unmarshal(a.Body, &body)
	return a, body.Error
}

// TestStreamRefusesBadInput: what is wrong with one operation is that
// operation's 400 and the stream goes on; a frame that breaks the framing
// gets a go-away naming the problem, then the stream ends; asking for the
// route without the upgrade gets 426 saying how.
func TestStreamRefusesBadInput(t *testing.T) {
	n := newStreamNode(t, Config{}, "")

	resp, err := http.Get(n.url + "/v1/stream")
	require.NoError(t, err)
	var refusal api.ErrorBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&refusal))
	resp.Body.Close()
	assert.Equal(t, http.StatusUpgradeRequired, resp.StatusCode)
	assert.Equal(t, streamwire.Protocol, resp.Header.Get("Upgrade"))
	assert.Contains(t, refusal.Error.Message, "Upgrade: "+streamwire.Protocol)

	conn, br := rawStream(t, n.url)
	owner := lock.NewOwner().String()
	var frames []byte
	frames = streamwire.AppendRequest(frames, 1, 9, []byte(`{}`))
	frames = streamwire.AppendRequest(frames, 2, streamwire.OpAcquire, []byte(`{"key":"k","ttl":"1m","owner":"`+owner+`","bogus":1}`))
	frames = streamwire.AppendRequest(frames, 3, streamwire.OpAcquire, []byte(`not json`))
	frames = streamwire.AppendRequest(frames, 4, streamwire.OpAcquire, []byte(`{"key":"k","ttl":"1m","owner":"`+owner+`"}`))
	_, err = conn.Write(frames)
	require.NoError(t, err)
	got := map[uint64]string{}
	for range 4 {
		ans, e := readAnswer(t, br)
		got[ans.ID] = fmt.Sprint(ans.Status, " ", e.Code)
		if ans.ID == 1 {
			assert.Contains(t, e.Message, "stream operation 9 is not one the node knows")
		}
	}
	assert.Equal(t, map[uint64]string{1: "400 bad_request", 2: "400 bad_request", 3: "400 bad_request", 4: "200 "}, got)

	_, err = conn.Write([]byte{0xff, 0xff, 0xff, 0xff, 0x7f}) // a frame's length that no limit allows
	require.NoError(t, err)
	ans, e := readAnswer(t, br)
	assert.Equal(t, uint64(0), ans.ID, "a go-away")
	assert.Equal(t, http.StatusBadRequest, ans.Status)
	assert.Equal(t, uint64(4), ans.Last)
	assert.Contains(t, e.Message, "malformed stream frame")
	_, err = br.ReadByte()
	assert.Error(t, err, "the node closes the stream")
	require.Eventually(t, func() bool { return n.h.openStreams() == 1 }, patience, time.Millisecond, "the client's own stream stays open")
}

// TestStreamLimitsOperationsInFlight: a stream carries at most
// streamwire.MaxInflight operations at once; one past them is answered 429
// too_many_in_flight at once (nothing done), and the stream goes on.
func TestStreamLimitsOperationsInFlight(t *testing.T) {
	n := newStreamNode(t, Config{}, "")
	ctx := context.Background()
	holder := lock.NewOwner()
	_, err := n.store.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)

	conn, br := rawStream(t, n.url)
	var frames []byte
	for id := uint64(1); id <= streamwire.MaxInflight+1; id++ {
		body := `{"key":"k","ttl":"1m","wait":"1m","owner":"` + lock.NewOwner().String() + `"}`
		frames = streamwire.AppendRequest(frames, id, streamwire.OpAcquire, []byte(body))
	}
	_, err = conn.Write(frames)
	require.NoError(t, err)
	ans, e := readAnswer(t, br)
	assert.Equal(t, uint64(streamwire.MaxInflight+1), ans.ID, "the one past the limit, answered while the others wait")
	assert.Equal(t, http.StatusTooManyRequests, ans.Status)
	assert.Equal(t, api.CodeTooManyInFlight, e.Code)
	assert.Contains(t, e.Message, "wait for answers")
	require.Eventually(t, func() bool { return waitersOf(t, n.store, "k") >= streamwire.MaxInflight }, patience, time.Millisecond, "the acquires in flight queue")
	assert.Equal(t, streamwire.MaxInflight, waitersOf(t, n.store, "k"), "the refused acquire did not queue")

	ok, err := n.store.Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, ok)
	ans, e = readAnswer(t, br)
	assert.Equal(t, http.StatusOK, ans.Status, "the first waiter is granted: the stream goes on (%s)", e.Message)
	assert.LessOrEqual(t, ans.ID, uint64(streamwire.MaxInflight), "one of those in flight (they queued in any order)")
}

// TestStreamGoesAwayWhenTheNodeStops: CloseStreams answers the operations
// read, tells the client which was last, and takes no new stream; the
// client's next operations take the HTTP routes.
func TestStreamGoesAwayWhenTheNodeStops(t *testing.T) {
	n := newStreamNode(t, Config{}, "")
	ctx := context.Background()
	holder := lock.NewOwner()
	_, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)

	conn, br := rawStream(t, n.url)
	frames := streamwire.AppendRequest(nil, 1, streamwire.OpAcquire, []byte(`{"key":"k","ttl":"1m","wait":"1m","owner":"`+lock.NewOwner().String()+`"}`))
	_, err = conn.Write(frames)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return waitersOf(t, n.store, "k") == 1 }, patience, time.Millisecond)

	stopped := make(chan error, 1)
	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	go func() { stopped <- n.h.CloseStreams(stopCtx) }()
	// The waiting acquire holds the stream open until CloseStreams gives up
	// and withdraws it.
	var got []streamwire.Answer
	for range 2 {
		a, _ := readAnswer(t, br)
		got = append(got, a)
	}
	ids := []uint64{got[0].ID, got[1].ID}
	assert.ElementsMatch(t, []uint64{0, 1}, ids, "a go-away and the acquire's answer")
	for _, a := range got {
		if a.ID == 0 {
			assert.Equal(t, uint64(1), a.Last)
			assert.Equal(t, http.StatusServiceUnavailable, a.Status)
		}
	}
	assert.ErrorIs(t, <-stopped, context.DeadlineExceeded)
	assert.Equal(t, 0, waitersOf(t, n.store, "k"), "the withdrawn acquire left the queue")
	assert.Equal(t, 0, n.h.openStreams())

	before := n.routes.lockRequests()
	released, err := n.client.Release(ctx, "k", holder)
	require.NoError(t, err)
	assert.True(t, released)
	assert.Equal(t, before+1, n.routes.lockRequests(), "with no stream, the release took its HTTP route")
}

// TestClientWithoutStreamRoute: a node that does not upgrade (an older
// agent answers 404) gets every operation on the HTTP routes, and is not
// asked again.
func TestClientWithoutStreamRoute(t *testing.T) {
	h := NewHandler(memstore.New(), Config{})
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/stream" {
			asked.Add(1)
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c, err := api.NewClient(srv.URL, api.ClientConfig{})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	for i := range 20 {
		o := lock.NewOwner()
		_, err := c.Acquire(ctx, lock.AcquireRequest{Key: fmt.Sprint("k", i), Owner: o, TTL: time.Minute})
		require.NoError(t, err)
		_, err = c.Release(ctx, fmt.Sprint("k", i), o)
		require.NoError(t, err)
	}
	assert.Equal(t, int32(1), asked.Load(), "the client asked for the stream once")
}

// holdingStore holds the first Release until hold is closed, telling
// entered.
type holdingStore struct {
	lock.Store
	first   atomic.Bool
	entered chan struct{}
	hold    chan struct{}
}

func (s *holdingStore) Release(ctx context.Context, key string, owner lock.Owner) (bool, error) {
	if s.first.CompareAndSwap(false, true) {
		s.entered <- struct{}{}
		<-s.hold
	}
	return s.Store.Release(ctx, key, owner)
}

// TestStreamBreakFailsOver: the stream to the node in use breaks (the node
// crashed) with operations in flight. A release, which cannot do more the
// second time, goes on to the next node and is answered there; a waiting
// acquire reports an unknown outcome (the node may have granted it) and is
// withdrawn at the node, which saw its client go.
func TestStreamBreakFailsOver(t *testing.T) {
	mem := memstore.New()
	t.Cleanup(func() { _ = mem.Close() })
	held := &holdingStore{Store: mem, entered: make(chan struct{}, 1), hold: make(chan struct{})}
	defer close(held.hold)
	crashing := NewHandler(held, Config{})
	crashingRoutes := &routeCounter{next: crashing, n: map[string]int{}}
	crashingSrv := httptest.NewServer(crashingRoutes)
	t.Cleanup(func() {
		crashingSrv.Close()
		_ = crashing.CloseStreams(canceledContext())
	})
	alive := newTestNodeOver(t, mem, Config{}, nil)
	c, err := api.NewFailoverClient([]string{crashingSrv.URL, alive.url}, api.ClientConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	streamCarries(t, c, crashingRoutes) // so that the acquire and the release go on it
	require.Equal(t, 1, crashing.openStreams())

	holder := lock.NewOwner()
	_, err = mem.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)
	waiter := lock.NewOwner()
	acquired := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: waiter, TTL: time.Minute, Wait: time.Minute})
		acquired <- err
	}()
	require.Eventually(t, func() bool { return waitersOf(t, mem, "k") == 1 }, patience, time.Millisecond)
	released := make(chan error, 1)
	go func() {
		ok, err := c.Release(ctx, "k", holder)
		if err == nil && !ok {
			err = errors.New("released nothing")
		}
		released <- err
	}()
	<-held.entered // the release is at the crashing node

	crashing.streams.each(func(s *serverStream) { s.conn.Close() }) // the crash, as the client sees it
	select {
	case err := <-acquired:
		assert.ErrorIs(t, err, lock.ErrUnknownOutcome, "the waiting acquire went out: its outcome is unknown")
	case <-time.After(patience):
		t.Fatal("the acquire in flight did not return")
	}
	select {
	case err := <-released:
		assert.NoError(t, err, "the release went on to the live node")
	case <-time.After(patience):
		t.Fatal("the release in flight did not return")
	}
	assert.Equal(t, alive.url, c.Endpoint())
	// The crashed node withdraws the waiter, or, when the release was
	// quicker, gives back the grant nobody will be told of.
	require.Eventually(t, func() bool {
		info, err := mem.Inspect(ctx, "k")
		return err == nil && !info.Locked && info.Waiters == 0
	}, patience, time.Millisecond, "released, and held by nobody")
}

// TestStreamWithAClientTimeout: a caller's own HTTP client with a Timeout
// (which would bound a stream's whole life, and makes net/http hide the
// connection) still gets a stream, and its waiting acquires go on it.
func TestStreamWithAClientTimeout(t *testing.T) {
	n := newStreamNode(t, Config{}, "")
	c, err := api.NewClient(n.url, api.ClientConfig{HTTPClient: &http.Client{Timeout: 200 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	streamCarries(t, c, n.routes)
	require.Equal(t, 2, n.h.openStreams(), "the client opened a stream of its own")

	holder := lock.NewOwner()
	_, err = c.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)
	acquired := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
		acquired <- err
	}()
	require.Eventually(t, func() bool { return waitersOf(t, n.store, "k") == 1 }, patience, time.Millisecond)
	released, err := n.client.Release(ctx, "k", holder)
	require.NoError(t, err)
	require.True(t, released)
	select {
	case err := <-acquired:
		assert.NoError(t, err)
	case <-time.After(patience):
		t.Fatal("the waiting acquire was not handed the lock")
	}
	assert.Equal(t, 2, n.h.openStreams())
}

// writeFailingListener hands out connections whose writes can be made to
// fail while their reads go on, as when the client's end is gone but the
// node has not read its end yet.
type writeFailingListener struct {
	net.Listener
	conns chan *writeFailingConn
}

func (l *writeFailingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	fc := &writeFailingConn{Conn: c}
	select {
	case l.conns <- fc:
	default:
	}
	return fc, nil
}

type writeFailingConn struct {
	net.Conn
	failWrites atomic.Bool
}

func (c *writeFailingConn) Write(p []byte) (int, error) {
	if c.failWrites.Load() {
		return 0, errors.New("the client's end is gone")
	}
	return c.Conn.Write(p)
}

// TestStreamGivesBackAGrantItCannotAnswer: a waiting acquire granted when
// the stream can no longer carry its answer (the write fails, though the
// node has not seen the client go) is released at once: nobody will be
// told of the grant, so nobody would release it before its TTL.
func TestStreamGivesBackAGrantItCannotAnswer(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	h := NewHandler(store, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listener := &writeFailingListener{Listener: ln, conns: make(chan *writeFailingConn, 1)}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = listener
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		_ = h.CloseStreams(canceledContext())
	})
	ctx := context.Background()
	holder := lock.NewOwner()
	_, err = store.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)

	conn, _ := rawStream(t, srv.URL)
	serverEnd := <-listener.conns // the stream's, the only connection
	waiter := lock.NewOwner()
	_, err = conn.Write(streamwire.AppendRequest(nil, 1, streamwire.OpAcquire, []byte(`{"key":"k","ttl":"1m","wait":"1m","owner":"`+waiter.String()+`"}`)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return waitersOf(t, store, "k") == 1 }, patience, time.Millisecond)

	serverEnd.failWrites.Store(true)
	released, err := store.Release(ctx, "k", holder) // hands the lock to the waiter
	require.NoError(t, err)
	require.True(t, released)
	require.Eventually(t, func() bool {
		info, err := store.Inspect(ctx, "k")
		return err == nil && !info.Locked && info.Waiters == 0
	}, patience, time.Millisecond, "the grant whose answer was lost is given back")
	require.Eventually(t, func() bool { return h.openStreams() == 0 }, patience, time.Millisecond, "the node ends the stream it cannot write to")
}
