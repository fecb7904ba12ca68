package apiserver

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster/clustertest"
	"github.com/raftlock/raftlock/lock"
)

func TestWaitersRouteListsTheQueueWithoutOwners(t *testing.T) {
	c := clustertest.Start(t, 1, nil)
	node := c.Nodes[0]
	n := newTestNodeOver(t, node, Config{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder := lock.NewOwner()
	_, err := node.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: holder, TTL: time.Minute})
	require.NoError(t, err)
	waiting := lock.NewOwner()
	go func() {
		_, _ = node.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: waiting, TTL: 15 * time.Second, Wait: time.Minute})
	}()

	var a answer
	require.Eventually(t, func() bool {
		a = n.do(t, "GET", "/v1/waiters?key=k", "")
		w, _ := a.body["waiters"].([]any)
		return a.status == http.StatusOK && len(w) == 1
	}, 10*time.Second, 10*time.Millisecond)
	w := a.body["waiters"].([]any)[0].(map[string]any)
	assert.EqualValues(t, 1, w["position"])
	assert.EqualValues(t, 15000, w["ttl_ms"])
	assert.Greater(t, w["wait_left_ms"], 0.0)
	assert.Equal(t, "k", a.body["key"])
	assert.Equal(t, true, a.body["stale"])
	assert.NotContains(t, a.raw, waiting.String())
	assert.NotContains(t, a.raw, holder.String())

	free := n.do(t, "GET", "/v1/waiters?key=free", "")
	require.Equal(t, http.StatusOK, free.status, free.raw)
	assert.Equal(t, []any{}, free.body["waiters"])

	assert.Equal(t, api.CodeInvalidKey, n.do(t, "GET", "/v1/waiters", "").errorCode())
	assert.Equal(t, api.CodeInvalidKey, n.do(t, "GET", "/v1/waiters?key=", "").errorCode())
	assert.Equal(t, api.CodeBadRequest, n.do(t, "GET", "/v1/waiters?key=k&x=1", "").errorCode())
}

func TestWaitersRouteNeedsAStoreThatQueues(t *testing.T) {
	n := newTestNode(t, Config{})
	a := n.do(t, "GET", "/v1/waiters?key=k", "")
	assert.Equal(t, http.StatusNotImplemented, a.status)
	assert.Equal(t, api.CodeNotImplemented, a.errorCode())
}
