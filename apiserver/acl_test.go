package apiserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// Secrets of the test tokens: long enough, and distinct.
const (
	secretRoot    = "root-secret-0123456789abcdef"
	secretAdmin   = "admin-secret-0123456789abcdef"
	secretLocker  = "locker-secret-0123456789abcdef"
	secretReader  = "reader-secret-0123456789abcdef"
	secretNothing = "nothing-secret-0123456789abcdef"
	secretMixed   = "mixed-secret-0123456789abcdef"
)

// testTokens: one token per right on "jobs/", one with every right, one
// with none, and one that reads "a/" but not "a/secret/".
func testTokens(t *testing.T) *Tokens {
	t.Helper()
	tokens, err := NewTokens([]Token{
		{Name: "root", Secret: secretRoot, Rules: []api.TokenRule{{Prefix: "", Right: "admin"}}},
		{Name: "jobs-admin", Secret: secretAdmin, Rules: []api.TokenRule{{Prefix: "jobs/", Right: "admin"}}},
		{Name: "jobs-locker", Secret: secretLocker, Rules: []api.TokenRule{{Prefix: "jobs/", Right: "lock"}, {Prefix: "", Right: "read"}}},
		{Name: "jobs-reader", Secret: secretReader, Rules: []api.TokenRule{{Prefix: "jobs/", Right: "read"}}},
		{Name: "nothing", Secret: secretNothing, Rules: []api.TokenRule{}},
		{Name: "mixed", Secret: secretMixed, Rules: []api.TokenRule{
			{Prefix: "a/", Right: "read"}, {Prefix: "a/secret/", Right: "deny"}, {Prefix: "a/secret/open", Right: "lock"},
		}},
	})
	require.NoError(t, err)
	return tokens
}

func newACLNode(t *testing.T, logs *lockedBuffer) *testNode {
	t.Helper()
	cfg := Config{Token: testToken, Tokens: testTokens(t)}
	if logs != nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace})
	}
	return newTestNode(t, cfg)
}

// as sends a request with secret.
func (n *testNode) as(t *testing.T, secret, method, path, body string) answer {
	t.Helper()
	return n.sendWith(t, method, path, body, http.Header{"Authorization": {"Bearer " + secret}})
}

func TestRightsPerRoute(t *testing.T) {
	owner := "0123456789abcdef0123456789abcdef"
	routes := []struct {
		name, method, path, body string
		need                     string // the right it needs on "jobs/x" (or "" for leave)
	}{
		{"acquire", "POST", "/v1/acquire", `{"key":"jobs/x","ttl":"30s"}`, "lock"},
		{"release", "POST", "/v1/release", `{"key":"jobs/x","owner":"` + owner + `"}`, "lock"},
		{"extend", "POST", "/v1/extend", `{"key":"jobs/x","owner":"` + owner + `","ttl":"1s"}`, "lock"},
		{"inspect", "GET", "/v1/inspect?key=jobs%2Fx", "", "read"},
		{"list", "GET", "/v1/locks?prefix=jobs%2F", "", "read"},
		{"force-release", "POST", "/v1/force-release", `{"key":"jobs/x"}`, "admin"},
		{"leave", "POST", "/v1/leave", "", "admin"},
	}
	tokens := []struct {
		name, secret string
		has          map[string]bool // rights on jobs/x
		onAll        bool            // admin on ""
	}{
		{"root", secretRoot, map[string]bool{"read": true, "lock": true, "admin": true}, true},
		{"jobs-admin", secretAdmin, map[string]bool{"read": true, "lock": true, "admin": true}, false},
		{"jobs-locker", secretLocker, map[string]bool{"read": true, "lock": true}, false},
		{"jobs-reader", secretReader, map[string]bool{"read": true}, false},
		{"nothing", secretNothing, map[string]bool{}, false},
		{"shared", testToken, map[string]bool{"read": true, "lock": true, "admin": true}, true},
	}
	n := newACLNode(t, nil)
	for _, rt := range routes {
		for _, tok := range tokens {
			allowed := tok.has[rt.need]
			if rt.name == "leave" {
				allowed = tok.onAll
			}
			t.Run(rt.name+"/"+tok.name, func(t *testing.T) {
				a := n.as(t, tok.secret, rt.method, rt.path, rt.body)
				if allowed {
					assert.NotEqual(t, http.StatusForbidden, a.status, a.raw)
					assert.NotEqual(t, http.StatusUnauthorized, a.status, a.raw)
					return
				}
				assert.Equal(t, http.StatusForbidden, a.status, a.raw)
				assert.Equal(t, api.CodePermissionDenied, a.errorCode())
				msg, _ := a.errorField("message").(string)
				assert.Contains(t, msg, fmt.Sprintf("token %q", tok.name))
				assert.Contains(t, msg, "the "+rt.need+" right")
				if rt.name == "leave" {
					assert.Contains(t, msg, `on ""`)
				} else {
					assert.Contains(t, msg, `"jobs/`)
				}
				assert.NotContains(t, a.raw, tok.secret)
			})
		}
	}
	// Routes that name no key need a known token and nothing more.
	status := func(secret, path string) int {
		req, err := http.NewRequest(http.MethodGet, n.url+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/v1/whoami", "/metrics", "/v1/cluster"} {
		assert.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, status(secretNothing, path), path)
		assert.Equal(t, http.StatusUnauthorized, status("unknown-secret-0123456789abcdef", path), path)
	}
}

