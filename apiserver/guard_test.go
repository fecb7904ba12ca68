package apiserver

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// rawRequest sends a request built by the test, headers and all, and
// decodes the JSON answer (a preflight's 204 has no body).
func rawRequest(t *testing.T, n *testNode, method, path, body string, header map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, n.url+path, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return answer{status: resp.StatusCode, header: resp.Header}
	}
	a, err := decodeAnswer(resp)
	require.NoError(t, err)
	return a
}

const acquireBody = `{"key":"k","ttl":"30s"}`

// A web page's "simple" request (no preflight) cannot take a lock: its
// Content-Type is text/plain, and it says where it comes from.
func TestGuardRefusesBrowserSimpleRequest(t *testing.T) {
	n := newTestNode(t, Config{})
	cases := []struct {
		name   string
		header map[string]string
		status int
		code   string
	}{
		{"text/plain from evil origin", map[string]string{"Content-Type": "text/plain;charset=UTF-8", "Origin": "https://evil.example"}, 403, api.CodeOriginNotAllowed},
		{"text/plain without origin", map[string]string{"Content-Type": "text/plain;charset=UTF-8"}, 415, api.CodeUnsupportedMedia},
		{"form type", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, api.CodeUnsupportedMedia},
		{"multipart", map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, 415, api.CodeUnsupportedMedia},
		{"no content type", map[string]string{}, 415, api.CodeUnsupportedMedia},
		{"json in another charset", map[string]string{"Content-Type": "application/json; charset=latin1"}, 415, api.CodeUnsupportedMedia},
		{"json from evil origin", map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, 403, api.CodeOriginNotAllowed},
		{"null origin (sandboxed page)", map[string]string{"Content-Type": "application/json", "Origin": "null"}, 403, api.CodeOriginNotAllowed},
		{"cross-site without origin", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403, api.CodeOriginNotAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := rawRequest(t, n, http.MethodPost, "/v1/acquire", acquireBody, tc.header)
			assert.Equal(t, tc.status, a.status, a.raw)
			assert.Equal(t, tc.code, a.errorCode(), a.raw)
		})
	}
	info, err := n.store.Inspect(context.Background(), "k")
	require.NoError(t, err)
	assert.False(t, info.Locked, "a refused request took the lock")
}

