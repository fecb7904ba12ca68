package httpwire

import (
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fastDecodeTargets are the request types fastDecode is checked with.
var fastDecodeTargets = []func() any{
	func() any { return new(AcquireRequest) },
	func() any { return new(ReleaseRequest) },
	func() any { return new(ExtendRequest) },
	func() any { return new(SessionCreateRequest) },
	func() any { return new(BatchRequest) },
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
	var req AcquireRequest
	require.True(t, fastDecode([]byte(`{"key":"a","ttl":"30s","owner":"o1"}`), &req))
	assert.Equal(t, "a", *req.Key)
	var batch BatchRequest
	require.True(t, fastDecode([]byte(`{"ops":[{"op":"release","body":{"key":"a","owner":"o"}}]}`), &batch))
	assert.Equal(t, []BatchOp{{Op: "release", Body: []byte(`{"key":"a","owner":"o"}`)}}, batch.Ops)
	assert.False(t, fastDecode([]byte(`{"key":"a\"b"}`), new(AcquireRequest)), "an escape takes the usual path")
}

func FuzzFastDecode(f *testing.F) {
	for _, s := range fastDecodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastDecode(t, body)
	})
}

// The hand-written request bodies are json.Marshal's, byte for byte, and
// are in force for the types as they are; anything they do not cover
// (another field, a string json.Marshal escapes) goes to json.Marshal.
func TestEncodeRequestIsJSONs(t *testing.T) {
	require.True(t, fastRequests, "the hand-written request encoding no longer matches json.Marshal: a field was added to a request; update appendRequest")
	s := func(v string) *string { return &v }
	limit, shared := 3, true
	for _, tc := range []struct {
		v    any
		fast bool
	}{
		{AcquireRequest{KeyFields: MakeKeyFields("jobs/a"), Owner: s("0123456789abcdef"), TTL: NewDuration(30 * time.Second)}, true},
		{AcquireRequest{KeyFields: MakeKeyFields("\xff"), Owner: s("o"), TTL: NewDuration(time.Minute), Wait: NewDuration(90 * time.Second), Metadata: s("host-1 pid 7")}, true},
		{AcquireRequest{KeyFields: MakeKeyFields("a<b>&\"c\\\u2028é"), Owner: s("o"), TTL: NewDuration(time.Second)}, false},
		{AcquireRequest{KeyFields: MakeKeyFields("k"), Owner: s(""), Metadata: s("tab\there")}, false},
		{AcquireRequest{KeyFields: MakeKeyFields("k"), TTLMS: NewMillisField(5), WaitMS: NewMillisField(0)}, false},
		{AcquireRequest{KeyFields: MakeKeyFields("k"), Kind: s("semaphore"), Limit: &limit}, false},
		{AcquireRequest{KeyFields: MakeKeyFields("k"), Shared: &shared, Session: s("abc")}, false},
		{AcquireRequest{Keys: []string{"a", "b"}, TTL: NewDuration(time.Second)}, false},
		{AcquireRequest{}, true},
		{ReleaseRequest{KeyFields: MakeKeyFields("jobs/a"), Owner: s("o")}, true},
		{ReleaseRequest{}, true},
		{ExtendRequest{KeyFields: MakeKeyFields("jobs/a"), Owner: s("o"), TTL: NewDuration(time.Hour)}, true},
		{ExtendRequest{KeyFields: MakeKeyFields("jobs/a"), TTLMS: NewMillisField(1000)}, false},
		{struct{ KeyFields }{MakeKeyFields("k")}, false}, // a type it does not write
	} {
		want, err := json.Marshal(tc.v)
		require.NoError(t, err)
		got, err := EncodeRequest(tc.v)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%#v", tc.v)
		_, fast := appendRequest(nil, tc.v)
		assert.Equal(t, tc.fast, fast, "fast path taken for %s", want)
	}
}
