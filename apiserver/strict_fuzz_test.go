package apiserver

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/httpwire"
)

// FuzzCheckStrictJSON: the check never panics, and a body it lets through
// decodes to strings with no U+FFFD that the body did not spell out itself:
// no lone surrogate escape slips through to become one.
func FuzzCheckStrictJSON(f *testing.F) {
	for _, seed := range []string{
		`{"key":"a","ttl":"1s"}`, `{"key":"\ud800SUR"}`, `{"key":"\udfffSUR"}`, `{"key":"\ud83d\ude00"}`,
		`{"key":"\\ud800"}`, `{"key":"\ud800\ud800"}`, `{"key":"\ud800\u0041"}`, `{"KEY":"a"}`, `{"key":"a","key":"b"}`,
		`[{"a":1,"a":2}]`, `{"key":{"x":[1,{"y":2}]}}`, `{"key":"\u`, `"\ud800"`, `{"key":"\uFFFD"}`,
	} {
		f.Add([]byte(seed))
	}
	allowed := httpwire.FieldNames(reflect.TypeOf(api.AcquireRequest{}))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return // readJSON refuses these first
		}
		if checkStrictJSON(body, allowed) != nil {
			return
		}
		var v any
		if json.Unmarshal(body, &v) != nil {
			return
		}
		if bytes.ContainsRune(body, utf8.RuneError) || bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)) {
			return // spelt out by the body itself
		}
		var walk func(any)
		walk = func(v any) {
			switch v := v.(type) {
			case string:
				if strings.ContainsRune(v, utf8.RuneError) {
					t.Fatalf("accepted %q, which decodes to %q", body, v)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			case map[string]any:
				for k, e := range v {
					walk(k)
					walk(e)
				}
			}
		}
		walk(v)
	})
}

// fastDecodeTargets are the request types DecodeFast is checked with.
var fastDecodeTargets = []func() any{
	func() any { return new(api.AcquireRequest) },
	func() any { return new(api.ReleaseRequest) },
	func() any { return new(api.ExtendRequest) },
	func() any { return new(api.SessionCreateRequest) },
	func() any { return new(api.BatchRequest) },
}

// checkFastDecode: whatever DecodeFast accepts, decodeStrict accepts too and
// decodes to the same value; what it declines it leaves untouched.
func checkFastDecode(t *testing.T, body []byte) {
	if !utf8.Valid(body) {
		return // readJSON refuses these first
	}
	for _, target := range fastDecodeTargets {
		fast, strict := target(), target()
		if !httpwire.DecodeFast(body, fast) {
			assert.Equal(t, target(), fast, "declining %q changed the value", body)
			continue
		}
		e := decodeStrict(body, strict)
		if !assert.Nil(t, e, "DecodeFast took %q into %T, which decodeStrict refuses", body, fast) {
			continue
		}
		assert.Equal(t, strict, fast, "DecodeFast and decodeStrict disagree on %q into %T", body, fast)
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
	require.True(t, httpwire.DecodeFast([]byte(`{"key":"a","ttl":"30s","owner":"o1"}`), &req))
	assert.Equal(t, "a", *req.Key)
	var batch api.BatchRequest
	require.True(t, httpwire.DecodeFast([]byte(`{"ops":[{"op":"release","body":{"key":"a","owner":"o"}}]}`), &batch))
	assert.Equal(t, []api.BatchOp{{Op: "release", Body: []byte(`{"key":"a","owner":"o"}`)}}, batch.Ops)
	assert.False(t, httpwire.DecodeFast([]byte(`{"key":"a\"b"}`), new(api.AcquireRequest)), "an escape takes the usual path")
}

func FuzzFastDecode(f *testing.F) {
	for _, s := range fastDecodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastDecode(t, body)
	})
}

// strictTargets are the request types the strict decoding is checked with.
var strictTargets = append(fastDecodeTargets,
	func() any { return new(api.SessionRequest) },
	func() any { return new(api.ForceReleaseRequest) },
	func() any { return new(struct{}) }, // readNoFields
)

// checkStrictDecoding: json v2 (decodeStrict) takes exactly the bodies the
// two passes with encoding/json (checkBody) take, into the same values, and
// refuses the others with checkBody's words.
func checkStrictDecoding(t *testing.T, body []byte) {
	if !utf8.Valid(body) {
		return // readJSON refuses these first
	}
	for _, target := range strictTargets {
		v2, v1 := target(), target()
		e2, e1 := decodeStrict(body, v2), checkBody(body, v1)
		if e1 == nil && e2 != nil && e2.field != "" && strings.Contains(e2.msg, `" in `) {
			continue // a nested name in another letter case, which encoding/json took: v2Refusal
		}
		if e1 != nil {
			if assert.NotNil(t, e2, "json v2 took %q into %T, which encoding/json and its checks refuse: %s", body, v2, e1.msg) {
				assert.Equal(t, *e1, *e2, "the refusal of %q into %T", body, v2)
			}
			continue
		}
		if assert.Nil(t, e2, "json v2 refused %q into %T, which encoding/json and its checks take", body, v2) {
			assert.Equal(t, v1, v2, "json v2 and encoding/json disagree on %q into %T", body, v2)
		}
	}
}

var strictSeeds = []string{
	`{"KEY":"a","ttl":"1s"}`, `{"key":"a","Ttl":"1s"}`, `{"key":"a","key":"b","ttl":"1s"}`, `{"key":"a","Key":"b"}`,
	`{"key":"a","ttl":"1s","colour":"red"}`, `{"key":"\ud800SUR","ttl":"1s"}`, `{"key":"\udfffSUR"}`, `{"key":"x\uDBFF"}`,
	`{"key":"\ud800\ud800"}`, `{"key":"a","owner":"\ud800"}`, `{"key":"a","\ud800":"x"}`, `"\ud800"`, `["\ud800"]`,
	`{"key":"\ud83d\ude00 \\ud800 \"q\" \u00e9\n","ttl":"1m"}`, `{"key":"a","owner":5}`, `{"key":"a","limit":"x"}`,
	`{"key":"a"`, `{"key":"a"} {}`, `{"key":"a"}x`, `{"keys":["a","b"],"ttl":"1s"}`, `{"keys":"a"}`, `{"keys":[null,"b"]}`,
	`{"key":"a","ttl":5}`, `{"key":"a","ttl":null}`, `{"key":"a","ttl_ms":"5"}`, `{"key":"a","shared":true}`, `{"shared":"true"}`,
	`{"key":"a","limit":1e2}`, `{"key":"a","limit":-0}`, `{"key":"a","limit":1.0}`, `{"ttl":"1s","ttl_ms":5}`,
	`{"ops":[{"op":"acquire","body": { "key" : "a\/b" } }]}`, `{"ops":[{"op":"acquire","body":{"key":"a"},"BODY":1}]}`,
	`{"ops":[{"op":"acquire","body":{"k":1,"k":2}}]}`, `{"ops":null}`, `{"ops":[null]}`, `{"id":"x","ID":"y"}`,
	`{}`, ` {} `, `null`, `{"key":"a",}`, `{"key":"\u0000"}`, `{"key":"a\/b","owner":"\u0030"}`, `{"metadata":"\t"}`,
}

func TestStrictDecodingAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range append(strictSeeds, fastDecodeSeeds...) {
		checkStrictDecoding(t, []byte(s))
	}
}

func FuzzStrictDecoding(f *testing.F) {
	for _, s := range append(strictSeeds, fastDecodeSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkStrictDecoding(t, body)
	})
}
