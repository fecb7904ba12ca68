package httpwire

import (
	"encoding/json"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// Answers: the node writes them (EncodeAnswer, AppendAnswer) and the
// client reads them (DecodeAnswer), both here, so that the two fast paths
// of an answer's JSON cannot drift apart.
//
// The node writes the two answers of every lock cycle (a lease, a release)
// by hand, byte for byte what json.Marshal writes for them, when their
// strings need no escaping (printable ASCII without the characters
// json.Marshal escapes: " \ < > &); anything else goes to json.Marshal.
// fastAnswers checks at start that the hand-written encoding still matches
// json.Marshal for values with every field set, so that a field added to
// either type turns it off rather than go missing.
//
// The client reads a lease, a release and a batch's envelope (batch.go) in
// one pass: encoding/json's reflection costs more CPU than the rest of
// reading such an answer. DecodeAnswer decodes an answer only when it can
// tell that json.Unmarshal would give the very same value: each member's
// name exactly one of the type's JSON names and given once, strings without
// escapes, whole numbers that fit, nothing after the object. Anything else
// (an escape, null, a name it does not know, as when a newer node adds a
// field) makes it decline, and json.Unmarshal runs.

// DecodeAnswer decodes payload into out as json.Unmarshal would, and
// reports whether it did; false leaves out as it was.
func DecodeAnswer(payload []byte, out any) bool {
	if !utf8.Valid(payload) {
		return false // json.Unmarshal would turn what is not UTF-8 into U+FFFD
	}
	switch v := out.(type) {
	case *LeaseResponse:
		var r LeaseResponse
		ok := decodeFlatAnswer(payload, func(name, raw []byte, kind memberKind) bool {
			var err error
			switch {
			case kind == memberString && string(name) == "key":
				r.Key = string(raw)
			case kind == memberString && string(name) == "key_b64":
				r.KeyB64 = string(raw)
			case kind == memberString && string(name) == "owner":
				r.Owner = string(raw)
			case kind == memberNumber && string(name) == "token" && wholeNumber(raw):
				r.Token, err = strconv.ParseUint(string(raw), 10, 64)
			case kind == memberNumber && string(name) == "ttl_ms" && wholeNumber(raw):
				r.TTLMS, err = strconv.ParseInt(string(raw), 10, 64)
			case kind == memberNumber && string(name) == "remaining_ms" && wholeNumber(raw):
				r.RemainingMS, err = strconv.ParseInt(string(raw), 10, 64)
			default:
				return false
			}
			return err == nil
		})
		if ok {
			*v = r
		}
		return ok
	case *ReleaseResponse:
		var r ReleaseResponse
		ok := decodeFlatAnswer(payload, func(name, raw []byte, kind memberKind) bool {
			switch {
			case kind == memberString && string(name) == "key":
				r.Key = string(raw)
			case kind == memberString && string(name) == "key_b64":
				r.KeyB64 = string(raw)
			case kind == memberBool && string(name) == "released":
				r.Released = string(raw) == "true"
			default:
				return false
			}
			return true
		})
		if ok {
			*v = r
		}
		return ok
	case *BatchResponse:
		return decodeBatchResponse(payload, v)
	}
	return false
}

// decodeFlatAnswer reads payload, one flat object (scanFlatObject) and
// nothing else, calling each for each of its members in order; it
// reports false as soon as each does.
func decodeFlatAnswer(payload []byte, each func(name, raw []byte, kind memberKind) bool) bool {
	var ms [maxFastMembers]member
	n, end, ok := scanFlatObject(payload, skipSpace(payload, 0), &ms)
	if !ok || skipSpace(payload, end) != len(payload) {
		return false
	}
	for _, m := range ms[:n] {
		if !each(payload[m.nameFrom:m.nameTo], payload[m.valueFrom:m.valueTo], m.kind) {
			return false
		}
	}
	return true
}

// EncodeAnswer is json.Marshal(v).
func EncodeAnswer(v any) ([]byte, error) {
	if b, ok := AppendAnswer(make([]byte, 0, 160), v); ok {
		return b, nil
	}
	return json.Marshal(v)
}

var fastAnswers = func() bool {
	for _, v := range []any{LeaseResponse{}, ReleaseResponse{}} {
		sample := reflect.New(reflect.TypeOf(v)).Elem()
		fillSample(sample)
		want, err := json.Marshal(sample.Interface())
		got, ok := appendAnswerUnchecked(nil, sample.Interface())
		if err != nil || !ok || string(got) != string(want) {
			return false
		}
	}
	return true
}()

// AppendAnswer appends v's JSON when v is an answer it writes by hand.
func AppendAnswer(out []byte, v any) ([]byte, bool) {
	if !fastAnswers {
		return out, false
	}
	return appendAnswerUnchecked(out, v)
}

func appendAnswerUnchecked(out []byte, v any) ([]byte, bool) {
	switch a := v.(type) {
	case LeaseResponse:
		if !plainJSON(a.Key) || !plainJSON(a.KeyB64) || !plainJSON(a.Owner) {
			return out, false
		}
		out = appendKeyOut(append(out, '{'), a.KeyOut)
		out = append(append(append(out, `"owner":"`...), a.Owner...), `","token":`...)
		out = strconv.AppendUint(out, a.Token, 10)
		out = strconv.AppendInt(append(out, `,"ttl_ms":`...), a.TTLMS, 10)
		out = strconv.AppendInt(append(out, `,"remaining_ms":`...), a.RemainingMS, 10)
		var ok bool
		if out, ok = appendStrings(out, "keys", a.Keys); !ok {
			return out, false
		}
		if out, ok = appendStrings(out, "keys_b64", a.KeysB64); !ok {
			return out, false
		}
		return append(out, '}'), true
	case ReleaseResponse:
		if !plainJSON(a.Key) || !plainJSON(a.KeyB64) {
			return out, false
		}
		out = appendKeyOut(append(out, '{'), a.KeyOut)
		out = strconv.AppendBool(append(out, `"released":`...), a.Released)
		return append(out, '}'), true
	}
	return out, false
}

// appendStrings appends `,"name":["s",...]` for a multi-key answer's set
// (nothing when it is empty, as omitempty does), when every string is
// plain.
func appendStrings(out []byte, name string, ss []string) ([]byte, bool) {
	if len(ss) == 0 {
		return out, true
	}
	out = append(append(append(out, `,"`...), name...), `":[`...)
	for i, s := range ss {
		if !plainJSON(s) {
			return out, false
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(append(append(out, '"'), s...), '"')
	}
	return append(out, ']'), true
}

// appendKeyOut appends a KeyOut's members (each omitted when empty), each
// followed by a comma: a member always comes after them.
func appendKeyOut(out []byte, k KeyOut) []byte {
	if k.Key != "" {
		out = append(append(append(out, `"key":"`...), k.Key...), `",`...)
	}
	if k.KeyB64 != "" {
		out = append(append(append(out, `"key_b64":"`...), k.KeyB64...), `",`...)
	}
	return out
}

// fillSample sets every field of v to a value json.Marshal does not omit.
func fillSample(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillSample(v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillSample(v.Elem())
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(-7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillSample(v.Index(0))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillSample(k)
		fillSample(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}
