package apiserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster/clustertest"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

func TestConsoleFilesNeedNoTokenButItsDataDoes(t *testing.T) {
	n := newTestNode(t, Config{Token: testToken})
	for _, path := range []string{"/ui/", "/ui/console.js", "/ui/console.css"} {
		resp, err := http.Get(n.url + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'", path)
		assert.NotEmpty(t, body, path)
	}
	resp, err := http.Get(n.url + "/ui/")
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	assert.Contains(t, string(page), `<script src="console.js"`)
	assert.NotContains(t, string(page), "http://", "the page loads nothing from elsewhere")
	assert.NotContains(t, string(page), "https://", "the page loads nothing from elsewhere")

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.Get(n.url + "/ui")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
	assert.Equal(t, "ui/", resp.Header.Get("Location"), "relative: it stays under a prefix")

	missing := rawRequest(t, n, "GET", "/ui/nothing.js", "", nil)
	assert.Equal(t, http.StatusNotFound, missing.status)
	assert.Equal(t, api.CodeNotFound, missing.errorCode())

	post := rawRequest(t, n, "POST", "/ui/", "{}", map[string]string{"Content-Type": "application/json"})
	assert.Equal(t, http.StatusMethodNotAllowed, post.status)

	for _, path := range []string{"/v1/events", "/v1/whoami"} {
		a := rawRequest(t, n, "GET", path, "", nil)
		assert.Equal(t, http.StatusUnauthorized, a.status, path)
	}
}

// Under a prefix (http.StripPrefix), the console's page, its redirect and
// every API address it asks for stay under the prefix: the page names the
// API relative to itself, never from the root.
func TestConsoleUnderAPrefix(t *testing.T) {
	h := NewHandler(memstore.New(), Config{Token: testToken})
	mux := http.NewServeMux()
	mux.Handle("/raftlock/", http.StripPrefix("/raftlock", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/raftlock/ui") // follows the redirect
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "/raftlock/ui/", resp.Request.URL.Path, "redirected below the prefix")

	script, err := http.Get(srv.URL + "/raftlock/ui/console.js")
	require.NoError(t, err)
	js, _ := io.ReadAll(script.Body)
	script.Body.Close()
	require.Equal(t, http.StatusOK, script.StatusCode)
	base := resp.Request.URL
	apiCalls := regexp.MustCompile(`(?:fetch\(|href=)["']([^"']+)["']`)
	found := 0
	for _, m := range apiCalls.FindAllStringSubmatch(string(page)+string(js), -1) {
		ref := m[1]
		if !strings.Contains(ref, "v1/") {
			continue
		}
		found++
		u, err := base.Parse(ref)
		require.NoError(t, err, ref)
		assert.True(t, strings.HasPrefix(u.Path, "/raftlock/v1/"), "%s resolves to %s, outside the prefix", ref, u.Path)
	}
	assert.GreaterOrEqual(t, found, 6, "the page's API addresses (events, whoami, inspect, waiters, force-release, openapi)")

	whoami, err := http.NewRequest("GET", srv.URL+"/raftlock/v1/whoami", nil)
	require.NoError(t, err)
	whoami.Header.Set(api.TokenHeader, testToken)
	got, err := http.DefaultClient.Do(whoami)
	require.NoError(t, err)
	got.Body.Close()
	assert.Equal(t, http.StatusOK, got.StatusCode, "the API under the prefix")
}

// readEvent reads the next "data:" event of a /v1/events stream.
func readEvent(t *testing.T, r *bufio.Reader) api.ConsoleEvent {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var ev api.ConsoleEvent
			require.NoError(t, json.Unmarshal([]byte(data), &ev), data)
			return ev
		}
	}
}

func openEvents(t *testing.T, n *testNode, query string) *bufio.Reader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", n.url+"/v1/events"+query, nil)
	require.NoError(t, err)
	req.Header.Set(api.TokenHeader, n.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	return bufio.NewReader(resp.Body)
}

