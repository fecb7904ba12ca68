package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/raftlock/raftlock/internal/httpwire"
)

// Bodies the fast path (httpwire.DecodeFast) declines are decoded by
// github.com/go-json-experiment/json, the encoding/json/v2 proposal's own
// implementation (the standard library's copy still needs GOEXPERIMENT=jsonv2
// in this toolchain, which a program embedding a node cannot be asked to
// set), which is strict where encoding/json is not: it refuses a field name
// that is not exactly one of the struct's (encoding/json matches names
// case-insensitively, so {"KEY":...} would be "key"), a name given twice
// (encoding/json keeps the last) and a string with a lone UTF-16 surrogate
// escape ("\ud800", which encoding/json turns into U+FFFD, so that
// different keys would become one lock); RejectUnknownMembers refuses the
// names the route does not take.
//
// A refused body is then read once more by checkBody, the two passes with
// encoding/json that decoded bodies before, only to say what is wrong in
// the words the API has always used (and that name the field at fault):
// refusals are rare and cheap, accepted bodies are not.

// strictJSON is json v2 as decodeStrict uses it: its defaults (exact
// names, no duplicates, no invalid UTF-8 or lone surrogates), and no
// unknown names.
var strictJSON = jsonv2.RejectUnknownMembers(true)

// bodyError is a refused request body, naming the field when there is one.
type bodyError struct {
	field string
	msg   string
}

func (e *bodyError) Error() string { return e.msg }

// decodeStrict decodes body, valid UTF-8, into v as readJSON says.
func decodeStrict(body []byte, v any) *bodyError {
	err := jsonv2.Unmarshal(body, v, strictJSON)
	if err == nil {
		return nil
	}
	if e := checkBody(body, reflect.New(reflect.TypeOf(v).Elem()).Interface()); e != nil {
		return e
	}
	return v2Refusal(err)
}

// v2Refusal words what json v2 refused and encoding/json with its checks
// would have taken: a name in a nested object (a batch's operation) that
// is not exactly one of its fields, which checkStrictJSON does not look at
// and encoding/json matched case-insensitively (json v2 holds every object
// to the rule docs/http.md states).
func v2Refusal(err error) *bodyError {
	var serr *jsonv2.SemanticError
	if errors.As(err, &serr) && errors.Is(serr.Err, jsonv2.ErrUnknownName) && serr.GoType != nil && serr.GoType.Kind() == reflect.Struct {
		return unknownField(serr.JSONPointer.LastToken(), jsonPath(serr.JSONPointer.Parent()), httpwire.FieldNames(serr.GoType))
	}
	return &bodyError{msg: fmt.Sprintf("api: malformed JSON body: %v", err)}
}