func TestDenialChangesNothing(t *testing.T) {
	n := newACLNode(t, nil)
	ctx := context.Background()
	owner := lock.NewOwner()
	lease, err := n.store.Acquire(ctx, lock.AcquireRequest{Key: "jobs/held", Owner: owner, TTL: time.Minute})
	require.NoError(t, err)
	for _, c := range []struct{ secret, path, body string }{
		{secretReader, "/v1/release", `{"key":"jobs/held","owner":"` + owner.String() + `"}`},
		{secretReader, "/v1/extend", `{"key":"jobs/held","owner":"` + owner.String() + `","ttl":"1ms"}`},
		{secretLocker, "/v1/force-release", `{"key":"jobs/held"}`},
		{secretReader, "/v1/acquire", `{"key":"jobs/free","ttl":"1m"}`},
	} {
		a := n.as(t, c.secret, "POST", c.path, c.body)
		require.Equal(t, http.StatusForbidden, a.status, a.raw)
	}
	info, err := n.store.Inspect(ctx, "jobs/held")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, lease.Token, info.Token)
	assert.Greater(t, info.Remaining, 30*time.Second, "the extend to 1ms did not happen")
	info, err = n.store.Inspect(ctx, "jobs/free")
	require.NoError(t, err)
	assert.False(t, info.Locked)
}

func TestBadInputBeforeRights(t *testing.T) {
	// A malformed request is 400 whoever sends it: the rights are checked
	// on a valid key.
	n := newACLNode(t, nil)
	a := n.as(t, secretNothing, "POST", "/v1/force-release", `{"key":""}`)
	assert.Equal(t, http.StatusBadRequest, a.status, a.raw)
	assert.Equal(t, api.CodeInvalidKey, a.errorCode())
	a = n.as(t, secretNothing, "POST", "/v1/force-release", `{"key":"k","owner":"x"}`)
	assert.Equal(t, http.StatusBadRequest, a.status, a.raw)
	assert.Equal(t, "owner", a.errorField("field"), "unknown field named")
	a = n.as(t, secretNothing, "GET", "/v1/inspect?key=", "")
	assert.Equal(t, http.StatusBadRequest, a.status, a.raw)

	// Every bad force-release body, from a token that may do it: a clear
	// 400 naming what is wrong, and nothing done.
	ctx := context.Background()
	_, err := n.store.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	for _, c := range []struct{ body, code, msg string }{
		{`{}`, api.CodeInvalidKey, "key is required"},
		{`{"key":"k","key_b64":"aw=="}`, api.CodeInvalidKey, "not both"},
		{`{"key":"` + strings.Repeat("k", lock.MaxKeyLen+1) + `"}`, api.CodeInvalidKey, "longer than"},
		{`{"key_b64":"!!"}`, api.CodeInvalidKey, "key_b64"},
		{`{"key":"k"`, api.CodeBadRequest, ""},
		{`{"key":"k","Key":"k"}`, api.CodeBadRequest, ""},
		{`["k"]`, api.CodeBadRequest, ""},
	} {
		a := n.as(t, testToken, "POST", "/v1/force-release", c.body)
		assert.Equal(t, http.StatusBadRequest, a.status, "%s: %s", c.body, a.raw)
		assert.Equal(t, c.code, a.errorCode(), c.body)
		assert.Contains(t, a.errorField("message"), c.msg, c.body)
	}
	info, err := n.store.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked, "no bad request released anything")
	a = n.as(t, testToken, "GET", "/v1/force-release", "")
	assert.Equal(t, http.StatusMethodNotAllowed, a.status)
	assert.Equal(t, "POST", a.header.Get("Allow"))
	a = n.as(t, testToken, "POST", "/v1/whoami", "")
	assert.Equal(t, http.StatusMethodNotAllowed, a.status)
}