func TestEventStreamShowsLocksAndTheirRelease(t *testing.T) {
	fc := &fakeCluster{}
	fc.set(leaderStatus())
	n := newTestNode(t, Config{Token: testToken, Cluster: fc})
	ctx := context.Background()
	owner := lock.NewOwner()
	_, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: "billing/invoice-42", Owner: owner, TTL: time.Minute})
	require.NoError(t, err)
	_, err = n.client.Acquire(ctx, lock.AcquireRequest{Key: "other", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)

	events := openEvents(t, n, "?prefix=billing/")
	ev := readEvent(t, events)
	require.NotNil(t, ev.Cluster)
	assert.Equal(t, "n2", ev.Cluster.LeaderID)
	assert.Len(t, ev.Cluster.Members, 3)
	require.Len(t, ev.Locks.Locks, 1, "only the prefix's locks")
	assert.Equal(t, "billing/invoice-42", ev.Locks.Locks[0].Key)
	assert.Positive(t, ev.Locks.Locks[0].Token)

	released, err := n.client.Release(ctx, "billing/invoice-42", owner)
	require.NoError(t, err)
	require.True(t, released)
	// The stream sends once a second; the release shows within a few events.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ev = readEvent(t, events)
		if len(ev.Locks.Locks) == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the release never showed in the stream")
	}
	assert.Nil(t, ev.LocksError)
}

func TestEventStreamRejectsUnknownParameters(t *testing.T) {
	n := newTestNode(t, Config{})
	a := n.do(t, "GET", "/v1/events?prefx=a", "")
	assert.Equal(t, http.StatusBadRequest, a.status)
	assert.Contains(t, a.raw, "prefx")
}

