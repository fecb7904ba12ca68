package apiserver

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// TestStrictJSONBodies: what encoding/json alone would accept silently (a
// field name in another letter case, a field given twice, a lone surrogate
// escape that it turns into U+FFFD) is refused with 400 bad_request naming
// the field, and nothing is taken.
func TestStrictJSONBodies(t *testing.T) {
	n := newTestNode(t, Config{})
	holder := n.do(t, "POST", "/v1/acquire", `{"key":"held","ttl":"1m"}`)
	require.Equal(t, http.StatusOK, holder.status, holder.raw)
	owner := holder.body["owner"].(string)

	cases := []struct {
		name, path, body string
		field            string // "" when no field is at fault
	}{
		{"field name in upper case", "/v1/acquire", `{"KEY":"a","ttl":"1s"}`, "KEY"},
		{"field name in mixed case", "/v1/acquire", `{"key":"a","Ttl":"1s"}`, "Ttl"},
		{"duplicate field", "/v1/acquire", `{"key":"a","key":"b","ttl":"1s"}`, "key"},
		{"duplicate field, same value", "/v1/acquire", `{"key":"a","ttl":"1s","ttl":"1s"}`, "ttl"},
		{"duplicate by case", "/v1/acquire", `{"key":"a","Key":"b","ttl":"1s"}`, "Key"},
		{"unknown field", "/v1/acquire", `{"key":"a","ttl":"1s","colour":"red"}`, "colour"},
		{"lone high surrogate", "/v1/acquire", `{"key":"\ud800SUR","ttl":"1s"}`, "key"},
		{"lone low surrogate", "/v1/acquire", `{"key":"\udfffSUR","ttl":"1s"}`, "key"},
		{"high surrogate at the end", "/v1/acquire", `{"key":"x\uDBFF","ttl":"1s"}`, "key"},
		{"two high surrogates", "/v1/acquire", `{"key":"\ud800\ud800","ttl":"1s"}`, "key"},
		{"lone surrogate in the owner", "/v1/acquire", `{"key":"a","ttl":"1s","owner":"\ud800"}`, "owner"},
		{"lone surrogate in a name", "/v1/acquire", `{"key":"a","ttl":"1s","\ud800":"x"}`, ""},
		{"release owner twice", "/v1/release", `{"key":"held","owner":"` + owner + `","owner":"` + owner + `"}`, "owner"},
		{"release in upper case", "/v1/release", `{"KEY":"held","owner":"` + owner + `"}`, "KEY"},
		{"extend ttl twice", "/v1/extend", `{"key":"held","owner":"` + owner + `","ttl":"1s","ttl":"1h"}`, "ttl"},
		{"extend in upper case", "/v1/extend", `{"key":"held","OWNER":"` + owner + `","ttl":"1s"}`, "OWNER"},
		// encoding/json matched the names of a batch's operation
		// case-insensitively: json v2 holds them to the rule too.
		{"batch op in upper case", "/v1/batch", `{"ops":[{"OP":"acquire","body":{"key":"a","ttl":"1s"}}]}`, "OP"},
		{"batch body twice by case", "/v1/batch", `{"ops":[{"op":"acquire","body":{"key":"a","ttl":"1s"},"Body":{}}]}`, "Body"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := n.do(t, "POST", tc.path, tc.body)
			assert.Equal(t, http.StatusBadRequest, a.status, a.raw)
			assert.Equal(t, api.CodeBadRequest, a.errorCode(), a.raw)
			if tc.field != "" {
				assert.Equal(t, tc.field, a.errorField("field"), a.raw)
				assert.Contains(t, a.errorField("message"), tc.field, "the message names the field")
			}
		})
	}
	list, err := n.store.List(context.Background(), lock.ListRequest{})
	require.NoError(t, err)
	require.Len(t, list, 1, "nothing but the first key was taken")
	assert.Equal(t, "held", list[0].Key)
}

// TestStrictJSONAcceptsValidEscapes: a surrogate pair, escaped quotes and
// backslashes and other escapes reach the store as the characters they
// stand for; the check refuses only what is not text.
func TestStrictJSONAcceptsValidEscapes(t *testing.T) {
	n := newTestNode(t, Config{})
	a := n.do(t, "POST", "/v1/acquire", `{"key":"\ud83d\ude00 \\ud800 \"q\" \u00e9\n","ttl":"1m"}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	want := "\U0001F600 \\ud800 \"q\" é\n"
	assert.Equal(t, want, a.body["key"])
	info, err := n.store.Inspect(context.Background(), want)
	require.NoError(t, err)
	assert.True(t, info.Locked)
}

// TestLoneSurrogatesAreNotOneKey: the keys of the issue, which encoding/json
// would all have made "\uFFFDSUR", are refused rather than merged into one lock.
func TestLoneSurrogatesAreNotOneKey(t *testing.T) {
	n := newTestNode(t, Config{})
	first := n.do(t, "POST", "/v1/acquire", `{"key":"\ufffdSUR","ttl":"1m"}`)
	require.Equal(t, http.StatusOK, first.status, first.raw)
	for _, body := range []string{`{"key":"\ud800SUR","ttl":"1m"}`, `{"key":"\udfffSUR","ttl":"1m"}`} {
		a := n.do(t, "POST", "/v1/acquire", body)
		assert.Equal(t, http.StatusBadRequest, a.status, "%s: %s", body, a.raw)
		assert.Equal(t, api.CodeBadRequest, a.errorCode(), a.raw)
	}
}

// TestHealthzIgnoresQuery: a probe that adds a parameter still sees a
// healthy node as healthy; other routes still refuse unknown parameters.
func TestHealthzIgnoresQuery(t *testing.T) {
	n := newTestNode(t, Config{})
	for _, path := range []string{"/healthz?x=1", "/healthz?verbose", "/healthz?a=1&a=2", "/healthz?%zz"} {
		a := n.do(t, "GET", path, "")
		assert.Equal(t, http.StatusOK, a.status, "%s: %s", path, a.raw)
		assert.Equal(t, "ok", a.body["status"], path)
	}
}

func TestQueryParameterCaseHint(t *testing.T) {
	n := newTestNode(t, Config{})
	a := n.do(t, "GET", "/v1/inspect?Key=a", "")
	assert.Equal(t, http.StatusBadRequest, a.status, a.raw)
	assert.Contains(t, a.errorField("message"), `send "key"`)
}

func TestMetricsIgnoresQuery(t *testing.T) {
	n := newTestNode(t, Config{})
	resp, err := http.Get(n.url + "/metrics?x=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