func TestListShowsOnlyReadableKeys(t *testing.T) {
	n := newACLNode(t, nil)
	ctx := context.Background()
	keys := []string{"a/1", "a/2", "a/secret/1", "a/secret/2", "a/secret/open", "a/z", "b/1", "jobs/1"}
	for _, k := range keys {
		_, err := n.store.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: time.Minute})
		require.NoError(t, err)
	}
	client := func(secret string) *api.Client {
		c, err := api.NewClient(n.url, api.ClientConfig{Token: secret})
		require.NoError(t, err)
		return c
	}
	names := func(infos []lock.LockInfo) []string {
		var out []string
		for _, i := range infos {
			out = append(out, i.Key)
		}
		return out
	}
	mixed := client(secretMixed)
	readable := []string{"a/1", "a/2", "a/secret/open", "a/z"}
	all, err := mixed.List(ctx, lock.ListRequest{})
	require.NoError(t, err)
	assert.Equal(t, readable, names(all))
	for limit := 1; limit <= 5; limit++ {
		got, err := mixed.List(ctx, lock.ListRequest{Prefix: "a/", Limit: limit})
		require.NoError(t, err)
		assert.Equal(t, readable[:min(limit, len(readable))], names(got), "limit %d", limit)
	}
	// Raw pages of one lock: each says whether more readable ones follow.
	a := n.as(t, secretMixed, "GET", "/v1/locks?prefix=a%2F&after=a%2Fsecret%2Fopen&limit=1", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, false, a.body["more"], a.raw)
	a = n.as(t, secretMixed, "GET", "/v1/locks?prefix=a%2F&after=a%2F2&limit=1", "")
	assert.Equal(t, true, a.body["more"], a.raw)
	assert.Contains(t, a.raw, `"a/secret/open"`)

	// A prefix with nothing readable is a denial, not an empty list.
	for _, prefix := range []string{"b%2F", "a%2Fsecret%2F1"} {
		a := n.as(t, secretMixed, "GET", "/v1/locks?prefix="+prefix, "")
		assert.Equal(t, http.StatusForbidden, a.status, a.raw)
		assert.Equal(t, api.CodePermissionDenied, a.errorCode())
	}
	_, err = mixed.List(ctx, lock.ListRequest{Prefix: "b/"})
	assert.ErrorIs(t, err, api.ErrPermissionDenied)

	// A scan that runs out of budget says where to go on, and the client
	// follows it. (Pages of one key, and a budget of two.)
	old := maxListScan
	maxListScan = 2
	t.Cleanup(func() { maxListScan = old })
	small := newTestNode(t, Config{Tokens: testTokens(t), ListPageSize: 1})
	for _, k := range keys {
		_, err := small.store.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: time.Minute})
		require.NoError(t, err)
	}
	a = small.as(t, secretMixed, "GET", "/v1/locks?prefix=a%2Fsecret%2F", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, true, a.body["more"], a.raw)
	assert.Equal(t, map[string]any{"key": "a/secret/2"}, a.body["next_after"], a.raw)
	assert.Empty(t, a.body["locks"])
	smallClient, err := api.NewClient(small.url, api.ClientConfig{Token: secretMixed})
	require.NoError(t, err)
	for _, limit := range []int{0, 1, 3} {
		got, err := smallClient.List(ctx, lock.ListRequest{Prefix: "a/", Limit: limit})
		require.NoError(t, err)
		want := readable
		if limit > 0 {
			want = readable[:limit]
		}
		assert.Equal(t, want, names(got), "limit %d: paged through next_after", limit)
	}
}