// A read from a page of another origin is refused too, GET included, and
// so is a leave, which has no body.
func TestGuardRefusesOtherRoutesFromPages(t *testing.T) {
	n := newTestNode(t, Config{Leave: func(context.Context) error { t.Error("leave called"); return nil }})
	evil := map[string]string{"Origin": "http://evil.example"}
	assert.Equal(t, api.CodeOriginNotAllowed, rawRequest(t, n, http.MethodGet, "/v1/locks", "", evil).errorCode())
	assert.Equal(t, api.CodeOriginNotAllowed, rawRequest(t, n, http.MethodGet, "/healthz", "", evil).errorCode())
	assert.Equal(t, api.CodeUnsupportedMedia, rawRequest(t, n, http.MethodPost, "/v1/leave", "", nil).errorCode())
	assert.Equal(t, api.CodeUnsupportedMedia, rawRequest(t, n, http.MethodPost, "/v1/leave", "", map[string]string{"Content-Type": "text/plain"}).errorCode())
	assert.Equal(t, api.CodeOriginNotAllowed, rawRequest(t, n, http.MethodPost, "/v1/leave", "", map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"}).errorCode())
}

// DNS rebinding: the attacker's name resolves to the node, and the Host
// header carries it.
func TestGuardRefusesForeignHost(t *testing.T) {
	n := newTestNode(t, Config{AllowedHosts: []string{"locks.example.com"}})
	json := map[string]string{"Content-Type": "application/json"}
	for _, host := range []string{"evil.example", "evil.example:7070", "localhost.evil.example", "127.0.0.1.nip.io"} {
		a := rawRequest(t, n, http.MethodGet, "/v1/locks", "", map[string]string{"Host": host})
		assert.Equal(t, http.StatusForbidden, a.status, host)
		assert.Equal(t, api.CodeHostNotAllowed, a.errorCode(), host)
		a = rawRequest(t, n, http.MethodPost, "/v1/acquire", acquireBody, map[string]string{"Host": host, "Content-Type": "application/json"})
		assert.Equal(t, api.CodeHostNotAllowed, a.errorCode(), host)
	}
	for _, host := range []string{"locks.example.com", "LOCKS.example.com.:443", "localhost:7070", "127.0.0.1", "10.1.2.3:7070", "[::1]:7070", "[fe80::1%25eth0]:80"} {
		a := rawRequest(t, n, http.MethodPost, "/v1/acquire", `{"key":"k","ttl":"30s","owner":"0123456789abcdef0123456789abcdef"}`, map[string]string{"Host": host, "Content-Type": json["Content-Type"]})
		assert.Equal(t, http.StatusOK, a.status, "%s: %s", host, a.raw)
	}
	wildcard := newTestNode(t, Config{AllowedHosts: []string{"*"}})
	a := rawRequest(t, wildcard, http.MethodGet, "/v1/locks", "", map[string]string{"Host": "anything.example"})
	assert.Equal(t, http.StatusOK, a.status, a.raw)
}

// What programs send still works: curl --json (or -H), the Go client, and
// probes of /healthz and /metrics by IP.
func TestGuardLetsProgramsThrough(t *testing.T) {
	n := newTestNode(t, Config{Leave: func(context.Context) error { return nil }})
	a := rawRequest(t, n, http.MethodPost, "/v1/acquire", acquireBody,
		map[string]string{"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "curl/8.5.0"})
	require.Equal(t, http.StatusOK, a.status, a.raw)
	a = rawRequest(t, n, http.MethodPost, "/v1/release", `{"key":"k","owner":"`+a.body["owner"].(string)+`"}`,
		map[string]string{"Content-Type": "application/json; charset=utf-8"})
	assert.Equal(t, http.StatusOK, a.status, a.raw)
	for _, path := range []string{"/healthz", "/metrics"} {
		req, err := http.NewRequest(http.MethodGet, n.url+path, nil)
		require.NoError(t, err)
		req.Host = "10.0.0.7:7070" // a kubelet or load balancer probing the pod IP
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
	}

	ctx := context.Background()
	lease, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: "go", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	assert.NotZero(t, lease.Token)
	require.NoError(t, n.client.Leave(ctx), "a bodiless POST from the Go client")
}

// An allowed origin's page may call the API: its preflight is answered, and
// answers carry the CORS headers the browser needs.
func TestGuardAllowedOrigin(t *testing.T) {
	const origin = "https://ops.example.com"
	n := newTestNode(t, Config{AllowedOrigins: []string{origin + "/"}})
	pre := rawRequest(t, n, http.MethodOptions, "/v1/acquire", "", map[string]string{
		"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type",
	})
	require.Equal(t, http.StatusNoContent, pre.status)
	assert.Equal(t, origin, pre.header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, pre.header.Get("Access-Control-Allow-Methods"), "POST")
	assert.Contains(t, pre.header.Get("Access-Control-Allow-Headers"), "Content-Type")

	a := rawRequest(t, n, http.MethodPost, "/v1/acquire", acquireBody, map[string]string{"Origin": origin, "Content-Type": "application/json"})
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, origin, a.header.Get("Access-Control-Allow-Origin"))
	// Allowed, its page still cannot skip the preflight with text/plain.
	a = rawRequest(t, n, http.MethodPost, "/v1/acquire", acquireBody, map[string]string{"Origin": origin, "Content-Type": "text/plain"})
	assert.Equal(t, api.CodeUnsupportedMedia, a.errorCode())

	other := rawRequest(t, n, http.MethodOptions, "/v1/acquire", "", map[string]string{"Origin": "https://ops.example.com:8443", "Access-Control-Request-Method": "POST"})
	assert.Equal(t, api.CodeOriginNotAllowed, other.errorCode())
	assert.Empty(t, other.header.Get("Access-Control-Allow-Origin"))
}

// The Go client reports the guard's refusals as api.ErrForbidden.
func TestGuardClientError(t *testing.T) {
	n := newTestNode(t, Config{})
	c, err := api.NewClient(n.url, api.ClientConfig{HTTPClient: &http.Client{Transport: hostRewriter{"evil.example"}}})
	require.NoError(t, err)
	_, err = c.Inspect(context.Background(), "k")
	assert.ErrorIs(t, err, api.ErrForbidden)
	assert.ErrorContains(t, err, "-allowed-hosts")
}

type hostRewriter struct{ host string }

func (h hostRewriter) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Host = h.host
	return http.DefaultTransport.RoundTrip(r)
}

func TestValidateAllowed(t *testing.T) {
	for _, ok := range []string{"https://ops.example.com", "http://localhost:3000", "https://ops.example.com/"} {
		assert.NoError(t, ValidateAllowedOrigin(ok), ok)
	}
	for _, bad := range []string{"", "ops.example.com", "https://ops.example.com/app", "https://", "*"} {
		assert.Error(t, ValidateAllowedOrigin(bad), bad)
	}
	for _, ok := range []string{"*", "locks.example.com", "locks.example.com:7070", "https://locks.example.com:8443"} {
		assert.NoError(t, ValidateAllowedHost(ok), ok)
	}
	for _, bad := range []string{"", "a b", "*.example.com"} {
		assert.Error(t, ValidateAllowedHost(bad), bad)
	}
}
