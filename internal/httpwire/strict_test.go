package httpwire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
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
	allowed := FieldNames(reflect.TypeOf(AcquireRequest{}))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return // DecodeRequest refuses these first
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