func TestWhoAmI(t *testing.T) {
	n := newACLNode(t, nil)
	ctx := context.Background()
	for _, c := range []struct {
		secret string
		want   api.WhoAmIResponse
	}{
		{testToken, api.WhoAmIResponse{Name: "shared", Rules: []api.TokenRule{{Prefix: "", Right: "admin"}}}},
		{secretMixed, api.WhoAmIResponse{Name: "mixed", Rules: []api.TokenRule{
			{Prefix: "a/secret/open", Right: "lock"}, {Prefix: "a/secret/", Right: "deny"}, {Prefix: "a/", Right: "read"},
		}}},
		{secretNothing, api.WhoAmIResponse{Name: "nothing", Rules: []api.TokenRule{}}},
	} {
		c2, err := api.NewClient(n.url, api.ClientConfig{Token: c.secret})
		require.NoError(t, err)
		got, err := c2.WhoAmI(ctx)
		require.NoError(t, err)
		assert.Equal(t, c.want, got)
		a := n.as(t, c.secret, "GET", "/v1/whoami", "")
		assert.NotContains(t, a.raw, c.secret, "never the secret")
	}
	open := newTestNode(t, Config{})
	got, err := open.client.WhoAmI(ctx)
	require.NoError(t, err)
	assert.Equal(t, api.WhoAmIResponse{Name: "anonymous", Rules: []api.TokenRule{{Prefix: "", Right: "admin"}}}, got)
	a := open.do(t, "GET", "/v1/whoami?x=1", "")
	assert.Equal(t, http.StatusBadRequest, a.status)
}

func TestForceReleaseOverHTTP(t *testing.T) {
	logs := &lockedBuffer{}
	n := newACLNode(t, logs)
	ctx := context.Background()
	holder := lock.NewOwner()
	lease, err := n.store.Acquire(ctx, lock.AcquireRequest{Key: "jobs/stuck", Owner: holder, TTL: time.Hour})
	require.NoError(t, err)
	waiter := lock.NewOwner()
	granted := make(chan lock.Lease, 1)
	go func() {
		l, err := n.store.Acquire(ctx, lock.AcquireRequest{Key: "jobs/stuck", Owner: waiter, TTL: time.Hour, Wait: time.Hour})
		if err == nil {
			granted <- l
		}
	}()
	require.Eventually(t, func() bool {
		info, err := n.store.Inspect(ctx, "jobs/stuck")
		return err == nil && info.Waiters == 1
	}, 10*time.Second, time.Millisecond)

	admin, err := api.NewClient(n.url, api.ClientConfig{Token: secretAdmin})
	require.NoError(t, err)
	token, err := admin.ForceRelease(ctx, "jobs/stuck")
	require.NoError(t, err)
	assert.Equal(t, lease.Token, token)
	select {
	case l := <-granted:
		assert.Greater(t, l.Token, lease.Token, "handed to the waiter")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not handed the key")
	}
	ok, err := n.store.Release(ctx, "jobs/stuck", holder)
	require.NoError(t, err)
	assert.False(t, ok, "the former holder no longer holds it")

	// The audit line: at INFO, who (the token's name), the key, the
	// fencing token that ended, and from where.
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "force-release: ended") {
			line = l
		}
	}
	require.NotEmpty(t, line, "no audit line in %q", logs.String())
	assert.Contains(t, line, "[INFO]")
	assert.Contains(t, line, "caller=jobs-admin")
	assert.Contains(t, line, "key=jobs/stuck")
	assert.Contains(t, line, fmt.Sprintf("token=%d", lease.Token))
	assert.Contains(t, line, "remote=127.0.0.1:")

	// Not held: a clear answer, matching lock.ErrNotHeld.
	_, err = admin.ForceRelease(ctx, "jobs/free")
	assert.ErrorIs(t, err, lock.ErrNotHeld)
	a := n.as(t, secretAdmin, "POST", "/v1/force-release", `{"key":"jobs/free"}`)
	assert.Equal(t, http.StatusConflict, a.status)
	assert.Equal(t, api.CodeNotHeld, a.errorCode())
	assert.Contains(t, a.errorField("message"), `nobody holds "jobs/free"`)

	// Denied: a lock right is not enough.
	locker, err := api.NewClient(n.url, api.ClientConfig{Token: secretLocker})
	require.NoError(t, err)
	_, err = locker.ForceRelease(ctx, "jobs/stuck")
	assert.ErrorIs(t, err, api.ErrPermissionDenied)
	assert.Regexp(t, `\[INFO\] +api: force-release: denied: caller=jobs-locker key=jobs/stuck remote=127\.0\.0\.1:\d+`, logs.String())
	info, err := n.store.Inspect(ctx, "jobs/stuck")
	require.NoError(t, err)
	assert.True(t, info.Locked, "the denied force-release changed nothing")

	// A store that cannot force-release: 501.
	plain := newTestNodeOver(t, struct{ lock.Store }{memstore.New()}, Config{}, nil)
	_, err = plain.client.ForceRelease(ctx, "k")
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

