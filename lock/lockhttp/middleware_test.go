package lockhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/lockhttp"
	"github.com/raftlock/raftlock/lock/memstore"
)

const patience = 10 * time.Second

func newStore(t *testing.T) *memstore.Store {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// gate is a handler that reports when it starts, with its fencing token, and
// returns only when told to.
type gate struct {
	entered chan uint64
	release chan struct{}
}

func newGate() *gate {
	return &gate{entered: make(chan uint64), release: make(chan struct{})}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, _ := lockhttp.Token(r.Context())
	g.entered <- token
	<-g.release
	_, _ = fmt.Fprintf(w, "done %d", token)
}

// serve runs one request through h on its own goroutine.
func serve(h http.Handler, r *http.Request) <-chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		done <- rec
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

type response struct {
	Error string `json:"error"`
	Key   string `json:"key"`
	Token uint64 `json:"token"`
}

func decode(t *testing.T, rec *httptest.ResponseRecorder) response {
	t.Helper()
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var b response
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b), "body %q", rec.Body.String())
	return b
}

func accountMux(c *lock.Client, h http.Handler, opts ...lockhttp.Option) *http.ServeMux {
	mux := http.NewServeMux()
	byAccount := func(r *http.Request) string { return "account:" + r.PathValue("id") }
	mux.Handle("POST /accounts/{id}", lockhttp.Middleware(c, byAccount, opts...)(h))
	return mux
}

func post(path string) *http.Request {
	return httptest.NewRequest(http.MethodPost, path, nil)
}

func TestContendedRequestIsRefused(t *testing.T) {
	c := lock.New(newStore(t))
	g := newGate()
	mux := accountMux(c, g)

	first := serve(mux, post("/accounts/42"))
	holderToken := receive(t, g.entered, "the first request to run")

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, post("/accounts/42"))
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Equal(t, response{Error: "locked", Key: "account:42", Token: holderToken}, decode(t, rec))

	// Another account is another lock: it runs while 42 is held.
	other := serve(mux, post("/accounts/43"))
	otherToken := receive(t, g.entered, "the request for another account to run")
	assert.Greater(t, otherToken, holderToken)

	close(g.release)
	for _, done := range []<-chan *httptest.ResponseRecorder{first, other} {
		rec := receive(t, done, "a response")
		assert.Equal(t, http.StatusOK, rec.Code)
	}
	locked, err := c.Lock("account:42").IsLocked(t.Context())
	require.NoError(t, err)
	assert.False(t, locked, "released after the handler")
}

func TestWaitingRequestRunsAfterTheHolder(t *testing.T) {
	store := newStore(t)
	c := lock.New(store)
	g := newGate()
	mux := accountMux(c, g, lockhttp.Wait(patience))

	first := serve(mux, post("/accounts/42"))
	firstToken := receive(t, g.entered, "the first request to run")
	second := serve(mux, post("/accounts/42"))
	require.Eventually(t, func() bool {
		info, err := store.Inspect(t.Context(), "account:42")
		return err == nil && info.Waiters == 1
	}, patience, time.Millisecond, "the second request queues")

	select {
	case <-g.entered:
		require.FailNow(t, "the second request ran while the first held the lock")
	default:
	}
	g.release <- struct{}{} // the first returns
	assert.Equal(t, http.StatusOK, receive(t, first, "the first response").Code)
	secondToken := receive(t, g.entered, "the second request to run")
	assert.Greater(t, secondToken, firstToken, "a new lease, with a higher token")
	g.release <- struct{}{}
	rec := receive(t, second, "the second response")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, fmt.Sprintf("done %d", secondToken), rec.Body.String())
}

func TestWaitRunsOut(t *testing.T) {
	c := lock.New(newStore(t))
	g := newGate()
	mux := accountMux(c, g, lockhttp.Wait(20*time.Millisecond))
	first := serve(mux, post("/accounts/7"))
	token := receive(t, g.entered, "the first request to run")

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, post("/accounts/7"))
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Equal(t, response{Error: "locked", Key: "account:7", Token: token}, decode(t, rec))

	close(g.release)
	receive(t, first, "the first response")
}

