package api

import (
	"encoding/json"
	"reflect"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/raftlock/raftlock/internal/jsonscan"
)

// A fast path for the answers the client reads most: a lease, a release and
// a batch's envelope. encoding/json's reflection costs more CPU than the
// rest of reading such an answer; these answers are flat objects of plain
// strings, whole numbers and booleans, which decodeAnswer reads in one pass.
// It decodes an answer only when it can tell that json.Unmarshal would give
// the very same value: each member's name exactly one of the type's JSON
// names and given once, strings without escapes, whole numbers that fit,
// nothing after the object. Anything else (an escape, null, a name it does
// not know, as when a newer node adds a field) makes it decline, and
// json.Unmarshal runs.

// decodeAnswer decodes payload into out as json.Unmarshal would, and
// reports whether it did; false leaves out as it was.
func decodeAnswer(payload []byte, out any) bool {
	if !utf8.Valid(payload) {
		return false // json.Unmarshal would turn what is not UTF-8 into U+FFFD
	}
	switch v := out.(type) {
	case *LeaseResponse:
		var r LeaseResponse
		ok := scanAnswer(payload, func(name string, s string, n int64, u uint64, kind answerValue) bool {
			switch {
			case name == "key" && kind == answerString:
				r.Key = s
			case name == "key_b64" && kind == answerString:
				r.KeyB64 = s
			case name == "owner" && kind == answerString:
				r.Owner = s
			case name == "token" && kind == answerUint:
				r.Token = u
			case name == "ttl_ms" && kind&answerInt != 0:
				r.TTLMS = n
			case name == "remaining_ms" && kind&answerInt != 0:
				r.RemainingMS = n
			default:
				return false
			}
			return true
		})
		if ok {
			*v = r
		}
		return ok
	case *ReleaseResponse:
		var r ReleaseResponse
		ok := scanAnswer(payload, func(name string, s string, _ int64, _ uint64, kind answerValue) bool {
			switch {
			case name == "key" && kind == answerString:
				r.Key = s
			case name == "key_b64" && kind == answerString:
				r.KeyB64 = s
			case name == "released" && kind == answerBool:
				r.Released = s == "true"
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

// answerValue is the kind of a member's value; a whole number that fits
// both int64 and uint64 is both.
type answerValue int

const (
	answerString answerValue = 1 << iota
	answerBool
	answerInt
	answerUint
)

// scanAnswer reads a flat object, calling member for each member in order
// (the string's content for strings, "true"/"false" for booleans); it
// reports false when the object is not one it reads, a name repeats or
// member declines one.
func scanAnswer(b []byte, member func(name, s string, n int64, u uint64, kind answerValue) bool) bool {
	i := jsonscan.SkipSpace(b, 0)
	if !jsonscan.At(b, i, '{') {
		return false
	}
	i = jsonscan.SkipSpace(b, i+1)
	if jsonscan.At(b, i, '}') {
		return jsonscan.SkipSpace(b, i+1) == len(b)
	}
	var seen [8]string
	nseen := 0
	for {
		nf, nt, ok := jsonscan.PlainString(b, i)
		if !ok || nseen == len(seen) {
			return false
		}
		name := string(b[nf:nt])
		for _, s := range seen[:nseen] {
			if s == name {
				return false
			}
		}
		seen[nseen] = name
		nseen++
		i = jsonscan.SkipSpace(b, nt+1)
		if !jsonscan.At(b, i, ':') {
			return false
		}
		i = jsonscan.SkipSpace(b, i+1)
		var (
			s    string
			n    int64
			u    uint64
			kind answerValue
		)
		switch {
		case jsonscan.At(b, i, '"'):
			vf, vt, ok := jsonscan.PlainString(b, i)
			if !ok {
				return false
			}
			s, kind, i = string(b[vf:vt]), answerString, vt+1
		case jsonscan.HasPrefixAt(b, i, "true"):
			s, kind, i = "true", answerBool, i+4
		case jsonscan.HasPrefixAt(b, i, "false"):
			s, kind, i = "false", answerBool, i+5
		default:
			j := i
			if jsonscan.At(b, j, '-') {
				j++
			}
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				j++
			}
			digits := b[i:j]
			if len(digits) == 0 || digits[0] == '-' && len(digits) == 1 ||
				(digits[0] == '0' && len(digits) > 1) || (len(digits) > 2 && digits[0] == '-' && digits[1] == '0') {
				return false // not a plain JSON integer (leading zeros are not JSON)
			}
			if x, err := strconv.ParseInt(string(digits), 10, 64); err == nil {
				n, kind = x, kind|answerInt
			}
			if x, err := strconv.ParseUint(string(digits), 10, 64); err == nil {
				u, kind = x, kind|answerUint
			}
			if kind == 0 {
				return false
			}
			i = j
		}
		if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
			return false
		}
		if kind == answerInt|answerUint {
			// A number that fits both: let member take it as either.
			if !member(name, s, n, u, answerInt) && !member(name, s, n, u, answerUint) {
				return false
			}
		} else if !member(name, s, n, u, kind) {
			return false
		}
		i = jsonscan.SkipSpace(b, i)
		if jsonscan.At(b, i, ',') {
			i = jsonscan.SkipSpace(b, i+1)
			continue
		}
		return jsonscan.At(b, i, '}') && jsonscan.SkipSpace(b, i+1) == len(b)
	}
}

// decodeBatchResponse reads {"results":[{"status":N,"body":VALUE},...]},
// each VALUE checked by json.Valid.
func decodeBatchResponse(b []byte, out *BatchResponse) bool {
	results := []BatchResult{}
	ok := jsonscan.ObjectArray(b, "results", func(b []byte, i int) (int, bool) {
		const head = `{"status":`
		if !jsonscan.HasPrefixAt(b, i, head) {
			return 0, false
		}
		i += len(head)
		j := i
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		status, err := strconv.Atoi(string(b[i:j]))
		if err != nil || j-i > 1 && b[i] == '0' {
			return 0, false
		}
		const mid = `,"body":`
		if !jsonscan.HasPrefixAt(b, j, mid) {
			return 0, false
		}
		i = j + len(mid)
		end, ok := jsonscan.ValueEnd(b, i)
		if !ok || !jsonscan.At(b, end, '}') || !json.Valid(b[i:end]) {
			return 0, false
		}
		results = append(results, BatchResult{Status: status, Body: append(json.RawMessage(nil), b[i:end]...)})
		return end + 1, true
	})
	if !ok {
		return false
	}
	out.Results = results
	return true
}

// Requests, the other way: encodeRequest writes the bodies of a lock cycle
// (acquire, release, extend) by hand when they carry only the fields a
// lock.Client sends (key or key_b64, owner, ttl, wait, metadata), each
// string printable ASCII without the characters json.Marshal escapes;
// byte for byte what json.Marshal writes, which does everything else.
// fastRequests checks at start that the types still have the fields this
// code knows and that it still writes what json.Marshal writes, so that a
// field added to a request turns the fast path off rather than go missing.

// encodeRequest is json.Marshal(v).
func encodeRequest(v any) ([]byte, error) {
	if b, ok := appendRequest(make([]byte, 0, 128), v); ok {
		return b, nil
	}
	return json.Marshal(v)
}

var fastRequests = func() bool {
	if reflect.TypeFor[KeyFields]().NumField() != 2 || reflect.TypeFor[AcquireRequest]().NumField() != 13 ||
		reflect.TypeFor[ReleaseRequest]().NumField() != 2 || reflect.TypeFor[ExtendRequest]().NumField() != 4 {
		return false
	}
	key, b64, owner, meta := "k", "aw==", "o", "m"
	for _, v := range []any{
		AcquireRequest{KeyFields: KeyFields{Key: &key, KeyB64: &b64}, TTL: NewDuration(time.Minute), Wait: NewDuration(time.Second), Owner: &owner, Metadata: &meta},
		AcquireRequest{},
		ReleaseRequest{KeyFields: KeyFields{Key: &key, KeyB64: &b64}, Owner: &owner},
		ExtendRequest{KeyFields: KeyFields{Key: &key, KeyB64: &b64}, Owner: &owner, TTL: NewDuration(time.Minute)},
	} {
		want, err := json.Marshal(v)
		got, ok := appendRequestUnchecked(nil, v)
		if err != nil || !ok || string(got) != string(want) {
			return false
		}
	}
	return true
}()

// appendRequest appends v's JSON when v is a request it writes by hand.
func appendRequest(out []byte, v any) ([]byte, bool) {
	if !fastRequests {
		return out, false
	}
	return appendRequestUnchecked(out, v)
}

func appendRequestUnchecked(out []byte, v any) ([]byte, bool) {
	w := objectWriter{out: append(out, '{')}
	switch r := v.(type) {
	case AcquireRequest:
		if r.TTLMS != nil || r.WaitMS != nil || r.Session != nil || r.Kind != nil || r.Limit != nil || r.Shared != nil || r.Keys != nil || r.KeysB64 != nil {
			return out, false
		}
		w.keyFields(r.KeyFields)
		w.duration("ttl", r.TTL)
		w.duration("wait", r.Wait)
		w.str("owner", r.Owner)
		w.str("metadata", r.Metadata)
	case ReleaseRequest:
		w.keyFields(r.KeyFields)
		w.str("owner", r.Owner)
	case ExtendRequest:
		if r.TTLMS != nil {
			return out, false
		}
		w.keyFields(r.KeyFields)
		w.str("owner", r.Owner)
		w.duration("ttl", r.TTL)
	default:
		return out, false
	}
	if w.fail {
		return out, false
	}
	return append(w.out, '}'), true
}

// objectWriter appends the members of a JSON object; fail is set by a
// string it cannot write as it is.
type objectWriter struct {
	out  []byte
	n    int // members written
	fail bool
}

func (w *objectWriter) member(name, value string) {
	if !plainJSON(value) {
		w.fail = true
	}
	if w.n > 0 {
		w.out = append(w.out, ',')
	}
	w.n++
	w.out = append(w.out, '"')
	w.out = append(w.out, name...)
	w.out = append(w.out, `":"`...)
	w.out = append(w.out, value...)
	w.out = append(w.out, '"')
}

func (w *objectWriter) str(name string, s *string) {
	if s != nil {
		w.member(name, *s)
	}
}

func (w *objectWriter) duration(name string, d *Duration) {
	if d != nil {
		w.member(name, d.d.String())
	}
}

func (w *objectWriter) keyFields(k KeyFields) {
	w.str("key", k.Key)
	w.str("key_b64", k.KeyB64)
}

// plainJSON reports whether json.Marshal writes s as it is between quotes:
// printable ASCII but for " \ < > &.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