func TestSecretsAreNeverLogged(t *testing.T) {
	logs := &lockedBuffer{}
	n := newACLNode(t, logs)
	ctx := context.Background()
	_, err := n.store.Acquire(ctx, lock.AcquireRequest{Key: "jobs/1", Owner: lock.NewOwner(), TTL: time.Hour})
	require.NoError(t, err)
	for _, secret := range []string{secretAdmin, secretReader, secretNothing, testToken, "unknown-secret-0123456789abcdef"} {
		n.as(t, secret, "POST", "/v1/force-release", `{"key":"jobs/1"}`)
		n.as(t, secret, "GET", "/v1/locks", "")
		n.as(t, secret, "POST", "/v1/leave", "")
	}
	// A reload that fails, and one whose token clashes with the shared one.
	_, err = NewTokens([]Token{{Name: "x", Secret: "tiny5"}})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "tiny5")
	clash, err := NewTokens([]Token{{Name: "clash", Secret: testToken}})
	require.NoError(t, err)
	err = n.handler.SetTokens(clash)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), testToken)
	NewHandler(memstore.New(), Config{Token: testToken, Tokens: clash, Logger: hclog.New(&hclog.LoggerOptions{Output: logs})})

	out := logs.String()
	require.Contains(t, out, "force-release", "the test logged something")
	for _, secret := range []string{secretRoot, secretAdmin, secretLocker, secretReader, secretNothing, secretMixed, testToken} {
		assert.NotContains(t, out, secret)
	}
}

