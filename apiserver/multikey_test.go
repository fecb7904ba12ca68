package apiserver

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// Multi-key locks over JSON: keys on POST /v1/acquire take every key at
// once with one token (the answer lists the set, key is its first), a
// release of any key frees them all, and bad sets answer 400 naming the
// fault; a key of another kind answers 409 naming that key.
func TestMultiKeyOverHTTP(t *testing.T) {
	n := newTestNode(t, Config{})
	a := n.do(t, "POST", "/v1/acquire", `{"keys":["b","a"],"ttl":"1m"}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, "a", a.body["key"])
	assert.Equal(t, []any{"a", "b"}, a.body["keys"])
	token := a.body["token"]
	owner := a.body["owner"].(string)
	for _, k := range []string{"a", "b"} {
		info := n.do(t, "GET", "/v1/inspect?key="+k, "").body
		assert.Equal(t, true, info["locked"], k)
		assert.Equal(t, token, info["token"], k)
	}
	a = n.do(t, "POST", "/v1/acquire", `{"key":"b","ttl":"1m"}`)
	assert.Equal(t, api.CodeLocked, a.errorCode())

	a = n.do(t, "POST", "/v1/release", `{"key":"b","owner":"`+owner+`"}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, false, n.do(t, "GET", "/v1/inspect?key=a", "").body["locked"], "releasing b released a")

	a = n.do(t, "POST", "/v1/acquire", `{"key":"pool","ttl":"1m","limit":2}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	a = n.do(t, "POST", "/v1/acquire", `{"keys":["a","pool"],"ttl":"1m"}`)
	assert.Equal(t, http.StatusConflict, a.status)
	assert.Equal(t, api.CodeKindMismatch, a.errorCode())
	assert.Equal(t, "pool", a.body["error"].(map[string]any)["key"])

	// keys_b64 for keys that are not text.
	a = n.do(t, "POST", "/v1/acquire", `{"keys_b64":["/w==","YQ=="],"ttl":"1m"}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, "a", a.body["key"], "a sorts before \xff")
	assert.Equal(t, []any{"YQ==", "/w=="}, a.body["keys_b64"], "the set, sorted, as it was given")
	a = n.do(t, "POST", "/v1/release", `{"key_b64":"/w==","owner":"`+a.body["owner"].(string)+`"}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)

	for _, tc := range []struct{ body, code, names string }{
		{`{"keys":["a","a"],"ttl":"1m"}`, api.CodeInvalidKey, "appears twice"},
		{`{"keys":["a"],"keys_b64":["YQ=="],"ttl":"1m"}`, api.CodeInvalidKey, "not both"},
		{`{"keys_b64":["!"],"ttl":"1m"}`, api.CodeInvalidKey, "keys_b64[0]"},
		{`{"keys":[],"ttl":"1m"}`, api.CodeInvalidKey, "keys is empty"},
		{`{"key":"a","keys":["b"],"ttl":"1m"}`, api.CodeInvalidKey, "not both"},
		{`{"keys":["a",""],"ttl":"1m"}`, api.CodeInvalidKey, "empty"},
		{`{"keys":["a","b"],"session":"0123456789abcdef0123456789abcdef"}`, api.CodeInvalidSession, "session"},
		{`{"keys":["a","b"]}`, api.CodeInvalidTTL, "ttl"},
		{`{"keys":["a","b"],"ttl":"1m","limit":2}`, api.CodeInvalidKind, "mutex"},
	} {
		a := n.do(t, "POST", "/v1/acquire", tc.body)
		assert.Equal(t, http.StatusBadRequest, a.status, "%s: %s", tc.body, a.raw)
		assert.Equal(t, tc.code, a.errorCode(), tc.body)
		assert.Contains(t, a.raw, tc.names, tc.body)
	}
}

// The Go client sends a set with a key that is not text as keys_b64.
func TestMultiKeyClientSendsBytes(t *testing.T) {
	n := newTestNode(t, Config{})
	ctx := context.Background()
	req := lock.AcquireRequest{Key: "a", Keys: []string{"a", "\xff\x00"}, Owner: lock.NewOwner(), TTL: time.Minute}
	lease, err := n.client.AcquireAll(ctx, req)
	require.NoError(t, err)
	info, err := n.client.Inspect(ctx, "\xff\x00")
	require.NoError(t, err)
	assert.Equal(t, lease.Token, info.Token)
	ok, err := n.client.Release(ctx, "\xff\x00", req.Owner)
	require.NoError(t, err)
	assert.True(t, ok)
	info, err = n.client.Inspect(ctx, "a")
	require.NoError(t, err)
	assert.False(t, info.Locked, "the release of one key released the set")
}

// Every key of a set needs the lock right: one outside the token's
// prefixes is refused, and nothing is taken.
func TestMultiKeyNeedsTheRightOnEveryKey(t *testing.T) {
	n := newACLNode(t, nil)
	a := n.as(t, secretLocker, "POST", "/v1/acquire", `{"keys":["jobs/a","other"],"ttl":"1m"}`)
	assert.Equal(t, http.StatusForbidden, a.status, a.raw)
	assert.Equal(t, api.CodePermissionDenied, a.errorCode())
	assert.Equal(t, false, n.do(t, "GET", "/v1/inspect?key=jobs/a", "").body["locked"])
	a = n.as(t, secretLocker, "POST", "/v1/acquire", `{"keys":["jobs/a","jobs/b"],"ttl":"1m"}`)
	assert.Equal(t, http.StatusOK, a.status, a.raw)
}
