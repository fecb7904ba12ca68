package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// fakeNode answers /v1/acquire and, unless noBatch, /v1/batch, granting
// every acquire with the next token. The first acquire waits for hold to
// close, so that the operations the test starts meanwhile queue in the
// client.
type fakeNode struct {
	noBatch     bool
	batchAnswer func(w http.ResponseWriter) bool // answers /v1/batch itself when it returns true

	hold    chan struct{}
	first   atomic.Bool
	token   atomic.Uint64
	mu      sync.Mutex
	singles []AcquireRequest
	batches [][]BatchOp
}

func newFakeNode(t *testing.T, f *fakeNode) (*httptest.Server, *Client) {
	f.hold = make(chan struct{})
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Cleanup(f.release)
	c, err := NewClient(srv.URL, ClientConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return srv, c
}

func (f *fakeNode) release() {
	select {
	case <-f.hold:
	default:
		close(f.hold)
	}
}

func (f *fakeNode) grant(body []byte) (int, any) {
	var req AcquireRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Key == nil || req.Owner == nil {
		return http.StatusBadRequest, ErrorBody{Error: ErrorDetail{Code: CodeBadRequest, Message: fmt.Sprint("fake: ", err)}}
	}
	return http.StatusOK, LeaseResponse{KeyOut: MakeKeyOut(*req.Key), Owner: *req.Owner, Token: f.token.Add(1), TTLMS: 30000, RemainingMS: 30000}
}

func (f *fakeNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/v1/acquire":
		if f.first.CompareAndSwap(false, true) {
			<-f.hold
		}
		var req AcquireRequest
		_ = json.Unmarshal(body, &req)
		f.mu.Lock()
		f.singles = append(f.singles, req)
		f.mu.Unlock()
		status, answer := f.grant(body)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(answer)
	case r.URL.Path == "/v1/batch" && !f.noBatch:
		var req BatchRequest
		if err := json.Unmarshal(body, &req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.batches = append(f.batches, req.Ops)
		f.mu.Unlock()
		if f.batchAnswer != nil && f.batchAnswer(w) {
			return
		}
		var resp BatchResponse
		for _, op := range req.Ops {
			status, answer := f.grant(op.Body)
			raw, _ := json.Marshal(answer)
			resp.Results = append(resp.Results, BatchResult{Status: status, Body: raw})
		}
		_ = json.NewEncoder(w).Encode(resp)
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(ErrorBody{Error: ErrorDetail{Code: CodeNotFound, Message: "api: no route " + r.URL.Path}})
	}
}

// startQueued takes the fake's first acquire (which waits on hold), then
// starts n more acquires and waits until all n queue behind it.
func startQueued(t *testing.T, c *Client, srv *httptest.Server, n int) (first chan error, rest []chan error) {
	t.Helper()
	ctx := context.Background()
	first = make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, lock.AcquireRequest{Key: "first", Owner: lock.NewOwner(), TTL: time.Minute})
		first <- err
	}()
	b := perEndpoint[batcher](&c.batchers, (*c.endpoints.Load())[0])
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.inflight == 1 }, 10*time.Second, time.Millisecond)
	for i := range n {
		done := make(chan error, 1)
		rest = append(rest, done)
		go func() {
			_, err := c.Acquire(ctx, lock.AcquireRequest{Key: fmt.Sprintf("k%d", i), Owner: lock.NewOwner(), TTL: time.Minute})
			done <- err
		}()
	}
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == n }, 10*time.Second, time.Millisecond)
	return first, rest
}

// Acquires started while one is in flight go together as one POST
// /v1/batch once it ends, each with the body it would have had alone, and
// each caller gets its own grant.
func TestBatchCarriesWhatQueued(t *testing.T) {
	f := &fakeNode{}
	srv, c := newFakeNode(t, f)
	first, rest := startQueued(t, c, srv, 5)
	f.release()
	require.NoError(t, <-first)
	for _, done := range rest {
		assert.NoError(t, <-done)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.batches, 1, "the five queued acquires travel in one batch")
	keys := map[string]bool{}
	for _, op := range f.batches[0] {
		assert.Equal(t, BatchAcquire, op.Op)
		var req AcquireRequest
		require.NoError(t, json.Unmarshal(op.Body, &req))
		keys[*req.Key] = true
		assert.NotNil(t, req.TTL, "the body is the acquire's own")
		assert.Nil(t, req.Wait, "a batched acquire does not wait")
	}
	assert.Len(t, keys, 5)
	assert.Len(t, f.singles, 1, "only the first went on its own")
}

