package apiserver

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
)

// fastDecodeTargets are the request types fastDecode is checked with.
var fastDecodeTargets = []func() any{
	func() any { return new(api.AcquireRequest) },
	func() any { return new(api.ReleaseRequest) },
	func() any { return new(api.ExtendRequest) },
	func() any { return new(api.SessionCreateRequest) },
	func() any { return new(api.BatchRequest) },
}

// checkFastDecode: whatever fastDecode accepts, decodeStrict accepts too and
// decodes to the same value; what it declines it leaves untouched.
func checkFastDecode(t *testing.T, body []byte) {
	if !utf8.Valid(body) {
		return // readJSON refuses these first
	}
	for _, target := range fastDecodeTargets {
		fast, strict := target(), target()
		if !fastDecode(body, fast) {
			assert.Equal(t, target(), fast, "declining %q changed the value", body)
			continue
		}
		e := decodeStrict(body, strict)
		if !assert.Nil(t, e, "fastDecode took %q into %T, which decodeStrict refuses", body, fast) {
			continue
		}
		assert.Equal(t, strict, fast, "fastDecode and decodeStrict disagree on %q into %T", body, fast)
	}
}

var fastDecodeSeeds = []string{
	`{"key":"a","ttl":"1s"}`, `{"key":"a","ttl_ms":1000,"owner":"o","wait":"0s"}`, ` { "key" : "a/b" , "ttl" : "30s" } `,
	`{"key_b64":"YQ==","owner":"x"}`, `{"key":"a","ttl":"1s","ttl":"2s"}`, `{"KEY":"a"}`, `{"key":"\u0041"}`,
	`{"key":"a","ttl":30}`, `{"key":"a","ttl_ms":"30"}`, `{"key":"a","ttl_ms":1.5}`, `{"key":"a","ttl_ms":1e3}`,
	`{"key":"a","ttl_ms":01}`, `{"key":"a","ttl_ms":-0}`, `{"key":"a","ttl_ms":99999999999999999999}`, `{"key":null}`,
	`{"key":"a","limit":8,"kind":"semaphore"}`, `{"key":"a","limit":1.5}`, `{"key":"a","limit":-1}`, `{"key":"a","shared":true}`,
	`{"key":"a","limit":"8"}`, `{"key":"a","limit":9223372036854775808}`,
	`{"key":"a"}x`, `{"key":"a"} `, `{}`, `[]`, `{"key":"a",}`, `{"key":"a","ttl":"1x"}`, `{"key":"é","metadata":"<&>"}`,
	`{"ops":[{"op":"acquire","body":{"key":"a","ttl":"1s"}},{"body":{"key":"b","owner":"o"},"op":"release"}]}`,
	`{"ops":[]}`, `{"ops":[{"op":"acquire","body":{"key":"a","key":"b"}}]}`, `{"ops":[{"op":"acquire","body":{"key":{"x":1}}}]}`,
	`{"ops":[{"op":"acquire","op":"release","body":{}}]}`, `{"ops":[{"OP":"acquire","body":{}}]}`, `{"ops":[{"op":"acquire"}]}`,
	`{"ops":[{"op":"acquire","body":{"key":"a"}}],"ops":[]}`, `{"ops":[{"op":"x","body":{"n":-1.5e+3}}]} `,
}

func TestFastDecodeAgreesWithStrictDecoding(t *testing.T) {
	for _, s := range fastDecodeSeeds {
		checkFastDecode(t, []byte(s))
	}
	// The common bodies do take the fast path.
	var req api.AcquireRequest
	require.True(t, fastDecode([]byte(`{"key":"a","ttl":"30s","owner":"o1"}`), &req))
	assert.Equal(t, "a", *req.Key)
	var batch api.BatchRequest
	require.True(t, fastDecode([]byte(`{"ops":[{"op":"release","body":{"key":"a","owner":"o"}}]}`), &batch))
	assert.Equal(t, []api.BatchOp{{Op: "release", Body: []byte(`{"key":"a","owner":"o"}`)}}, batch.Ops)
	assert.False(t, fastDecode([]byte(`{"key":"a\"b"}`), new(api.AcquireRequest)), "an escape takes the usual path")
}

func FuzzFastDecode(f *testing.F) {
	for _, s := range fastDecodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastDecode(t, body)
	})
}

// The hand-written answers are json.Marshal's, byte for byte, and are in
// force for the types as they are.
func TestMarshalAnswerIsJSONs(t *testing.T) {
	require.True(t, fastAnswers, "the hand-written encoding no longer matches json.Marshal: a field was added to LeaseResponse or ReleaseResponse; update appendAnswer")
	for _, v := range []any{
		api.LeaseResponse{KeyOut: api.MakeKeyOut("jobs/a"), Owner: "0123456789abcdef0123456789abcdef", Token: 1<<64 - 1, TTLMS: 30000, RemainingMS: -1},
		api.LeaseResponse{KeyOut: api.MakeKeyOut("\xff\x00"), Owner: "o"},
		api.LeaseResponse{KeyOut: api.MakeKeyOut("a<b>&\"c\\\u2028é"), Owner: "o"},
		api.ReleaseResponse{KeyOut: api.MakeKeyOut("jobs/a"), Released: true},
		api.ReleaseResponse{},
		api.ErrorBody{Error: api.ErrorDetail{Code: "x"}},
	} {
		want, err := json.Marshal(v)
		require.NoError(t, err)
		got, err := marshalAnswer(v)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got))
	}
	rec := httptest.NewRecorder()
	writeJSON(rec, 200, api.ReleaseResponse{KeyOut: api.MakeKeyOut("k"), Released: true})
	assert.Equal(t, "{\"key\":\"k\",\"released\":true}\n", rec.Body.String())
}
