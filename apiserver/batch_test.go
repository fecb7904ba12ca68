package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// batchResults posts body to /v1/batch and decodes each result.
func batchResults(t *testing.T, n *testNode, secret, body string) []answer {
	t.Helper()
	a := n.as(t, secret, "POST", "/v1/batch", body)
	require.Equal(t, 200, a.status, a.raw)
	var resp api.BatchResponse
	require.NoError(t, json.Unmarshal([]byte(a.raw), &resp))
	var out []answer
	for _, r := range resp.Results {
		var body map[string]any
		require.NoError(t, json.Unmarshal(r.Body, &body))
		out = append(out, answer{status: r.Status, raw: string(r.Body), body: body})
	}
	return out
}

// Each operation of a batch is answered as its own route answers it, by a
// memory store and by a cluster node (where the batch's commands go to the
// leader as one group, which the operations refused before reaching the
// node must not hold up).
func TestBatchAnswersEachOperationAsItsRoute(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		testBatchAnswersEachOperationAsItsRoute(t, newTestNode(t, Config{Token: testToken}))
	})
	t.Run("cluster", func(t *testing.T) {
		testBatchAnswersEachOperationAsItsRoute(t, newTestNodeOver(t, newSingleNodeCluster(t), Config{Token: testToken}, nil))
	})
}

func testBatchAnswersEachOperationAsItsRoute(t *testing.T, n *testNode) {
	other := "fedcba9876543210fedcba9876543210"
	owner := "0123456789abcdef0123456789abcdef"
	require.Equal(t, 200, n.do(t, "POST", "/v1/acquire", `{"key":"held","ttl":"30s","owner":"`+other+`"}`).status)

	res := batchResults(t, n, testToken, `{"ops":[
		{"op":"acquire","body":{"key":"a","ttl":"30s","owner":"`+owner+`"}},
		{"op":"acquire","body":{"key":"held","ttl_ms":30000,"owner":"`+owner+`"}},
		{"op":"release","body":{"key":"nobody","owner":"`+owner+`"}},
		{"op":"extend","body":{"key":"a","owner":"`+owner+`","ttl":"never"}},
		{"op":"acquire","body":{"key":"w","ttl":"30s","wait":"1s"}},
		{"op":"acquire","body":{"key":"x","ttl":"30s","bogus":1}}
	]}`)
	require.Len(t, res, 6)
	assert.Equal(t, 200, res[0].status, res[0].raw)
	assert.Equal(t, "a", res[0].body["key"])
	assert.Equal(t, owner, res[0].body["owner"])
	single := n.do(t, "POST", "/v1/acquire", `{"key":"held","ttl":"30s","owner":"`+owner+`"}`)
	assert.Equal(t, single.status, res[1].status)
	assert.Equal(t, single.errorCode(), res[1].errorCode())
	assert.Equal(t, api.CodeLocked, res[1].errorCode())
	assert.Equal(t, api.CodeNotHeld, res[2].errorCode())
	assert.Equal(t, api.CodeInvalidTTL, res[3].errorCode())
	assert.Equal(t, api.CodeInvalidWait, res[4].errorCode(), "a batched acquire may not wait")
	assert.Contains(t, res[4].errorField("message"), "on its own")
	bad := n.do(t, "POST", "/v1/acquire", `{"key":"x","ttl":"30s","bogus":1}`)
	assert.Equal(t, bad.raw, res[5].raw+"\n", "the same error, word for word")

	info := n.do(t, "GET", "/v1/inspect?key=a", "")
	assert.Equal(t, true, info.body["locked"], "the batch's acquire took the key")
	info = n.do(t, "GET", "/v1/inspect?key=w", "")
	assert.Equal(t, false, info.body["locked"])
}

