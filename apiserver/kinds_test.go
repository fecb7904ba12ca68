package apiserver

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
)

// Semaphores and read/write locks over JSON: limit and shared on the
// acquire, kind/limit/holders/shared on inspect and list, a mismatch as 409
// kind_mismatch saying what the key is, and bad fields as 400 naming them.
func TestKindsOverHTTP(t *testing.T) {
	n := newTestNode(t, Config{})
	for range 2 {
		a := n.do(t, "POST", "/v1/acquire", `{"key":"pool","ttl":"1m","limit":2}`)
		require.Equal(t, http.StatusOK, a.status, a.raw)
	}
	a := n.do(t, "POST", "/v1/acquire", `{"key":"pool","ttl":"1m","kind":"semaphore","limit":2}`)
	assert.Equal(t, http.StatusConflict, a.status)
	assert.Equal(t, api.CodeLocked, a.errorCode(), "full")

	a = n.do(t, "POST", "/v1/acquire", `{"key":"pool","ttl":"1m","limit":3}`)
	assert.Equal(t, http.StatusConflict, a.status)
	assert.Equal(t, api.CodeKindMismatch, a.errorCode())
	assert.Contains(t, a.raw, "semaphore of 2; asked for a semaphore of 3")
	detail := a.body["error"].(map[string]any)
	assert.Equal(t, "semaphore", detail["kind"])
	assert.EqualValues(t, 2, detail["limit"])

	info := n.do(t, "GET", "/v1/inspect?key=pool", "").body
	assert.Equal(t, "semaphore", info["kind"])
	assert.EqualValues(t, 2, info["limit"])
	assert.EqualValues(t, 2, info["holders"])

	for _, body := range []string{`{"key":"doc","ttl":"1m","shared":true}`, `{"key":"doc","ttl":"1m","kind":"rwlock","shared":true}`} {
		a = n.do(t, "POST", "/v1/acquire", body)
		require.Equal(t, http.StatusOK, a.status, a.raw)
	}
	a = n.do(t, "POST", "/v1/acquire", `{"key":"doc","ttl":"1m","kind":"rwlock"}`)
	assert.Equal(t, api.CodeLocked, a.errorCode(), "the writer waits for the readers")
	list := n.do(t, "GET", "/v1/locks?prefix=doc", "").body["locks"].([]any)
	require.Len(t, list, 1)
	doc := list[0].(map[string]any)
	assert.Equal(t, "rwlock", doc["kind"])
	assert.Equal(t, true, doc["shared"])
	assert.EqualValues(t, 2, doc["holders"])

	a = n.do(t, "POST", "/v1/acquire", `{"key":"plain","ttl":"1m"}`)
	require.Equal(t, http.StatusOK, a.status)
	info = n.do(t, "GET", "/v1/inspect?key=plain", "").body
	assert.Equal(t, "mutex", info["kind"])
	assert.EqualValues(t, 1, info["holders"])

	for _, tc := range []struct{ body, code, names string }{
		{`{"key":"k","ttl":"1s","limit":0}`, api.CodeInvalidLimit, "limit"},
		{`{"key":"k","ttl":"1s","limit":65537}`, api.CodeInvalidLimit, "65537"},
		{`{"key":"k","ttl":"1s","kind":"semaphore"}`, api.CodeInvalidLimit, "limit"},
		{`{"key":"k","ttl":"1s","kind":"barrier"}`, api.CodeInvalidKind, "barrier"},
		{`{"key":"k","ttl":"1s","kind":"mutex","limit":2}`, api.CodeInvalidKind, "limit"},
		{`{"key":"k","ttl":"1s","limit":2,"shared":true}`, api.CodeInvalidKind, "shared"},
	} {
		a := n.do(t, "POST", "/v1/acquire", tc.body)
		assert.Equal(t, http.StatusBadRequest, a.status, "%s: %s", tc.body, a.raw)
		assert.Equal(t, tc.code, a.errorCode(), tc.body)
		assert.Contains(t, a.raw, tc.names, "%s: the message names the field", tc.body)
	}
}