// A node without /v1/batch (an older agent) answers 404: the queued
// operations are sent one by one, and later ones never try a batch again.
func TestBatchFallsBackToSingleRequests(t *testing.T) {
	f := &fakeNode{noBatch: true}
	srv, c := newFakeNode(t, f)
	first, rest := startQueued(t, c, srv, 3)
	f.release()
	require.NoError(t, <-first)
	for _, done := range rest {
		assert.NoError(t, <-done)
	}
	b := perEndpoint[batcher](&c.batchers, (*c.endpoints.Load())[0])
	assert.True(t, b.off.Load(), "the endpoint is known to have no batch route")
	f.mu.Lock()
	assert.Len(t, f.singles, 4, "every acquire went on its own route")
	f.mu.Unlock()
	_, err := c.Acquire(context.Background(), lock.AcquireRequest{Key: "later", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
}

// An answer to the batch as a whole (here: no token) is each operation's
// answer, read as it would be alone.
func TestBatchWholeAnswerIsEachOperations(t *testing.T) {
	f := &fakeNode{batchAnswer: func(w http.ResponseWriter) bool {
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(ErrorBody{Error: ErrorDetail{Code: CodeUnauthorized, Message: "api: token missing"}})
		return true
	}}
	srv, c := newFakeNode(t, f)
	first, rest := startQueued(t, c, srv, 2)
	f.release()
	require.NoError(t, <-first)
	for _, done := range rest {
		err := <-done
		assert.ErrorIs(t, err, ErrUnauthorized)
	}
}

// A queued operation whose context ends before its batch leaves is never
// sent: its caller gets the context's error, without unknown outcome.
func TestBatchQueuedOperationLeavesWithItsContext(t *testing.T) {
	f := &fakeNode{}
	srv, c := newFakeNode(t, f)
	first, _ := startQueued(t, c, srv, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, lock.AcquireRequest{Key: "gone", Owner: lock.NewOwner(), TTL: time.Minute})
		done <- err
	}()
	b := perEndpoint[batcher](&c.batchers, (*c.endpoints.Load())[0])
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	err := <-done
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, errors.Is(err, lock.ErrUnknownOutcome), "it never left: %v", err)
	f.release()
	require.NoError(t, <-first)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Empty(t, f.batches, "nothing was left to send")
	for _, s := range f.singles {
		assert.NotEqual(t, "gone", *s.Key)
	}
}

// An answer that announces its length is read whole; one cut short of it
// is an error, not a shorter answer.
func TestReadAnswerByItsLength(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/whole" {
			w.Header().Set("Content-Length", "11")
			_, _ = io.WriteString(w, `{"a":"bcd"}`)
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if !assert.NoError(t, err) {
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\":")
		_ = buf.Flush()
		_ = conn.Close()
	}))
	t.Cleanup(srv.Close)
	for path, want := range map[string]string{"/whole": `{"a":"bcd"}`, "/short": ""} {
		resp, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		got, err := readAnswer(resp)
		_ = resp.Body.Close()
		if want == "" {
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF, path)
			continue
		}
		assert.NoError(t, err, path)
		assert.Equal(t, want, string(got), path)
	}
}

// When a batch comes back, the goroutine that sends the next one waits
// (lingers) for as many operations as the batch carried beyond those that
// queued while it was out, so that its callers' next operations and the
// others travel together rather than as two halves taking turns.
func TestLingerWaitsForTheBatchsOwnCallers(t *testing.T) {
	c, err := NewClient("127.0.0.1:1", ClientConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	base := (*c.endpoints.Load())[0]
	b := perEndpoint[batcher](&c.batchers, base)
	b.mu.Lock()
	b.inflight = maxInflight // a batch is out: operations queue
	b.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // the queued operations leave with their context
	arrived := func() uint64 { b.mu.Lock(); defer b.mu.Unlock(); return b.arrived }
	enqueue := func() {
		want := arrived() + 1
		go func() {
			_, _, _, _, _ = c.sendOp(ctx, base, exchange{method: http.MethodPost, path: "/v1/release", write: true, batch: BatchRelease}, []byte(`{}`))
		}()
		require.Eventually(t, func() bool { return arrived() == want }, 10*time.Second, time.Millisecond)
	}
	for range 3 { // queued while the batch was out
		enqueue()
	}
	lingered := make(chan struct{})
	go func() {
		b.linger(arrived()+2, time.Minute) // the batch carried 2
		close(lingered)
	}()
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.ready != nil }, 10*time.Second, time.Millisecond)
	enqueue()
	b.mu.Lock()
	waiting := b.ready != nil // enqueue closes and clears it under the lock when enough have arrived
	b.mu.Unlock()
	assert.True(t, waiting, "4 queued, but only one of the batch's 2 callers is back")
	enqueue()
	select {
	case <-lingered:
	case <-time.After(10 * time.Second):
		t.Fatal("the linger did not end once the batch's callers were back")
	}
}