func TestSetTokensReloads(t *testing.T) {
	n := newACLNode(t, nil)
	a := n.as(t, secretReader, "GET", "/v1/inspect?key=jobs%2F1", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)

	next, err := NewTokens([]Token{{Name: "new", Secret: "brand-new-secret-0123456789", Rules: []api.TokenRule{{Prefix: "", Right: "read"}}}})
	require.NoError(t, err)
	require.NoError(t, n.handler.SetTokens(next))
	a = n.as(t, secretReader, "GET", "/v1/inspect?key=jobs%2F1", "")
	assert.Equal(t, http.StatusUnauthorized, a.status, "a token gone from the set no longer works")
	a = n.as(t, "brand-new-secret-0123456789", "GET", "/v1/inspect?key=jobs%2F1", "")
	assert.Equal(t, http.StatusOK, a.status, a.raw)
	a = n.as(t, testToken, "POST", "/v1/force-release", `{"key":"jobs/1"}`)
	assert.Equal(t, api.CodeNotHeld, a.errorCode(), "the shared token keeps every right")

	// A refused set changes nothing.
	clash, err := NewTokens([]Token{{Name: "clash", Secret: testToken, Rules: []api.TokenRule{}}})
	require.NoError(t, err)
	require.Error(t, n.handler.SetTokens(clash))
	a = n.as(t, "brand-new-secret-0123456789", "GET", "/v1/inspect?key=jobs%2F1", "")
	assert.Equal(t, http.StatusOK, a.status, a.raw)

	// nil: the shared token only.
	require.NoError(t, n.handler.SetTokens(nil))
	a = n.as(t, "brand-new-secret-0123456789", "GET", "/v1/inspect?key=jobs%2F1", "")
	assert.Equal(t, http.StatusUnauthorized, a.status)
	a = n.as(t, testToken, "GET", "/v1/inspect?key=jobs%2F1", "")
	assert.Equal(t, http.StatusOK, a.status)
}

