package apiserver

import (
	"context"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

func histogramOf(t *testing.T, n *testNode, name string) *dto.Histogram {
	t.Helper()
	m, err := sample(scrape(t, n), name, nil)
	require.NoError(t, err)
	return m.GetHistogram()
}

// A blocking query counts in raftlock_api_watches_waiting while it waits,
// and no longer once a change answers it.
func TestWatchesWaitingMetric(t *testing.T) {
	n := newTestNode(t, Config{})
	assert.Equal(t, 0.0, gaugeValue(t, n, "raftlock_api_watches_waiting"))
	first := n.do(t, "GET", "/v1/inspect?key=k&index=0", "")
	require.Equal(t, http.StatusOK, first.status, first.raw)
	index := first.header.Get(IndexHeader)
	require.NotEmpty(t, index)

	answered := make(chan answer, 1)
	go func() {
		a, err := n.send(context.Background(), "GET", "/v1/inspect?key=k&wait=30s&index="+index, "")
		if err != nil {
			a.raw = err.Error()
		}
		answered <- a
	}()
	require.Eventually(t, func() bool { return gaugeValue(t, n, "raftlock_api_watches_waiting") == 1 }, patience, time.Millisecond,
		"the blocking query waits")
	acq := n.do(t, "POST", "/v1/acquire", `{"key":"k","ttl":"1m"}`)
	require.Equal(t, http.StatusOK, acq.status, acq.raw)
	select {
	case a := <-answered:
		require.Equal(t, http.StatusOK, a.status, a.raw)
		assert.Equal(t, true, a.body["locked"])
	case <-time.After(patience):
		t.Fatal("the acquire did not answer the blocking query")
	}
	assert.Equal(t, 0.0, gaugeValue(t, n, "raftlock_api_watches_waiting"))
}

// raftlock_api_batch_operations observes each batch's size; a refused
// batch (nothing ran) is not observed.
func TestBatchSizeMetric(t *testing.T) {
	n := newTestNode(t, Config{})
	assert.Zero(t, histogramOf(t, n, "raftlock_api_batch_operations").GetSampleCount())
	a := n.do(t, "POST", "/v1/batch", `{"ops":[`+
		`{"op":"acquire","body":{"key":"a","ttl":"1m"}},`+
		`{"op":"acquire","body":{"key":"b","ttl":"1m"}},`+
		`{"op":"acquire","body":{"key":"c","ttl":"1m"}}]}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	bad := n.do(t, "POST", "/v1/batch", `{"ops":[{"op":"nap","body":{}}]}`)
	require.Equal(t, http.StatusBadRequest, bad.status, bad.raw)

	h := histogramOf(t, n, "raftlock_api_batch_operations")
	assert.Equal(t, uint64(1), h.GetSampleCount())
	assert.Equal(t, 3.0, h.GetSampleSum())
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() >= 4 {
			assert.Equal(t, uint64(1), b.GetCumulativeCount(), "le %v", b.GetUpperBound())
		} else {
			assert.Zero(t, b.GetCumulativeCount(), "le %v", b.GetUpperBound())
		}
	}
}

// A cluster node's metrics count the watches waiting on its store
// (embedded ones too) and the commands per raft entry it proposed.
func TestNodeWatchAndEntryMetrics(t *testing.T) {
	node := newSingleNodeCluster(t)
	n := newTestNodeOver(t, node, Config{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	before := histogramOf(t, n, "raftlock_raft_entry_commands").GetSampleCount()
	_, err := node.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	h := histogramOf(t, n, "raftlock_raft_entry_commands")
	assert.Greater(t, h.GetSampleCount(), before, "the acquire's entry is counted")
	assert.GreaterOrEqual(t, h.GetSampleSum(), float64(h.GetSampleCount()), "an entry carries a command at least")
	buckets := h.GetBucket()
	require.NotEmpty(t, buckets)
	assert.Equal(t, 1.0, buckets[0].GetUpperBound())
	var bounds []float64
	for _, b := range buckets {
		bounds = append(bounds, b.GetUpperBound())
	}
	assert.Contains(t, bounds, float64(512), "the proposer's most per entry")

	assert.Equal(t, 0.0, gaugeValue(t, n, "raftlock_watchers"))
	_, index, err := node.WatchKey(ctx, "k", lock.WatchQuery{})
	require.NoError(t, err)
	woken := make(chan error, 1)
	go func() {
		_, _, err := node.WatchKey(ctx, "k", lock.WatchQuery{Index: index, Wait: time.Minute})
		woken <- err
	}()
	require.Eventually(t, func() bool { return gaugeValue(t, n, "raftlock_watchers") == 1 }, patience, time.Millisecond,
		"the embedded watch waits on the node")
	cancel()
	select {
	case <-woken:
	case <-time.After(patience):
		t.Fatal("the watch did not end with its context")
	}
	assert.Equal(t, 0.0, gaugeValue(t, n, "raftlock_watchers"))
}

// The console's events count the node's blocking queries, and on a
// cluster node the watches on its store and the live sessions.
func TestConsoleEventCountsWatchesAndSessions(t *testing.T) {
	node := newSingleNodeCluster(t)
	n := newTestNodeOver(t, node, Config{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := openEvents(t, n, "")
	ev := readEvent(t, events)
	require.NotNil(t, ev.Sessions)
	require.NotNil(t, ev.StoreWatchers)
	assert.Zero(t, *ev.Sessions)
	assert.Zero(t, *ev.StoreWatchers)
	assert.Zero(t, ev.Watches)

	_, err := node.CreateSession(ctx, lock.SessionRequest{ID: lock.NewSessionID(), TTL: time.Minute})
	require.NoError(t, err)
	first := n.do(t, "GET", "/v1/inspect?key=k&index=0", "")
	require.Equal(t, http.StatusOK, first.status, first.raw)
	go func() {
		_, _ = n.send(ctx, "GET", "/v1/inspect?key=k&wait=1m&index="+first.header.Get(IndexHeader), "")
	}()
	require.Eventually(t, func() bool {
		ev = readEvent(t, events)
		return ev.Watches == 1 && *ev.StoreWatchers == 1 && *ev.Sessions == 1
	}, patience, time.Millisecond, "the event counts the session and the blocking query")
}