func TestOnLockedReplacesTheResponse(t *testing.T) {
	c := lock.New(newStore(t))
	g := newGate()
	var got *lock.HeldError
	mux := accountMux(c, g, lockhttp.OnLocked(func(w http.ResponseWriter, r *http.Request, held *lock.HeldError) {
		got = held
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy, try again", http.StatusTooManyRequests)
	}))
	first := serve(mux, post("/accounts/42"))
	token := receive(t, g.entered, "the first request to run")

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, post("/accounts/42"))
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.NotNil(t, got)
	assert.Equal(t, "account:42", got.Key)
	assert.Equal(t, token, got.Token)
	assert.ErrorIs(t, got, lock.ErrLocked)

	close(g.release)
	receive(t, first, "the first response")
}

// failingStore answers every call with err.
type failingStore struct {
	lock.Store
	err error
}

func (f failingStore) Acquire(context.Context, lock.AcquireRequest) (lock.Lease, error) {
	return lock.Lease{}, f.err
}

func TestAcquireErrors(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran without the lock")
	})
	tests := []struct {
		name   string
		store  lock.Store // nil: a memory store
		nilC   bool
		key    lockhttp.KeyFunc // nil: Key("payouts")
		nilKey bool
		opts   []lockhttp.Option
		status int
		error  string
	}{
		{name: "unavailable", store: failingStore{err: fmt.Errorf("cluster: %w", lock.ErrUnavailable)},
			status: http.StatusServiceUnavailable, error: "unavailable"},
		{name: "unknown outcome", store: failingStore{err: errors.Join(lock.ErrUnavailable, lock.ErrUnknownOutcome)},
			status: http.StatusServiceUnavailable, error: "unavailable"},
		{name: "queue full", store: failingStore{err: lock.ErrQueueFull},
			status: http.StatusServiceUnavailable, error: "unavailable"},
		{name: "transport error", store: failingStore{err: errors.New("dial tcp 10.0.0.1:7000: connection refused")},
			status: http.StatusServiceUnavailable, error: "unavailable"},
		{name: "empty key", key: lockhttp.Key(""), status: http.StatusBadRequest, error: "invalid_key"},
		{name: "ttl out of range", opts: []lockhttp.Option{lockhttp.TTL(0)},
			status: http.StatusInternalServerError, error: "internal"},
		{name: "wait out of range", opts: []lockhttp.Option{lockhttp.Wait(-time.Second)},
			status: http.StatusInternalServerError, error: "internal"},
		{name: "nil client", nilC: true, status: http.StatusInternalServerError, error: "internal"},
		{name: "nil key function", nilKey: true, status: http.StatusInternalServerError, error: "internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := tt.store
			if store == nil {
				store = newStore(t)
			}
			c := lock.New(store)
			if tt.nilC {
				c = nil
			}
			key := tt.key
			switch {
			case tt.nilKey:
			case key == nil:
				key = lockhttp.Key("payouts")
			}
			rec := httptest.NewRecorder()
			lockhttp.Middleware(c, key, tt.opts...)(ok).ServeHTTP(rec, post("/payouts/run"))
			assert.Equal(t, tt.status, rec.Code)
			assert.Equal(t, tt.error, decode(t, rec).Error)
			assert.NotContains(t, rec.Body.String(), "10.0.0.1", "internal addresses stay inside")
		})
	}
}

// lockhttp answers a refused key with the code the HTTP API uses for it,
// which the Go client reads back as lock.ErrInvalidKey.
func TestInvalidKeyCodeIsTheAPIs(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	rec := httptest.NewRecorder()
	lockhttp.Middleware(lock.New(newStore(t)), lockhttp.Key(""))(ok).ServeHTTP(rec, post("/payouts/run"))
	require.Equal(t, http.StatusBadRequest, rec.Code)
	code := decode(t, rec).Error
	assert.Equal(t, api.CodeInvalidKey, code)
	assert.ErrorIs(t, &api.ServerError{StatusCode: rec.Code, Code: code}, lock.ErrInvalidKey)
}

