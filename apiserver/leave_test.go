package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
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

// Leave takes no fields, as every POST takes only its own: a body the
// route does not take, or one over the body limit, is refused and the node
// stays; no body, or {}, is a leave.
func TestLeaveRefusesABodyItDoesNotTake(t *testing.T) {
	var calls atomic.Int32
	n := newTestNode(t, Config{Leave: func(ctx context.Context) error { calls.Add(1); return nil }})
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"an unknown field", `{"garbage":true}`, http.StatusBadRequest, api.CodeBadRequest},
		{"not an object", `[1]`, http.StatusBadRequest, api.CodeBadRequest},
		{"over the limit", `{"a":"` + strings.Repeat("x", 10<<20) + `"}`, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := n.do(t, http.MethodPost, "/v1/leave", tc.body)
			assert.Equal(t, tc.status, a.status, a.raw)
			assert.Equal(t, tc.code, a.errorCode())
			assert.Zero(t, calls.Load(), "the node left")
		})
	}
	a := n.do(t, http.MethodPost, "/v1/leave", `{"garbage":true}`)
	assert.Contains(t, a.errorField("message"), "takes no fields")
	assert.Equal(t, http.StatusOK, n.do(t, http.MethodPost, "/v1/leave", ` {} `).status)
	assert.Equal(t, http.StatusOK, n.do(t, http.MethodPost, "/v1/leave", "").status)
	assert.Equal(t, int32(2), calls.Load())
}

// A leave is audited as a force-release is: asked, denied and done are
// logged with the caller's token name and remote address.
func TestLeaveIsAudited(t *testing.T) {
	logs := &lockedBuffer{}
	cfg := Config{Token: testToken, Tokens: testTokens(t), Leave: func(ctx context.Context) error { return nil },
		Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})}
	n := newTestNode(t, cfg)
	assert.Equal(t, http.StatusForbidden, n.as(t, secretLocker, http.MethodPost, "/v1/leave", "").status)
	assert.Equal(t, http.StatusOK, n.as(t, secretRoot, http.MethodPost, "/v1/leave", "").status)
	lines := map[string]string{}
	for _, l := range strings.Split(logs.String(), "\n") {
		for _, what := range []string{"leave: denied", "leave: asked", "leave: left the cluster"} {
			if strings.Contains(l, what) {
				lines[what] = l
			}
		}
	}
	for what, caller := range map[string]string{"leave: denied": "jobs-locker", "leave: asked": "root", "leave: left the cluster": "root"} {
		require.Contains(t, lines, what, "no audit line in %q", logs.String())
		assert.Contains(t, lines[what], "caller="+caller, what)
		assert.Contains(t, lines[what], "remote=127.0.0.1:", what)
	}
}
