package apiserver

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster/clustertest"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/locktest"
)

// A blocking query answers the index in its header, blocks until the key
// changes after it, and refuses bad parameters naming them.
func TestBlockingInspectOverHTTP(t *testing.T) {
	n := newTestNode(t, Config{})
	first := n.do(t, "GET", "/v1/inspect?key=jobs%2Fx&index=0", "")
	require.Equal(t, http.StatusOK, first.status, first.raw)
	index, err := strconv.ParseUint(first.header.Get(IndexHeader), 10, 64)
	require.NoError(t, err, "the answer carries %s", IndexHeader)

	done := make(chan answer, 1)
	go func() {
		done <- n.do(t, "GET", "/v1/inspect?key=jobs%2Fx&wait=1m&index="+strconv.FormatUint(index, 10), "")
	}()
	// Whether the query is parked yet or not, the acquire wakes it: a change
	// after index is never missed.
	acquired := n.do(t, "POST", "/v1/acquire", `{"key":"jobs/x","ttl":"30s"}`)
	require.Equal(t, http.StatusOK, acquired.status, acquired.raw)
	select {
	case a := <-done:
		require.Equal(t, http.StatusOK, a.status, a.raw)
		assert.Equal(t, true, a.body["locked"])
		next, err := strconv.ParseUint(a.header.Get(IndexHeader), 10, 64)
		require.NoError(t, err)
		assert.Greater(t, next, index)
	case <-time.After(patience):
		t.Fatal("the blocking query was not woken by the acquire")
	}

	for _, tc := range []struct{ query, code, mention string }{
		{"key=a&index=x", api.CodeBadRequest, `"x"`},
		{"key=a&index=-1", api.CodeBadRequest, `"-1"`},
		{"key=a&index=1&wait=soon", api.CodeInvalidWait, `"soon"`},
		{"key=a&index=1&wait=-1s", api.CodeInvalidWait, `"-1s"`},
		{"key=a&wait=1s", api.CodeBadRequest, "wait"},
		{"key=a&consistent", api.CodeBadRequest, "consistent"},
		{"key=a&index=1&consistent=maybe", api.CodeBadRequest, `"maybe"`},
	} {
		a := n.do(t, "GET", "/v1/inspect?"+tc.query, "")
		assert.Equal(t, http.StatusBadRequest, a.status, tc.query)
		assert.Equal(t, tc.code, a.errorCode(), tc.query)
		e, _ := a.body["error"].(map[string]any)
		assert.Contains(t, e["message"], tc.mention, tc.query)
	}
	a := n.do(t, "GET", "/v1/locks?prefix=jobs%2F&wait=1s", "")
	assert.Equal(t, api.CodeBadRequest, a.errorCode(), "wait without index on the list")
}

// A blocking list needs read on every key under its prefix.
func TestBlockingListNeedsReadOnTheWholePrefix(t *testing.T) {
	n := newACLNode(t, nil)
	a := n.as(t, secretMixed, "GET", "/v1/locks?prefix=a%2F&index=0", "")
	assert.Equal(t, http.StatusForbidden, a.status, a.raw)
	assert.Contains(t, a.raw, "a blocking list needs read on every key under its prefix")
	a = n.as(t, secretMixed, "GET", "/v1/locks?prefix=a%2Fpublic%2F&index=0", "")
	assert.Equal(t, http.StatusOK, a.status, a.raw)
	assert.NotEmpty(t, a.header.Get(IndexHeader))
	a = n.as(t, secretReader, "GET", "/v1/inspect?key=other&index=0", "")
	assert.Equal(t, http.StatusForbidden, a.status, "a key watch needs read on the key")
}

// The Go client's watch goes through a blocking query and ends with its ctx.
func TestClientWatchEndsWithItsContext(t *testing.T) {
	n := newTestNode(t, Config{})
	c := lock.New(n.client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var last error
	for _, err := range c.Watch(ctx, "jobs/x") {
		if err != nil {
			last = err
			break
		}
		cancel() // after the first state
	}
	assert.ErrorIs(t, last, context.Canceled)
}

// Past Config.MaxWatchers a blocking query answers 429 too_many_watchers,
// and the place is given back when a query ends.
func TestBlockingQueriesAreBounded(t *testing.T) {
	n := newTestNode(t, Config{MaxWatchers: 1})
	first := n.do(t, "GET", "/v1/inspect?key=a&index=0", "")
	require.Equal(t, http.StatusOK, first.status, first.raw)
	index := first.header.Get(IndexHeader)
	parked := make(chan answer, 1)
	go func() { parked <- n.do(t, "GET", "/v1/inspect?key=a&wait=1m&index="+index, "") }()
	require.Eventually(t, func() bool { return n.handler.watching.Load() == 1 }, patience, time.Millisecond)
	refused := n.do(t, "GET", "/v1/inspect?key=b&index="+index, "")
	assert.Equal(t, http.StatusTooManyRequests, refused.status)
	assert.Equal(t, api.CodeTooManyWatchers, refused.errorCode())
	acquired := n.do(t, "POST", "/v1/acquire", `{"key":"a","ttl":"30s"}`)
	require.Equal(t, http.StatusOK, acquired.status, acquired.raw)
	select {
	case a := <-parked:
		assert.Equal(t, http.StatusOK, a.status)
	case <-time.After(patience):
		t.Fatal("the parked query was not woken")
	}
	again := n.do(t, "GET", "/v1/inspect?key=b&index=0", "")
	assert.Equal(t, http.StatusOK, again.status, "the place was given back")
	assert.Zero(t, n.handler.watching.Load())
}

// The HTTP client of a cluster follower: its answers come from the
// follower's own state, which lags the leader, and the watch contract holds.
func TestClientWatchesThroughClusterFollower(t *testing.T) {
	c := clustertest.Start(t, 3, nil)
	n := newTestNodeOver(t, c.Follower(t), Config{}, nil)
	locktest.TestWatcher(t, func(*testing.T) lock.Store { return n.client }, locktest.Options{ShortTTL: 500 * time.Millisecond})
}

// A client that goes away ends its blocking query: the handler gives its
// place back (the store forgets the watcher when the request's ctx ends,
// which lock's and cluster's tests check).
func TestBlockingQueryEndsWithItsClient(t *testing.T) {
	n := newTestNode(t, Config{})
	_, index, err := n.client.WatchKey(context.Background(), "a", lock.WatchQuery{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := n.client.WatchKey(ctx, "a", lock.WatchQuery{Index: index, Wait: time.Hour})
		done <- err
	}()
	require.Eventually(t, func() bool { return n.handler.watching.Load() == 1 }, patience, time.Millisecond)
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(patience):
		t.Fatal("the client's watch did not end with its ctx")
	}
	require.Eventually(t, func() bool { return n.handler.watching.Load() == 0 }, patience, time.Millisecond, "the handler's place is given back")
}