// A malformed batch is refused as a whole, before anything runs.
func TestBatchRefusedAsAWhole(t *testing.T) {
	n := newTestNode(t, Config{})
	acquire := `{"op":"acquire","body":{"key":"k","ttl":"30s"}}`
	many := strings.TrimSuffix(strings.Repeat(acquire+",", api.MaxBatchOps+1), ",")
	for _, body := range []string{
		`{"ops":[]}`,
		`{"ops":[` + acquire + `,{"op":"inspect","body":{"key":"k"}}]}`,
		`{"ops":[` + acquire + `,{"op":"release"}]}`,
		`{"ops":[` + acquire + `],"extra":1}`,
		`{"ops":[` + acquire + `,{"op":"acquire","body":{"key":"k","key":"j","ttl":"1s"}}]}`,
		`{"ops":[` + many + `]}`,
		`[` + acquire + `]`,
	} {
		a := n.do(t, "POST", "/v1/batch", body)
		assert.Equal(t, 400, a.status, "%.80s: %s", body, a.raw)
		assert.Equal(t, api.CodeBadRequest, a.errorCode(), body)
	}
	assert.Equal(t, false, n.do(t, "GET", "/v1/inspect?key=k", "").body["locked"], "no acquire ran")
}

// Rights are checked per operation, with the batch's token.
func TestBatchRightsPerOperation(t *testing.T) {
	n := newACLNode(t, nil)
	res := batchResults(t, n, secretLocker, `{"ops":[
		{"op":"acquire","body":{"key":"jobs/x","ttl":"30s"}},
		{"op":"acquire","body":{"key":"other/y","ttl":"30s"}}
	]}`)
	require.Len(t, res, 2)
	assert.Equal(t, 200, res[0].status, res[0].raw)
	assert.Equal(t, 403, res[1].status)
	assert.Equal(t, api.CodePermissionDenied, res[1].errorCode())
	assert.Equal(t, 401, n.as(t, "wrong-secret-0123456789", "POST", "/v1/batch", `{"ops":[{"op":"acquire","body":{"key":"jobs/x","ttl":"30s"}}]}`).status)
}

// Many goroutines sharing one client (whose operations then travel in
// batches) each get what they would get alone: every cycle takes and gives
// back its own key, and nothing stays held.
func TestClientBatchingUnderConcurrency(t *testing.T) {
	n := newTestNode(t, Config{})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			key := fmt.Sprintf("conc/%d", g)
			for range 50 {
				owner := lock.NewOwner()
				lease, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute})
				if !assert.NoError(t, err) {
					return
				}
				assert.NotZero(t, lease.Token)
				ok, err := n.client.Release(ctx, key, owner)
				if !assert.NoError(t, err) || !assert.True(t, ok) {
					return
				}
			}
		})
	}
	wg.Wait()
	locks, err := n.client.List(ctx, lock.ListRequest{Prefix: "conc/"})
	require.NoError(t, err)
	assert.Empty(t, locks)
	// Not held: a release answers (false, nil), in a batch as alone.
	ok, err := n.client.Release(ctx, "conc/0", lock.NewOwner())
	require.NoError(t, err)
	assert.False(t, ok)
}

// writeBatchResponse writes what writeJSON would, byte for byte.
func TestWriteBatchResponseIsWriteJSONs(t *testing.T) {
	var results []api.BatchResult
	for _, v := range []any{
		api.LeaseResponse{KeyOut: api.MakeKeyOut("a<b>&c\u2028"), Owner: "o", Token: 7, TTLMS: 1, RemainingMS: 1},
		api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeLocked, Message: `"quoted" <html>`}},
	} {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		results = append(results, api.BatchResult{Status: 200, Body: raw})
	}
	want, got := httptest.NewRecorder(), httptest.NewRecorder()
	writeJSON(want, http.StatusOK, api.BatchResponse{Results: results})
	writeBatchResponse(got, results)
	assert.Equal(t, want.Body.String(), got.Body.String())
	assert.Equal(t, strconv.Itoa(got.Body.Len()), got.Header().Get("Content-Length"), "announced: not sent in chunks")
	got.Header().Del("Content-Length")
	assert.Equal(t, want.Header(), got.Header())
}
