package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// testNode is a Handler over a fresh memory store, served on 127.0.0.1.
type testNode struct {
	store   *memstore.Store
	handler *Handler
	url     string
	server  *httptest.Server
	client  *api.Client // with the node's token, if it has one
	token   string      // Config.Token: do and send present it
}

func newTestNode(t testing.TB, cfg Config) *testNode {
	t.Helper()
	store := memstore.New()
	return newTestNodeOver(t, store, cfg, func() { _ = store.Close() })
}

// newTestNodeOver serves store; closeStore (may be nil) runs before the
// server closes, so that long-polls still parked in the store end and the
// server's Close does not wait for them.
func newTestNodeOver(t testing.TB, store lock.Store, cfg Config, closeStore func()) *testNode {
	t.Helper()
	h := NewHandler(store, cfg)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	if closeStore != nil {
		t.Cleanup(closeStore)
	}
	c, err := api.NewClient(srv.URL, api.ClientConfig{Token: cfg.Token})
	require.NoError(t, err)
	n := &testNode{handler: h, url: srv.URL, server: srv, client: c, token: cfg.Token}
	n.store, _ = store.(*memstore.Store)
	return n
}

// answer is a decoded JSON answer, with the status.
type answer struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

// errorCode is the answer's error code, "" when it is not an error answer.
func (a answer) errorCode() string {
	e, _ := a.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func (a answer) errorField(name string) any {
	e, _ := a.body["error"].(map[string]any)
	return e[name]
}

// do sends a raw request, for the tests that check the wire itself.
func (n *testNode) do(t testing.TB, method, path, body string) answer {
	t.Helper()
	a, err := n.send(context.Background(), method, path, body)
	require.NoError(t, err)
	return a
}

// send is do for other goroutines than the test's: it reports instead of failing.
func (n *testNode) send(ctx context.Context, method, path, body string) (answer, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.url+path, rd)
	if err != nil {
		return answer{}, err
	}
	if n.token != "" {
		req.Header.Set("Authorization", "Bearer "+n.token)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json") // as curl --json does
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	return decodeAnswer(resp)
}

// decodeAnswer reads resp, which must be JSON.
func decodeAnswer(resp *http.Response) (answer, error) {
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		return a, fmt.Errorf("answer is %q, not JSON: %s", ct, raw)
	}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		return a, fmt.Errorf("answer is not a JSON object: %w: %s", err, raw)
	}
	return a, nil
}

// fakeCluster is a Cluster whose status the test sets.
type fakeCluster struct {
	mu sync.Mutex // protects st
	st api.ClusterStatus
}

func (f *fakeCluster) Status() api.ClusterStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *fakeCluster) set(st api.ClusterStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
}

func leaderStatus() api.ClusterStatus {
	return api.ClusterStatus{
		NodeID:     "n1",
		Role:       api.RoleFollower,
		LeaderID:   "n2",
		LeaderAddr: "127.0.0.1:7002",
		Members: []api.Member{
			{ID: "n1", Address: "127.0.0.1:7001", Suffrage: api.SuffrageVoter},
			{ID: "n2", Address: "127.0.0.1:7002", APIAddr: "127.0.0.1:8002", Suffrage: api.SuffrageVoter, Leader: true},
			{ID: "n3", Address: "127.0.0.1:7003", Suffrage: api.SuffrageNonvoter},
		},
		Term:          7,
		CommitIndex:   120,
		AppliedIndex:  118,
		LeaderChanges: 3,
		Commit:        api.Timing{Count: 100, Total: 250_000_000},
		Apply:         api.Timing{Count: 100, Total: 50_000_000},
		Freeze:        api.Timing{Count: 3, Total: 30_000_000},
		Locks:         &api.LockStats{Held: 4, Waiters: 2, Handoffs: 9, Expired: 5},
		Raft:          map[string]string{"state": "Follower", "term": "7"},
	}
}