// jsonPath is where p points, as a program would write it: ops[0].body.
func jsonPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.ParseUint(tok, 10, 0); err == nil {
			fmt.Fprintf(&b, "[%s]", tok)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// checkBody decodes body into v in two passes, both with encoding/json,
// and says what is wrong with it, as the API always has:
//
//  1. checkStrictJSON walks the body token by token (json.Decoder.Token)
//     and refuses what encoding/json's Decoder would silently accept (see
//     above): a name that is not exactly one the route takes, a name given
//     twice, a lone surrogate escape.
//  2. json.Decoder with DisallowUnknownFields fills v.
func checkBody(body []byte, v any) *bodyError {
	if e := checkStrictJSON(body, httpwire.FieldNames(reflect.TypeOf(v).Elem())); e != nil {
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &bodyError{msg: fmt.Sprintf("api: malformed JSON body: %v", err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &bodyError{msg: "api: unexpected data after the JSON object"}
	}
	return nil
}

// checkStrictJSON checks body, one JSON value that must be an object whose
// field names are exactly among allowed, each at most once, with no lone
// surrogate escape in any string. Nested objects (which no request has) are
// checked for duplicates only. Syntax errors are left to the decoder, which
// reports them with an offset.
func checkStrictJSON(body []byte, allowed []string) *bodyError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	// One frame per open object or array: the names seen so far (objects),
	// and whether the next string token is a field name.
	type frame struct {
		object   bool
		seen     map[string]bool
		wantName bool
	}
	var stack []*frame
	field := "" // the top-level field being read, for errors deeper down
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return nil // malformed: the decoder says where
		}
		if _, ok := tok.(string); ok {
			// The raw text from the previous token's end to this one's
			// holds this string as sent, escapes and all.
			if e := checkSurrogates(body[start:dec.InputOffset()]); e != nil {
				switch {
				case len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].wantName:
					e.msg = "api: a field name: " + e.msg[len("api: "):] // not this name: it is no text
				case field != "":
					e.field = field
					e.msg = fmt.Sprintf("api: field %q: %s", field, e.msg[len("api: "):])
				}
				return e
			}
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.wantName {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].wantName = true
				}
				continue
			}
			name, ok := tok.(string)
			if !ok {
				return nil
			}
			if top.seen[name] {
				return &bodyError{field: name, msg: fmt.Sprintf("api: field %q is given twice; give each field once", name)}
			}
			top.seen[name] = true
			if len(stack) == 1 {
				if !slices.Contains(allowed, name) {
					return unknownField(name, "", allowed)
				}
				field = name
			}
			top.wantName = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, seen: map[string]bool{}, wantName: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			continue // the top-level value ended; the decoder refuses anything after it
		}
		if top := stack[len(stack)-1]; top.object {
			top.wantName = true // a value ended: a name or '}' comes next
		}
	}
}

// unknownField explains a field name the route does not take (in, when
// it is not "", is the nested object it was given in), pointing to the
// right spelling when only the letter case differs.
func unknownField(name, in string, allowed []string) *bodyError {
	where := ""
	if in != "" {
		where = " in " + in
	}
	for _, a := range allowed {
		if strings.EqualFold(a, name) {
			return &bodyError{field: name, msg: fmt.Sprintf("api: unknown field %q%s: field names are case-sensitive; send %q", name, where, a)}
		}
	}
	switch {
	case in != "":
		return &bodyError{field: name, msg: fmt.Sprintf("api: unknown field %q%s (it takes %s)", name, where, strings.Join(allowed, ", "))}
	case len(allowed) == 0:
		return &bodyError{field: name, msg: fmt.Sprintf("api: unknown field %q: this route takes no fields (send no body, or {})", name)}
	}
	return &bodyError{field: name, msg: fmt.Sprintf("api: unknown field %q (this route takes %s)", name, strings.Join(allowed, ", "))}
}

// checkSurrogates refuses a \u escape in raw that is half of a UTF-16
// surrogate pair without its other half. raw is JSON text that the
// decoder found well formed, where a backslash appears only inside
// strings, so escapes can be read without tracking strings.
func checkSurrogates(body []byte) *bodyError {
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		if i+1 >= len(body) {
			return nil
		}
		if body[i+1] != 'u' {
			i++ // a two-character escape: skip what it escapes (\\ or \")
			continue
		}
		r, ok := hex4(body, i+2)
		if !ok {
			return nil
		}
		switch {
		case utf16.IsSurrogate(rune(r)) && r < 0xdc00: // a high (first) half
			if i+11 < len(body) && body[i+6] == '\\' && body[i+7] == 'u' {
				if lo, ok := hex4(body, i+8); ok && lo >= 0xdc00 && lo <= 0xdfff {
					i += 11
					continue
				}
			}
			return loneSurrogate(body[i : i+6])
		case utf16.IsSurrogate(rune(r)): // a low (second) half without a first
			return loneSurrogate(body[i : i+6])
		}
		i += 5
	}
	return nil
}

func hex4(b []byte, at int) (uint64, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[at:at+4]), 16, 16)
	return v, err == nil
}

func loneSurrogate(escape []byte) *bodyError {
	return &bodyError{msg: fmt.Sprintf(`api: the escape %s is half of a UTF-16 surrogate pair without its other half, which is no character; send keys that are not text as key_b64`, escape)}
}