func TestOnErrorReplacesTheResponse(t *testing.T) {
	var got error
	h := lockhttp.Middleware(lock.New(failingStore{err: lock.ErrUnavailable}), lockhttp.Key("payouts"),
		lockhttp.OnError(func(w http.ResponseWriter, r *http.Request, err error) {
			got = err
			w.WriteHeader(http.StatusTeapot)
		}),
	)(http.NotFoundHandler())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, post("/payouts/run"))
	assert.Equal(t, http.StatusTeapot, rec.Code)
	assert.ErrorIs(t, got, lock.ErrUnavailable)
}

func TestNilHandler(t *testing.T) {
	rec := httptest.NewRecorder()
	lockhttp.Middleware(lock.New(newStore(t)), lockhttp.Key("k"))(nil).ServeHTTP(rec, post("/"))
	assert.Equal(t, http.StatusInternalServerError, rec.Code)
}

func TestRequestGoneWhileWaiting(t *testing.T) {
	store := newStore(t)
	c := lock.New(store)
	g := newGate()
	var gotErr error
	var mu sync.Mutex
	mux := accountMux(c, g, lockhttp.Wait(patience), lockhttp.OnError(func(w http.ResponseWriter, r *http.Request, err error) {
		mu.Lock()
		gotErr = err
		mu.Unlock()
		lockhttp.WriteError(w, r, err)
	}))
	first := serve(mux, post("/accounts/1"))
	receive(t, g.entered, "the first request to run")

	ctx, cancel := context.WithCancel(t.Context())
	waiting := serve(mux, post("/accounts/1").WithContext(ctx))
	require.Eventually(t, func() bool {
		info, err := store.Inspect(t.Context(), "account:1")
		return err == nil && info.Waiters == 1
	}, patience, time.Millisecond)
	cancel()
	rec := receive(t, waiting, "the abandoned request's response")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	mu.Lock()
	assert.ErrorIs(t, gotErr, context.Canceled)
	mu.Unlock()
	info, err := store.Inspect(t.Context(), "account:1")
	require.NoError(t, err)
	assert.Zero(t, info.Waiters, "the abandoned request left the queue")

	close(g.release)
	assert.Equal(t, http.StatusOK, receive(t, first, "the first response").Code)
}

// losingStore answers every extend with ErrNotHeld: the lease is gone.
type losingStore struct{ lock.Store }

func (losingStore) Extend(_ context.Context, key string, _ lock.Owner, _ time.Duration) (lock.Lease, error) {
	return lock.Lease{}, fmt.Errorf("%w (key %q)", lock.ErrNotHeld, key)
}

func TestLostLeaseCancelsTheRequestContext(t *testing.T) {
	released := make(chan lock.ReleasedEvent, 1)
	c := lock.New(losingStore{newStore(t)}, lock.WithHooks(lock.Hooks{
		OnReleased: func(_ context.Context, e lock.ReleasedEvent) { released <- e },
	}))
	leaseErr := make(chan error, 1)
	cause := make(chan error, 1)
	h := lockhttp.Middleware(c, lockhttp.Key("report"),
		lockhttp.TTL(150*time.Millisecond), // the keep-alive's first extend comes after 50ms
		lockhttp.OnLeaseError(func(r *http.Request, err error) { leaseErr <- err }),
	)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		cause <- context.Cause(r.Context())
		w.WriteHeader(http.StatusAccepted)
	}))

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, post("/report"))
	assert.Equal(t, http.StatusAccepted, rec.Code, "the handler's response stands")
	assert.ErrorIs(t, receive(t, cause, "the handler's context to end"), lock.ErrNotHeld)
	assert.ErrorIs(t, receive(t, leaseErr, "OnLeaseError"), lock.ErrNotHeld)
	assert.True(t, receive(t, released, "the OnReleased hook").Lost)
}

// unreleasableStore fails every release.
type unreleasableStore struct{ lock.Store }

func (unreleasableStore) Release(context.Context, string, lock.Owner) (bool, error) {
	return false, lock.ErrUnavailable
}