func TestTokenFileErrors(t *testing.T) {
	good := `{"name": "ops", "secret": "0123456789abcdef0123", "rules": [{"prefix": "", "right": "admin"}]}`
	tests := []struct {
		name, file string
		want       []string // all in the error
	}{
		{"malformed JSON", "{\n  \"tokens\": [\n    {\"name\": \"ops\",}\n  ]\n}", []string{"line 3", "not valid JSON"}},
		{"not an object", `[]`, []string{`want a JSON object`}},
		{"no tokens field", `{}`, []string{"tokens: missing"}},
		{"unknown top-level field", `{"tokens": [], "tokenz": []}`, []string{"tokenz: unknown field"}},
		{"tokens not a list", `{"tokens": {}}`, []string{"tokens: want a list"}},
		{"unknown right", "{\"tokens\": [\n" + good + ",\n" + `{"name": "b", "secret": "0123456789abcdef0124", "rules": [{"prefix": "x/", "right": "write"}]}` + "\n]}",
			[]string{"line 3", "tokens[1].rules[0].right", `unknown right "write"`, "want read, lock, admin or deny"}},
		{"empty name", `{"tokens": [{"name": "", "secret": "0123456789abcdef0123", "rules": []}]}`, []string{"line 1", "tokens[0].name", "the name is empty"}},
		{"missing name", `{"tokens": [{"secret": "0123456789abcdef0123", "rules": []}]}`, []string{"tokens[0].name", "missing"}},
		{"bad name", `{"tokens": [{"name": "a b", "secret": "0123456789abcdef0123", "rules": []}]}`, []string{"tokens[0].name", "want letters"}},
		{"reserved name", `{"tokens": [{"name": "shared", "secret": "0123456789abcdef0123", "rules": []}]}`, []string{"tokens[0].name", "reserved"}},
		{"duplicate name", `{"tokens": [` + good + `, {"name": "ops", "secret": "0123456789abcdef9999", "rules": []}]}`, []string{"tokens[1].name", `"ops" is also the name of tokens[0]`}},
		{"duplicate secret", `{"tokens": [` + good + `, {"name": "ops2", "secret": "0123456789abcdef0123", "rules": []}]}`, []string{"tokens[1].secret", "same secret as tokens[0]"}},
		{"empty secret", `{"tokens": [{"name": "a", "secret": "", "rules": []}]}`, []string{"tokens[0].secret", "the secret is empty"}},
		{"missing secret", `{"tokens": [{"name": "a", "rules": []}]}`, []string{"tokens[0].secret", "missing"}},
		{"short secret", `{"tokens": [{"name": "a", "secret": "abc", "rules": []}]}`, []string{"tokens[0].secret", "shorter than 16"}},
		{"secret with a space", `{"tokens": [{"name": "a", "secret": "0123456789 abcdef0123", "rules": []}]}`, []string{"tokens[0].secret", "visible ASCII"}},
		{"secret and its hash", `{"tokens": [{"name": "a", "secret": "0123456789abcdef0123", "secret_sha256": "` + strings.Repeat("ab", 32) + `", "rules": []}]}`, []string{"tokens[0].secret", "not both"}},
		{"hash not hex", `{"tokens": [{"name": "a", "secret_sha256": "xyz", "rules": []}]}`, []string{"tokens[0].secret_sha256", "64 hex digits"}},
		{"hash too short", `{"tokens": [{"name": "a", "secret_sha256": "abcd", "rules": []}]}`, []string{"tokens[0].secret_sha256", "64 hex digits"}},
		{"empty hash", `{"tokens": [{"name": "a", "secret_sha256": "", "rules": []}]}`, []string{"tokens[0].secret_sha256", "empty"}},
		{"hash of another token's secret", `{"tokens": [` + good + `, {"name": "b", "secret_sha256": "` + sha256Hex("0123456789abcdef0123") + `", "rules": []}]}`, []string{"tokens[1].secret_sha256", "same secret as tokens[0]"}},
		{"missing rules", `{"tokens": [{"name": "a", "secret": "0123456789abcdef0123"}]}`, []string{"tokens[0].rules", "missing"}},
		{"unknown token field", `{"tokens": [{"name": "a", "secret": "0123456789abcdef0123", "rules": [], "rule": []}]}`, []string{"tokens[0]", `unknown field "rule"`}},
		{"unknown rule field", `{"tokens": [{"name": "a", "secret": "0123456789abcdef0123", "rules": [{"prefix": "", "right": "read", "policy": "x"}]}]}`, []string{"tokens[0]", `unknown field "policy"`}},
		{"wrong type", `{"tokens": [{"name": 7, "secret": "0123456789abcdef0123", "rules": []}]}`, []string{"tokens[0].name", "want string"}},
		{"duplicate prefix", `{"tokens": [{"name": "a", "secret": "0123456789abcdef0123", "rules": [{"prefix": "x", "right": "read"}, {"prefix": "x", "right": "lock"}]}]}`, []string{"tokens[0].rules[1].prefix", "one rule per prefix"}},
		{"prefix too long", `{"tokens": [{"name": "a", "secret": "0123456789abcdef0123", "rules": [{"prefix": "` + strings.Repeat("p", 513) + `", "right": "read"}]}]}`, []string{"tokens[0].rules[0].prefix", "longer than 512"}},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".json")
			require.NoError(t, os.WriteFile(path, []byte(tt.file), 0o600))
			tokens, err := LoadTokens(path)
			require.Error(t, err)
			assert.Nil(t, tokens)
			assert.Contains(t, err.Error(), "token file "+path+": ")
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "0123456789abcdef", "no secret in the error")
			var te *TokenError
			assert.ErrorAs(t, err, &te)
		})
	}
	_, err := LoadTokens(filepath.Join(dir, "absent.json"))
	assert.ErrorContains(t, err, "absent.json: cannot read it")
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestSecretSHA256(t *testing.T) {
	const secret = "hashed-secret-0123456789abcdef"
	tokens, err := ParseTokens([]byte(`{"tokens": [{"name": "ci", "secret_sha256": "` + strings.ToUpper(sha256Hex(secret)) + `", "rules": [{"prefix": "ci/", "right": "lock"}]}]}`))
	require.NoError(t, err)
	n := newTestNode(t, Config{Tokens: tokens})
	a := n.as(t, secret, "POST", "/v1/acquire", `{"key":"ci/1","ttl":"1m"}`)
	assert.Equal(t, http.StatusOK, a.status, a.raw)
	a = n.as(t, sha256Hex(secret), "POST", "/v1/acquire", `{"key":"ci/2","ttl":"1m"}`)
	assert.Equal(t, http.StatusUnauthorized, a.status, "the hash is not the secret")
}

