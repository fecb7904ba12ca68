package httpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// DecodeRequest decodes a request body, already read, into v (a pointer to
// a request struct): one JSON object, every field name exactly one of v's
// (letter case included) and given once, nothing after it, valid UTF-8 and
// no lone surrogate escape (a JSON decoder would silently turn either into
// U+FFFD and so change the key). Its error is the 400 bad_request answer's
// message, naming the field at fault when there is one.
func DecodeRequest(body []byte, v any) *BodyError {
	if len(bytes.TrimSpace(body)) == 0 {
		return &BodyError{Msg: "api: request body is empty; want a JSON object"}
	}
	if !utf8.Valid(body) {
		return &BodyError{Msg: "api: request body is not valid UTF-8; send keys that are not text as key_b64"}
	}
	if fastDecode(body, v) {
		return nil // request.go: what decodeStrict would decode, without its cost
	}
	return decodeStrict(body, v)
}

// BodyError is a refused request body, naming the field when there is one.
type BodyError struct {
	Field string // the field at fault as the body spells it; "" when none is
	Msg   string
}

func (e *BodyError) Error() string { return e.Msg }

// Bodies the fast path declines are decoded in two passes, both with the
// standard library's encoding/json (encoding/json/v2, which could refuse
// all of this by itself, needs GOEXPERIMENT=jsonv2 in this toolchain,
// which a program embedding a node cannot be asked to set):
//
//  1. checkStrictJSON walks the body token by token (json.Decoder.Token) and
//     refuses what encoding/json's Decoder would silently accept: a field
//     name that is not exactly one the route takes (encoding/json matches
//     names case-insensitively, so {"KEY":...} would be "key"), a field given
//     twice (encoding/json keeps the last), and a string with a lone UTF-16
//     surrogate escape ("\ud800"), which encoding/json turns into U+FFFD, so
//     that different keys would become one lock.
//  2. json.Decoder with DisallowUnknownFields fills the request struct.

// decodeStrict decodes body, valid UTF-8, into v as DecodeRequest says.
func decodeStrict(body []byte, v any) *BodyError {
	if e := checkStrictJSON(body, FieldNames(reflect.TypeOf(v).Elem())); e != nil {
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &BodyError{Msg: fmt.Sprintf("api: malformed JSON body: %v", err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &BodyError{Msg: "api: unexpected data after the JSON object"}
	}
	return nil
}

// FieldNames lists the exact JSON names of struct type t's fields,
// those of embedded structs included.
func FieldNames(t reflect.Type) []string {
	if v, ok := fieldNameCache.Load(t); ok {
		return v.([]string)
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			names = append(names, FieldNames(f.Type)...)
			continue
		}
		if name, ok := jsonFieldName(f); ok {
			names = append(names, name)
		}
	}
	fieldNameCache.Store(t, names)
	return names
}

var fieldNameCache sync.Map // reflect.Type -> []string

// checkStrictJSON checks body, one JSON value that must be an object whose
// field names are exactly among allowed, each at most once, with no lone
// surrogate escape in any string. Nested objects (which no request has) are
// checked for duplicates only. Syntax errors are left to the decoder, which
// reports them with an offset.
func checkStrictJSON(body []byte, allowed []string) *BodyError {
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
					e.Msg = "api: a field name: " + e.Msg[len("api: "):] // not this name: it is no text
				case field != "":
					e.Field = field
					e.Msg = fmt.Sprintf("api: field %q: %s", field, e.Msg[len("api: "):])
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
				return &BodyError{Field: name, Msg: fmt.Sprintf("api: field %q is given twice; give each field once", name)}
			}
			top.seen[name] = true
			if len(stack) == 1 {
				if !containsExact(allowed, name) {
					return unknownField(name, allowed)
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

func containsExact(list []string, s string) bool {
	for _, a := range list {
		if a == s {
			return true
		}
	}
	return false
}

// unknownField explains a field name the route does not take, pointing to
// the right spelling when only the letter case differs.
func unknownField(name string, allowed []string) *BodyError {
	for _, a := range allowed {
		if strings.EqualFold(a, name) {
			return &BodyError{Field: name, Msg: fmt.Sprintf("api: unknown field %q: field names are case-sensitive; send %q", name, a)}
		}
	}
	if len(allowed) == 0 {
		return &BodyError{Field: name, Msg: fmt.Sprintf("api: unknown field %q: this route takes no fields (send no body, or {})", name)}
	}
	return &BodyError{Field: name, Msg: fmt.Sprintf("api: unknown field %q (this route takes %s)", name, strings.Join(allowed, ", "))}
}

// checkSurrogates refuses a \u escape in raw that is half of a UTF-16
// surrogate pair without its other half. raw is JSON text that the
// decoder found well formed, where a backslash appears only inside
// strings, so escapes can be read without tracking strings.
func checkSurrogates(body []byte) *BodyError {
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

func loneSurrogate(escape []byte) *BodyError {
	return &BodyError{Msg: fmt.Sprintf(`api: the escape %s is half of a UTF-16 surrogate pair without its other half, which is no character; send keys that are not text as key_b64`, escape)}
}

// jsonFieldName is the name encoding/json gives struct field f (its json
// tag's, else the Go name), or false when encoding/json leaves f out
// (unexported, or tagged "-"). Embedded structs are the caller's to walk.
func jsonFieldName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch name {
	case "-":
		return "", false
	case "":
		return f.Name, true
	}
	return name, true
}