func TestReleaseErrorGoesToOnLeaseError(t *testing.T) {
	var got error
	h := lockhttp.Middleware(lock.New(unreleasableStore{newStore(t)}), lockhttp.Key("report"),
		lockhttp.OnLeaseError(func(r *http.Request, err error) { got = err }),
	)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, post("/report"))
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.ErrorIs(t, got, lock.ErrUnavailable)
}

func TestToken(t *testing.T) {
	store := newStore(t)
	c := lock.New(store)
	var token uint64
	var ok bool
	var held lock.KeyInfo
	h := lockhttp.Middleware(c, lockhttp.Key("report"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok = lockhttp.Token(r.Context())
		var err error
		held, err = store.Inspect(r.Context(), "report")
		require.NoError(t, err)
	}))
	h.ServeHTTP(httptest.NewRecorder(), post("/report"))
	assert.True(t, ok)
	assert.True(t, held.Locked)
	assert.Equal(t, held.Token, token, "the token of the lease the handler runs under")

	_, ok = lockhttp.Token(context.Background())
	assert.False(t, ok, "no token outside the middleware")
}

func TestHooksFire(t *testing.T) {
	var mu sync.Mutex
	var events []string
	record := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	c := lock.New(newStore(t), lock.WithHooks(lock.Hooks{
		OnAcquired:  func(_ context.Context, e lock.AcquiredEvent) { record("acquired " + e.Key) },
		OnReleased:  func(_ context.Context, e lock.ReleasedEvent) { record("released " + e.Key) },
		OnContended: func(_ context.Context, e lock.ContendedEvent) { record("contended " + e.Key) },
	}))
	g := newGate()
	mux := accountMux(c, g)
	first := serve(mux, post("/accounts/5"))
	receive(t, g.entered, "the first request to run")
	mux.ServeHTTP(httptest.NewRecorder(), post("/accounts/5"))
	close(g.release)
	receive(t, first, "the first response")

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"acquired account:5", "contended account:5", "released account:5"}, events)
}

func TestPanickingHandlerReleases(t *testing.T) {
	c := lock.New(newStore(t))
	h := lockhttp.Middleware(c, lockhttp.Key("report"))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	func() {
		defer func() {
			assert.Equal(t, http.ErrAbortHandler, recover(), "the panic goes on to net/http")
		}()
		h.ServeHTTP(httptest.NewRecorder(), post("/report"))
	}()
	locked, err := c.Lock("report").IsLocked(t.Context())
	require.NoError(t, err)
	assert.False(t, locked)
}

// Through a real server: the response is what a client sees.
func TestOverHTTP(t *testing.T) {
	c := lock.New(newStore(t))
	g := newGate()
	srv := httptest.NewServer(accountMux(c, g))
	t.Cleanup(srv.Close)

	firstDone := make(chan int, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/accounts/9", "", nil)
		if err != nil {
			firstDone <- 0
			return
		}
		_ = resp.Body.Close()
		firstDone <- resp.StatusCode
	}()
	token := receive(t, g.entered, "the first request to run")

	resp, err := http.Post(srv.URL+"/accounts/9", "", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	var b response
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&b))
	assert.Equal(t, response{Error: "locked", Key: "account:9", Token: token}, b)

	close(g.release)
	assert.Equal(t, http.StatusOK, receive(t, firstDone, "the first response"))
}

// WriteLocked tells a held key by its token, and a key reserved for a
// waiting multi-key lock as reserved, with no token.
func TestWriteLockedSaysReserved(t *testing.T) {
	for _, tc := range []struct {
		held *lock.HeldError
		want map[string]any
	}{
		{&lock.HeldError{Key: "k", Token: 7}, map[string]any{"error": "locked", "key": "k", "token": 7.0}},
		{&lock.HeldError{Key: "k", Reserved: true}, map[string]any{"error": "locked", "key": "k", "reserved": true}},
	} {
		w := httptest.NewRecorder()
		lockhttp.WriteLocked(w, httptest.NewRequest("GET", "/", nil), tc.held)
		assert.Equal(t, http.StatusConflict, w.Code)
		var got map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
		assert.Equal(t, tc.want, got)
	}
}
