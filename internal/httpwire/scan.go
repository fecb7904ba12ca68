package httpwire

import "bytes"

// The byte-level primitives of the fast paths (request.go, answer.go,
// batch.go). Every function takes the whole input b and an offset i into
// it, and never reads outside b: an offset past the end is "nothing there".

// skipSpace returns the offset of the first byte at or after i that is not
// JSON whitespace (len(b) if there is none).
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// at reports whether b[i] is c.
func at(b []byte, i int, c byte) bool { return i >= 0 && i < len(b) && b[i] == c }

// hasPrefixAt reports whether b[i:] starts with p.
func hasPrefixAt(b []byte, i int, p string) bool {
	return i >= 0 && i <= len(b) && len(b)-i >= len(p) && string(b[i:i+len(p)]) == p
}

// plainString reads a JSON string at i that has no escape and no control
// character: from and to delimit its content, and to is its closing
// quote. ok is false for anything else (including a string with an escape,
// which the caller leaves to encoding/json).
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

// valueEnd finds the end of the JSON value at i (the offset just past it),
// a nested object or array included, skipping strings and their escapes.
// It does not check the value's grammar: json.Valid on b[i:end] does.
func valueEnd(b []byte, i int) (end int, ok bool) {
	if i < 0 {
		return 0, false
	}
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

// objectArray reads a whole input that is one object with one member, name
// (a plain string), whose value is an array: {"name": [item, ...]}, with
// nothing but whitespace around it. item reads the element at offset i
// (its first byte) and returns the offset just past it; ObjectArray
// reports false as soon as item does, or when the input has another shape.
// An empty array calls item never and reports true.
func objectArray(b []byte, name string, item func(b []byte, i int) (end int, ok bool)) bool {
	i := skipSpace(b, 0)
	if !at(b, i, '{') {
		return false
	}
	from, to, ok := plainString(b, skipSpace(b, i+1))
	if !ok || string(b[from:to]) != name {
		return false
	}
	i = skipSpace(b, to+1)
	if !at(b, i, ':') {
		return false
	}
	i = skipSpace(b, i+1)
	if !at(b, i, '[') {
		return false
	}
	i = skipSpace(b, i+1)
	if at(b, i, ']') {
		i++
	} else {
		for {
			end, ok := item(b, i)
			if !ok || end <= i {
				return false
			}
			i = skipSpace(b, end)
			if at(b, i, ',') {
				i = skipSpace(b, i+1)
				continue
			}
			if !at(b, i, ']') {
				return false
			}
			i++
			break
		}
	}
	i = skipSpace(b, i)
	return at(b, i, '}') && skipSpace(b, i+1) == len(b)
}

// maxFastMembers bounds the members of a flat object the fast paths read;
// an object with more takes the usual path.
const maxFastMembers = 16

// member is one "name": value of a flat object, as offsets into the body.
type member struct {
	nameFrom, nameTo   int
	valueFrom, valueTo int // a string's without its quotes
	kind               memberKind
}

// memberKind is the kind of a member's value.
type memberKind int

const (
	memberString memberKind = iota + 1
	memberNumber
	memberBool
)

// scanFlatObject reads an object at i whose values are plain strings,
// numbers or booleans, with distinct plain names, at most maxFastMembers of them; end
// is just past its '}'.
func scanFlatObject(b []byte, i int, ms *[maxFastMembers]member) (n, end int, ok bool) {
	if !at(b, i, '{') {
		return 0, 0, false
	}
	i = skipSpace(b, i+1)
	if at(b, i, '}') {
		return 0, i + 1, true
	}
	for {
		if n == maxFastMembers {
			return 0, 0, false
		}
		from, to, ok := plainString(b, i)
		if !ok {
			return 0, 0, false
		}
		for _, prev := range ms[:n] {
			if string(b[prev.nameFrom:prev.nameTo]) == string(b[from:to]) {
				return 0, 0, false
			}
		}
		m := member{nameFrom: from, nameTo: to}
		i = skipSpace(b, to+1)
		if !at(b, i, ':') {
			return 0, 0, false
		}
		i = skipSpace(b, i+1)
		switch {
		case at(b, i, '"'):
			vf, vt, ok := plainString(b, i)
			if !ok {
				return 0, 0, false
			}
			m.valueFrom, m.valueTo, m.kind, i = vf, vt, memberString, vt+1
		case hasPrefixAt(b, i, "true"):
			m.valueFrom, m.valueTo, m.kind, i = i, i+4, memberBool, i+4
		case hasPrefixAt(b, i, "false"):
			m.valueFrom, m.valueTo, m.kind, i = i, i+5, memberBool, i+5
		default:
			j := i
			for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
				j++
			}
			if j == i || !jsonNumber(b[i:j]) {
				return 0, 0, false
			}
			m.valueFrom, m.valueTo, m.kind, i = i, j, memberNumber, j
		}
		ms[n] = m
		n++
		i = skipSpace(b, i)
		if at(b, i, ',') {
			i = skipSpace(b, i+1)
			continue
		}
		if !at(b, i, '}') {
			return 0, 0, false
		}
		return n, i + 1, true
	}
}

// jsonNumber reports whether b is a number in JSON's grammar.
func jsonNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i == len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i == len(b)
}

// wholeNumber reports whether b, a JSON number, has no fraction and no
// exponent (encoding/json refuses those for an integer).
func wholeNumber(b []byte) bool { return !bytes.ContainsAny(b, ".eE") }

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
