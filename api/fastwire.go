package api

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
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
	i := skipWS(b, 0)
	if !at(b, i, '{') {
		return false
	}
	i = skipWS(b, i+1)
	if at(b, i, '}') {
		return skipWS(b, i+1) == len(b)
	}
	var seen [8]string
	nseen := 0
	for {
		nf, nt, ok := plainString(b, i)
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
		i = skipWS(b, nt+1)
		if !at(b, i, ':') {
			return false
		}
		i = skipWS(b, i+1)
		var (
			s    string
			n    int64
			u    uint64
			kind answerValue
		)
		switch {
		case at(b, i, '"'):
			vf, vt, ok := plainString(b, i)
			if !ok {
				return false
			}
			s, kind, i = string(b[vf:vt]), answerString, vt+1
		case hasPrefixAt(b, i, "true"):
			s, kind, i = "true", answerBool, i+4
		case hasPrefixAt(b, i, "false"):
			s, kind, i = "false", answerBool, i+5
		default:
			j := i
			if at(b, j, '-') {
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
		i = skipWS(b, i)
		if at(b, i, ',') {
			i = skipWS(b, i+1)
			continue
		}
		return at(b, i, '}') && skipWS(b, i+1) == len(b)
	}
}

// decodeBatchResponse reads {"results":[{"status":N,"body":VALUE},...]},
// each VALUE checked by json.Valid.
func decodeBatchResponse(b []byte, out *BatchResponse) bool {
	i := skipWS(b, 0)
	if !at(b, i, '{') {
		return false
	}
	nf, nt, ok := plainString(b, skipWS(b, i+1))
	if !ok || string(b[nf:nt]) != "results" {
		return false
	}
	i = skipWS(b, nt+1)
	if !at(b, i, ':') {
		return false
	}
	i = skipWS(b, i+1)
	if !at(b, i, '[') {
		return false
	}
	i = skipWS(b, i+1)
	results := []BatchResult{}
	if at(b, i, ']') {
		i++
	} else {
		for {
			const head = `{"status":`
			if !hasPrefixAt(b, i, head) {
				return false
			}
			i += len(head)
			j := i
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				j++
			}
			status, err := strconv.Atoi(string(b[i:j]))
			if err != nil || j-i > 1 && b[i] == '0' {
				return false
			}
			const mid = `,"body":`
			if !hasPrefixAt(b, j, mid) {
				return false
			}
			i = j + len(mid)
			end, ok := valueEnd(b, i)
			if !ok || !at(b, end, '}') || !json.Valid(b[i:end]) {
				return false
			}
			results = append(results, BatchResult{Status: status, Body: append(json.RawMessage(nil), b[i:end]...)})
			i = skipWS(b, end+1)
			if at(b, i, ',') {
				i = skipWS(b, i+1)
				continue
			}
			if !at(b, i, ']') {
				return false
			}
			i++
			break
		}
	}
	i = skipWS(b, i)
	if !at(b, i, '}') || skipWS(b, i+1) != len(b) {
		return false
	}
	out.Results = results
	return true
}

// valueEnd finds the end of the JSON value at i (just past it), a nested
// object or array included, skipping strings; json.Valid then checks what
// it spans.
func valueEnd(b []byte, i int) (int, bool) {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			for j++; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
				}
			}
			if j >= len(b) {
				return 0, false
			}
			if depth == 0 {
				return j + 1, true
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j, true // a number or literal ends where its container does
			}
			depth--
			if depth == 0 {
				return j + 1, true
			}
		case ',':
			if depth == 0 {
				return j, true
			}
		}
	}
	return 0, false
}

// plainString reads a JSON string at i without escapes or control
// characters; from and to delimit its content, to is its closing quote.
func plainString(b []byte, i int) (from, to int, ok bool) {
	if !at(b, i, '"') {
		return 0, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return i + 1, j, true
		case c == '\\' || c < 0x20:
			return 0, 0, false
		}
	}
	return 0, 0, false
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func at(b []byte, i int, c byte) bool { return i < len(b) && b[i] == c }

func hasPrefixAt(b []byte, i int, p string) bool {
	return i <= len(b) && len(b)-i >= len(p) && string(b[i:i+len(p)]) == p
}
