package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// POST /v1/leave runs Config.Leave and says so; api.Client.Leave reads the answer.
func TestLeaveRunsConfigLeave(t *testing.T) {
	var calls atomic.Int32
	n := newTestNode(t, Config{Cluster: &fakeCluster{st: leaderStatus()}, Leave: func(ctx context.Context) error {
		calls.Add(1)
		return nil
	}})
	a := n.do(t, http.MethodPost, "/v1/leave", "")
	assert.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, "left", a.body["status"])
	assert.Equal(t, leaderStatus().NodeID, a.body["node_id"])
	require.NoError(t, n.client.Leave(context.Background()))
	assert.Equal(t, int32(2), calls.Load())

	a = n.do(t, http.MethodGet, "/v1/leave", "")
	assert.Equal(t, http.StatusMethodNotAllowed, a.status, "leaving is a POST")
	assert.Equal(t, int32(2), calls.Load())
}

// A leave that fails (no leader could remove the node) is a 503 that the
// client reports as lock.ErrUnavailable.
func TestLeaveFailureIsUnavailable(t *testing.T) {
	n := newTestNode(t, Config{Leave: func(ctx context.Context) error {
		return fmt.Errorf("cluster: leave: %w: no leader known after 2s; the node is still a member", lock.ErrUnavailable)
	}})
	a := n.do(t, http.MethodPost, "/v1/leave", "")
	assert.Equal(t, http.StatusServiceUnavailable, a.status)
	assert.Equal(t, api.CodeUnavailable, a.errorCode())
	err := n.client.Leave(context.Background())
	require.ErrorIs(t, err, lock.ErrUnavailable)
	assert.Contains(t, err.Error(), "still a member")
}

// Without Config.Leave the route is 501 not_implemented.
func TestLeaveNotOffered(t *testing.T) {
	n := newTestNode(t, Config{})
	err := n.client.Leave(context.Background())
	require.ErrorIs(t, err, errors.ErrUnsupported)
	var se *api.ServerError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, api.CodeNotImplemented, se.Code)
}

// The token guards leave like any route, and a refused leave does nothing.
func TestLeaveNeedsTheToken(t *testing.T) {
	var calls atomic.Int32
	n := newTestNode(t, Config{Token: testToken, Leave: func(ctx context.Context) error { calls.Add(1); return nil }})
	anon, err := api.NewClient(n.url, api.ClientConfig{})
	require.NoError(t, err)
	require.ErrorIs(t, anon.Leave(context.Background()), api.ErrUnauthorized)
	assert.Zero(t, calls.Load())
	require.NoError(t, n.client.Leave(context.Background()))
	assert.Equal(t, int32(1), calls.Load())
}

// api.Client.Leave goes to the first endpoint only: a client that fails over
// must not take the next node out instead.
func TestClientLeaveNeverFailsOver(t *testing.T) {
	var calls atomic.Int32
	second := newTestNode(t, Config{Leave: func(ctx context.Context) error { calls.Add(1); return nil }})
	c, err := api.NewFailoverClient([]string{"http://127.0.0.1:1", second.url}, api.ClientConfig{})
	require.NoError(t, err)
	err = c.Leave(context.Background())
	require.ErrorIs(t, err, lock.ErrUnavailable)
	assert.Zero(t, calls.Load(), "the second endpoint was not asked to leave")
}
