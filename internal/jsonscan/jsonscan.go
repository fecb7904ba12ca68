// Package jsonscan holds the byte-level primitives of the fast JSON paths
// of the HTTP client (package api) and server (package apiserver): they
// read the few flat shapes a lock cycle exchanges without encoding/json's
// reflection, and decline anything else so that encoding/json decides.
//
// Every function takes the whole input b and an offset i into it, and
// never reads outside b: an offset past the end is "nothing there".
// It imports the standard library only, so that the client stays light.
package jsonscan

// SkipSpace returns the offset of the first byte at or after i that is not
// JSON whitespace (len(b) if there is none).
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// At reports whether b[i] is c.
func At(b []byte, i int, c byte) bool { return i >= 0 && i < len(b) && b[i] == c }

// HasPrefixAt reports whether b[i:] starts with p.
func HasPrefixAt(b []byte, i int, p string) bool {
	return i >= 0 && i <= len(b) && len(b)-i >= len(p) && string(b[i:i+len(p)]) == p
}

// PlainString reads a JSON string at i that has no escape and no control
// character: from and to delimit its content, and to is its closing
// quote. ok is false for anything else (including a string with an escape,
// which the caller leaves to encoding/json).
func PlainString(b []byte, i int) (from, to int, ok bool) {
	if !At(b, i, '"') {
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

// ValueEnd finds the end of the JSON value at i (the offset just past it),
// a nested object or array included, skipping strings and their escapes.
// It does not check the value's grammar: json.Valid on b[i:end] does.
func ValueEnd(b []byte, i int) (end int, ok bool) {
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

// ObjectArray reads a whole input that is one object with one member, name
// (a plain string), whose value is an array: {"name": [item, ...]}, with
// nothing but whitespace around it. item reads the element at offset i
// (its first byte) and returns the offset just past it; ObjectArray
// reports false as soon as item does, or when the input has another shape.
// An empty array calls item never and reports true.
func ObjectArray(b []byte, name string, item func(b []byte, i int) (end int, ok bool)) bool {
	i := SkipSpace(b, 0)
	if !At(b, i, '{') {
		return false
	}
	from, to, ok := PlainString(b, SkipSpace(b, i+1))
	if !ok || string(b[from:to]) != name {
		return false
	}
	i = SkipSpace(b, to+1)
	if !At(b, i, ':') {
		return false
	}
	i = SkipSpace(b, i+1)
	if !At(b, i, '[') {
		return false
	}
	i = SkipSpace(b, i+1)
	if At(b, i, ']') {
		i++
	} else {
		for {
			end, ok := item(b, i)
			if !ok || end <= i {
				return false
			}
			i = SkipSpace(b, end)
			if At(b, i, ',') {
				i = SkipSpace(b, i+1)
				continue
			}
			if !At(b, i, ']') {
				return false
			}
			i++
			break
		}
	}
	i = SkipSpace(b, i)
	return At(b, i, '}') && SkipSpace(b, i+1) == len(b)
}
