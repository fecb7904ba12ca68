package api

import (
	"encoding/json"
	"strconv"
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
