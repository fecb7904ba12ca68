package httpwire

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkDecodeAnswer: whatever decodeAnswer accepts, json.Unmarshal accepts
// too and decodes to the same value; what it declines it leaves untouched.
func checkDecodeAnswer(t *testing.T, payload []byte) {
	for _, target := range []func() any{
		func() any { return new(LeaseResponse) },
		func() any { return new(ReleaseResponse) },
		func() any { return new(BatchResponse) },
	} {
		fast, slow := target(), target()
		if !DecodeAnswer(payload, fast) {
			assert.Equal(t, target(), fast, "declining %q changed the value", payload)
			continue
		}
		if !assert.NoError(t, json.Unmarshal(payload, slow), "decodeAnswer took %q into %T, which json.Unmarshal refuses", payload, fast) {
			continue
		}
		assert.Equal(t, slow, fast, "decodeAnswer and json.Unmarshal disagree on %q into %T", payload, fast)
	}
}

var decodeAnswerSeeds = []string{
	`{"key":"a","owner":"o","token":7,"ttl_ms":30000,"remaining_ms":29999}`,
	`{"key_b64":"YQ==","owner":"o","token":18446744073709551615,"ttl_ms":0,"remaining_ms":-1}`,
	`{"key":"a","released":true}`, `{"key":"a","released":false} `, `{"key":"a","released":null}`,
	`{"key":"a","owner":"o","token":-1}`, `{"key":"a","ttl_ms":1.5}`, `{"key":"a","ttl_ms":1e3}`, `{"key":"a","ttl_ms":01}`,
	`{"KEY":"a"}`, `{"key":"a","key":"b"}`, `{"key":"a\"b"}`, `{"key":"a","extra":1}`, `{"key":"a"}x`, `{}`, `[]`,
	`{"key":"a","ttl_ms":99999999999999999999}`, `{"key":"é","owner":"<&>"}`, `{"key":"a","released":truex}`,
	`{"results":[{"status":200,"body":{"key":"a","owner":"o","token":1,"ttl_ms":1,"remaining_ms":1}},{"status":409,"body":{"error":{"code":"not_held","message":"a \"b\" [c]"}}}]}`,
	`{"results":[]}`, `{"results":[{"status":200,"body":1}]}`, `{"results":[{"status":200,"body":"x"}]}`,
	`{"results":[{"status":200,"body":{"a":[1,{"b":"}"}]}}]}`, `{"results":[{"status":0200,"body":{}}]}`,
	`{"results":[{"status":200,"body":{"a":}}]}`, `{"results":[{"status":200,"body":{}}],"x":1}`,
	`{"results":[{"body":{},"status":200}]}`,
}

func TestDecodeAnswerAgreesWithJSON(t *testing.T) {
	for _, s := range decodeAnswerSeeds {
		checkDecodeAnswer(t, []byte(s))
	}
	var lease LeaseResponse
	require.True(t, DecodeAnswer([]byte(decodeAnswerSeeds[0]), &lease), "a plain lease takes the fast path")
	assert.Equal(t, LeaseResponse{KeyOut: KeyOut{Key: "a"}, Owner: "o", Token: 7, TTLMS: 30000, RemainingMS: 29999}, lease)
	var batch BatchResponse
	require.True(t, DecodeAnswer([]byte(decodeAnswerSeeds[19]), &batch))
	assert.Len(t, batch.Results, 2)
}

func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range decodeAnswerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		checkDecodeAnswer(t, payload)
	})
}

// The hand-written answers are json.Marshal's, byte for byte, and are in
// force for the types as they are.
func TestMarshalAnswerIsJSONs(t *testing.T) {
	require.True(t, fastAnswers, "the hand-written encoding no longer matches json.Marshal: a field was added to LeaseResponse or ReleaseResponse; update appendAnswer")
	for _, v := range []any{
		LeaseResponse{KeyOut: MakeKeyOut("jobs/a"), Owner: "0123456789abcdef0123456789abcdef", Token: 1<<64 - 1, TTLMS: 30000, RemainingMS: -1},
		LeaseResponse{KeyOut: MakeKeyOut("\xff\x00"), Owner: "o"},
		LeaseResponse{KeyOut: MakeKeyOut("a<b>&\"c\\\u2028é"), Owner: "o"},
		ReleaseResponse{KeyOut: MakeKeyOut("jobs/a"), Released: true},
		ReleaseResponse{},
		ErrorBody{Error: ErrorDetail{Code: "x"}},
	} {
		want, err := json.Marshal(v)
		require.NoError(t, err)
		got, err := EncodeAnswer(v)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got))
	}
}
