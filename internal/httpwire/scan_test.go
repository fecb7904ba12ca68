package httpwire

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPlainStringDeclinesWhatNeedsDecoding(t *testing.T) {
	b := []byte(` "abc" `)
	from, to, ok := plainString(b, 1)
	assert.True(t, ok)
	assert.Equal(t, "abc", string(b[from:to]))
	assert.Equal(t, byte('"'), b[to], "to is the closing quote")
	for _, s := range []string{`"a\"b"`, "\"a\nb\"", `"open`, `abc`, ``} {
		_, _, ok := plainString([]byte(s), 0)
		assert.False(t, ok, "%q", s)
	}
	_, _, ok = plainString(b, 99)
	assert.False(t, ok, "an offset past the end is nothing")
}

func TestValueEndSpansNestedValues(t *testing.T) {
	for _, tc := range []struct{ in, value string }{
		{`{"a":[1,{"b":"}"}]},`, `{"a":[1,{"b":"}"}]}`},
		{`"x\"y",`, `"x\"y"`},
		{`123}`, `123`},
		{`[true,null]]`, `[true,null]`},
	} {
		end, ok := valueEnd([]byte(tc.in), 0)
		if assert.True(t, ok, tc.in) {
			assert.Equal(t, tc.value, tc.in[:end])
		}
	}
	_, ok := valueEnd([]byte(`{"a":"open`), 0)
	assert.False(t, ok, "an unterminated string")
}

func TestObjectArrayReadsOnlyItsShape(t *testing.T) {
	number := func(b []byte, i int) (int, bool) {
		end, ok := valueEnd(b, i)
		return end, ok && json.Valid(b[i:end])
	}
	count := func(s string) (int, bool) {
		n := 0
		ok := objectArray([]byte(s), "ops", func(b []byte, i int) (int, bool) {
			n++
			return number(b, i)
		})
		return n, ok
	}
	for s, want := range map[string]int{`{"ops":[]}`: 0, ` { "ops" : [ 1 , 2 ,3 ] } `: 3, "{\"ops\":[1]}\n": 1} {
		n, ok := count(s)
		assert.True(t, ok, s)
		assert.Equal(t, want, n, s)
	}
	for _, s := range []string{`{"ops":[1,]}`, `{"ops":[1]`, `{"ops":[1]} x`, `{"other":[1]}`, `{"ops":1}`, `["ops"]`, `{"ops":[1],"x":2}`, ``} {
		_, ok := count(s)
		assert.False(t, ok, s)
	}
	assert.False(t, objectArray([]byte(`{"ops":[1]}`), "ops", func([]byte, int) (int, bool) { return 0, false }), "an item that declines")
	assert.False(t, objectArray([]byte(`{"ops":[1]}`), "ops", func(_ []byte, i int) (int, bool) { return i, true }), "an item that reads nothing")
}

func TestOffsetsOutsideTheInput(t *testing.T) {
	b := []byte(`{}`)
	assert.False(t, at(b, -1, '{'))
	assert.False(t, at(b, 2, '}'))
	assert.True(t, hasPrefixAt(b, 0, `{}`))
	assert.False(t, hasPrefixAt(b, 1, `}}`))
	assert.False(t, hasPrefixAt(b, 3, ``))
	assert.Equal(t, 2, skipSpace(b, 2))
}