func TestParseTokens(t *testing.T) {
	tokens, err := ParseTokens([]byte(`{
	  "tokens": [
	    {"name": "ops", "secret": "0123456789abcdef0123", "rules": [{"prefix": "", "right": "admin"}]},
	    {"name": "billing", "secret": "fedcba9876543210fedc", "rules": [
	      {"prefix": "billing/", "right": "lock"},
	      {"prefix": "", "right": "read"},
	      {"prefix": "billing/audit/", "right": "deny"}
	    ]},
	    {"name": "none", "secret": "abcdefabcdefabcdefab", "rules": []}
	  ]
	}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"ops", "billing", "none"}, tokens.Names())
	billing := tokens.list[1]
	for key, want := range map[string]right{
		"billing/1": rightLock, "billing/audit/1": rightDeny, "billing": rightRead, "other": rightRead,
	} {
		assert.Equal(t, want, billing.rightOn(key), key)
	}
	assert.Equal(t, rightDeny, tokens.list[2].rightOn("x"), "no rule: nothing")
	all, none := billing.readsUnder("billing/")
	assert.False(t, all)
	assert.False(t, none)
	all, none = billing.readsUnder("billing/audit/")
	assert.False(t, all)
	assert.True(t, none)
	all, _ = billing.readsUnder("other/")
	assert.True(t, all)

	empty, err := ParseTokens([]byte(`{"tokens": []}`))
	require.NoError(t, err)
	assert.Empty(t, empty.Names())
}

func TestEmptyTokenSetAdmitsNobody(t *testing.T) {
	empty, err := ParseTokens([]byte(`{"tokens": []}`))
	require.NoError(t, err)
	n := newTestNode(t, Config{Tokens: empty})
	a := n.do(t, "GET", "/v1/inspect?key=k", "")
	assert.Equal(t, http.StatusUnauthorized, a.status, "no token")
	a = n.as(t, "any-secret-0123456789abcdef", "GET", "/v1/inspect?key=k", "")
	assert.Equal(t, http.StatusUnauthorized, a.status, "no token is known")
	assert.Equal(t, http.StatusOK, n.do(t, "GET", "/healthz", "").status)
}

// TestSessionsNeedTheLockRightSomewhere: a session binds locks, so only a
// token that may lock some key may create, renew or destroy one; one that
// may only read gets 403 and no session is created.
func TestSessionsNeedTheLockRightSomewhere(t *testing.T) {
	n := newACLNode(t, nil)
	create := `{"ttl":"10s"}`
	for _, tok := range []struct{ name, secret string }{{"jobs-reader", secretReader}, {"nothing", secretNothing}} {
		for _, call := range []struct{ path, body, what string }{
			{"/v1/session/create", create, "create a session"},
			{"/v1/session/renew", `{"id":"0123456789abcdef0123456789abcdef"}`, "renew a session"},
			{"/v1/session/destroy", `{"id":"0123456789abcdef0123456789abcdef"}`, "destroy a session"},
		} {
			a := n.as(t, tok.secret, "POST", call.path, call.body)
			assert.Equal(t, http.StatusForbidden, a.status, "%s by %s: %s", call.path, tok.name, a.raw)
			assert.Equal(t, api.CodePermissionDenied, a.errorCode())
			msg, _ := a.errorField("message").(string)
			assert.Contains(t, msg, fmt.Sprintf("token %q may not %s", tok.name, call.what))
			assert.Contains(t, msg, "lock right")
		}
	}
	// A token that may lock under jobs/ only creates, renews and destroys.
	a := n.as(t, secretLocker, "POST", "/v1/session/create", create)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	id, _ := a.body["id"].(string)
	require.NotEmpty(t, id)
	// The reader may still look the session up: info names no key and
	// reveals nothing but its timing.
	info := n.as(t, secretReader, "GET", "/v1/session/info?id="+id, "")
	assert.Equal(t, http.StatusOK, info.status, info.raw)
	assert.Equal(t, http.StatusOK, n.as(t, secretLocker, "POST", "/v1/session/renew", `{"id":"`+id+`"}`).status)
	assert.Equal(t, http.StatusOK, n.as(t, secretLocker, "POST", "/v1/session/destroy", `{"id":"`+id+`"}`).status)
}