func TestServerShutdownEndsEventStreams(t *testing.T) {
	h := NewHandler(memstore.New(), Config{})
	ln := listenLocal(t)
	srv := NewServer(ln.Addr().String(), h)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	resp, err := http.Get("http://" + ln.Addr().String() + "/v1/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	readEvent(t, r)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx), "Shutdown waited for the stream until its deadline")
	_, err = io.ReadAll(r)
	assert.NoError(t, err, "the stream ended cleanly")
}

func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

func TestConsoleHistorySamplesRates(t *testing.T) {
	fc := &fakeCluster{}
	st := leaderStatus()
	fc.set(st)
	var ops uint64
	c := newConsole(fc, func() uint64 { return ops })
	start := time.Unix(1000, 0)
	c.mu.Lock()
	c.sampleLocked(start) // the baseline: no sample yet
	st.Commit = api.Timing{Count: st.Commit.Count + 50, Total: st.Commit.Total + 50*2*time.Millisecond}
	st.Apply = api.Timing{Count: st.Apply.Count + 60, Total: st.Apply.Total}
	fc.set(st)
	ops = 7
	c.sampleLocked(start.Add(time.Second))
	c.sampleLocked(start.Add(10 * time.Second)) // after a pause: a new baseline, no sample
	c.sampleLocked(start.Add(11 * time.Second))
	c.mu.Unlock()

	h := c.history()
	require.Len(t, h, 2)
	assert.Equal(t, api.ConsoleSample{TimeMS: start.Add(time.Second).UnixMilli(), Applied: 60, Commits: 50, CommitMeanUS: 2000, Ops: 7}, h[0])
	assert.Equal(t, api.ConsoleSample{TimeMS: start.Add(11 * time.Second).UnixMilli()}, h[1])

	c.mu.Lock()
	for i := range consoleHistory + 5 {
		c.sampleLocked(start.Add(time.Duration(12+i) * time.Second))
	}
	c.mu.Unlock()
	h = c.history()
	require.Len(t, h, consoleHistory, "the ring keeps the last minutes only")
	for i := 1; i < len(h); i++ {
		assert.Less(t, h[i-1].TimeMS, h[i].TimeMS, "oldest first")
	}
	assert.Equal(t, start.Add(time.Duration(12+consoleHistory+4)*time.Second).UnixMilli(), h[len(h)-1].TimeMS)
}

func TestConsolePageMayPostToItsOwnNode(t *testing.T) {
	n := newTestNode(t, Config{})
	origin := n.url // what a browser sends for a page loaded from this node
	a := rawRequest(t, n, "POST", "/v1/acquire", `{"key":"k","ttl":"5s"}`,
		map[string]string{"Origin": origin, "Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"})
	assert.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Empty(t, a.header.Get("Access-Control-Allow-Origin"), "no CORS for the node's own page")

	other := rawRequest(t, n, "POST", "/v1/acquire", `{"key":"k2","ttl":"5s"}`,
		map[string]string{"Origin": "http://evil.example", "Content-Type": "application/json"})
	assert.Equal(t, http.StatusForbidden, other.status)
	assert.Equal(t, api.CodeOriginNotAllowed, other.errorCode())

	rebound := rawRequest(t, n, "POST", "/v1/acquire", `{"key":"k3","ttl":"5s"}`,
		map[string]string{"Host": "evil.example", "Origin": "http://evil.example", "Content-Type": "application/json"})
	assert.Equal(t, http.StatusForbidden, rebound.status, "a rebinding page is its own origin, and its Host is refused first")
	assert.Equal(t, api.CodeHostNotAllowed, rebound.errorCode())
}

func TestConsoleListsLocksWithoutALeader(t *testing.T) {
	c := clustertest.Start(t, 3, nil)
	survivor := c.Follower(t)
	n := newTestNodeOver(t, survivor, Config{}, nil)
	ctx := context.Background()
	_, err := survivor.Acquire(ctx, lock.AcquireRequest{Key: "billing/invoice-42", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		locks, err := survivor.ListStale(lock.ListRequest{})
		return err == nil && len(locks) == 1
	}, 10*time.Second, 5*time.Millisecond, "the follower applies the grant")
	for _, other := range c.Nodes {
		if other != survivor {
			require.NoError(t, other.Close())
		}
	}
	require.Eventually(t, func() bool { id, _ := survivor.Leader(); return id == "" }, 30*time.Second, 10*time.Millisecond,
		"alone, the follower loses its leader")

	ev := readEvent(t, openEvents(t, n, ""))
	assert.Nil(t, ev.LocksError, "the console still lists without a leader")
	assert.True(t, ev.LocksStale)
	require.Len(t, ev.Locks.Locks, 1)
	assert.Equal(t, "billing/invoice-42", ev.Locks.Locks[0].Key)
	require.NotNil(t, ev.Cluster)
	assert.Empty(t, ev.Cluster.LeaderID)
}

func TestConsoleAndDebugRoutesFollowTheTokensRights(t *testing.T) {
	const readerSecret = "reader-secret-0123456789"
	tokens, err := NewTokens([]Token{{Name: "billing-reader", Secret: readerSecret,
		Rules: []api.TokenRule{{Prefix: "billing/", Right: api.RightRead}}}})
	require.NoError(t, err)
	ring := NewLogRing(10)
	n := newTestNode(t, Config{Token: testToken, Tokens: tokens, EnablePprof: true, RecentLogs: ring,
		AgentConfig: func() any { return map[string]string{} }})
	ctx := context.Background()
	for _, key := range []string{"billing/invoice-42", "jobs/nightly"} {
		_, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: lock.NewOwner(), TTL: time.Minute})
		require.NoError(t, err)
	}

	n.token = readerSecret
	ev := readEvent(t, openEvents(t, n, ""))
	require.Len(t, ev.Locks.Locks, 1, "the reader sees the keys it may read, and only those")
	assert.Equal(t, "billing/invoice-42", ev.Locks.Locks[0].Key)
	ev = readEvent(t, openEvents(t, n, "?prefix=jobs/"))
	assert.Empty(t, ev.Locks.Locks)
	require.NotNil(t, ev.LocksError)
	assert.Equal(t, api.CodePermissionDenied, ev.LocksError.Code)

	assert.Equal(t, api.CodeNotImplemented, n.do(t, "GET", "/v1/waiters?key=billing/invoice-42", "").errorCode(), "allowed, on a store that cannot tell")
	assert.Equal(t, api.CodePermissionDenied, n.do(t, "GET", "/v1/waiters?key=jobs/nightly", "").errorCode())
	for _, path := range []string{"/v1/agent/config", "/v1/agent/logs", "/debug/pprof/goroutine?debug=1"} {
		a := n.do(t, "GET", path, "")
		assert.Equal(t, http.StatusForbidden, a.status, path)
		assert.Equal(t, api.CodePermissionDenied, a.errorCode(), path)
	}

	n.token = testToken // the shared token may do everything
	for _, path := range []string{"/v1/agent/config", "/v1/agent/logs"} {
		assert.Equal(t, http.StatusOK, n.do(t, "GET", path, "").status, path)
	}
	status, _ := getRaw(t, n.url+"/debug/pprof/goroutine?debug=1", testToken)
	assert.Equal(t, http.StatusOK, status)
}
