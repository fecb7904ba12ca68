package httpwire

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Requests: the client writes them (EncodeRequest) and the node reads
// them (DecodeFast, with package apiserver's strict decoding for what it
// declines), both here, so that the two fast paths of a request's JSON
// cannot drift apart.
//
// The node's strict decoding (json v2 and its checks) costs more CPU than
// the lock operation a body carries. Almost every body a program sends is a flat object of
// plain strings and whole numbers, which DecodeFast reads in one pass
// without allocating beyond the fields themselves. It handles a body only
// when it can tell that the usual decoding would accept it and give the very
// same value: one object, each member's name exactly one of the type's JSON
// names and given once, every value a string without escapes or a whole
// number that fits the field, nothing but whitespace after it. Anything
// else (an escape, a nested value, null, a duplicate, a name in another
// letter case, a field of a kind it does not know, a malformed duration)
// makes it decline, and the usual decoding runs and says what is wrong, so
// that errors stay as they were, word for word.

// fastKind is what DecodeFast can store in a field.
type fastKind int

const (
	fastOther    fastKind = iota // unknown to DecodeFast: a body that sets it takes the usual path
	fastString                   // *string
	fastDuration                 // *Duration, from a string
	fastMillis                   // *MillisField, from a whole number
	fastInt                      // *int, from a whole number
)

type fastField struct {
	name  string
	index []int
	kind  fastKind
}

var (
	stringPtrType = reflect.TypeOf((*string)(nil))
	durationPtr   = reflect.TypeOf((*Duration)(nil))
	millisPtr     = reflect.TypeOf((*MillisField)(nil))
	intPtr        = reflect.TypeOf((*int)(nil))
)

var fastFieldCache sync.Map // reflect.Type -> []fastField

// fastFields lists struct type t's JSON fields (embedded structs' included)
// with what DecodeFast can store in each; the names are FieldNames'.
func fastFields(t reflect.Type) []fastField {
	if v, ok := fastFieldCache.Load(t); ok {
		return v.([]fastField)
	}
	var out []fastField
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			idx := append(append([]int(nil), index...), i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type, idx)
				continue
			}
			name, ok := jsonFieldName(f)
			if !ok {
				continue
			}
			kind := fastOther
			switch f.Type {
			case stringPtrType:
				kind = fastString
			case durationPtr:
				kind = fastDuration
			case millisPtr:
				kind = fastMillis
			case intPtr:
				kind = fastInt
			}
			out = append(out, fastField{name: name, index: idx, kind: kind})
		}
	}
	walk(t, nil)
	fastFieldCache.Store(t, out)
	return out
}

// DecodeFast decodes body, valid UTF-8, into v, a pointer to a request
// struct, and reports true; or reports false, having changed nothing, when
// the body is not one it handles (see above), for the strict decoding to
// decide.
func DecodeFast(body []byte, v any) bool {
	if req, ok := v.(*BatchRequest); ok {
		return fastDecodeBatch(body, req)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return false
	}
	var ms [maxFastMembers]member
	n, end, ok := scanFlatObject(body, skipSpace(body, 0), &ms)
	if !ok || skipSpace(body, end) != len(body) {
		return false
	}
	fields := fastFields(rv.Elem().Type())
	// Check everything first, so that declining changes nothing.
	var which [maxFastMembers]int
	var durations [maxFastMembers]time.Duration
	var millis [maxFastMembers]int64
	for i := range n {
		m := ms[i]
		name := body[m.nameFrom:m.nameTo]
		which[i] = -1
		for j := range fields {
			if fields[j].name == string(name) {
				which[i] = j
				break
			}
		}
		if which[i] < 0 {
			return false
		}
		raw := body[m.valueFrom:m.valueTo]
		switch fields[which[i]].kind {
		case fastString:
			if m.kind != memberString {
				return false
			}
		case fastDuration:
			if m.kind != memberString {
				return false
			}
			d, err := time.ParseDuration(string(raw))
			if err != nil {
				return false
			}
			durations[i] = d
		case fastMillis, fastInt:
			if m.kind != memberNumber || !wholeNumber(raw) {
				return false
			}
			x, err := strconv.ParseInt(string(raw), 10, strconv.IntSize)
			if err != nil {
				return false
			}
			millis[i] = x
		default:
			return false
		}
	}
	st := rv.Elem()
	for i := range n {
		f := fields[which[i]]
		dst := st.FieldByIndex(f.index)
		switch f.kind {
		case fastString:
			s := string(body[ms[i].valueFrom:ms[i].valueTo])
			dst.Set(reflect.ValueOf(&s))
		case fastDuration:
			dst.Set(reflect.ValueOf(NewDuration(durations[i])))
		case fastMillis:
			dst.Set(reflect.ValueOf(NewMillisField(millis[i])))
		case fastInt:
			x := int(millis[i])
			dst.Set(reflect.ValueOf(&x))
		}
	}
	return true
}

// The client writes the bodies of a lock cycle (acquire, release, extend)
// by hand when they carry only the fields a lock.Client sends (key or
// key_b64, owner, ttl, wait, metadata), each string printable ASCII
// without the characters json.Marshal escapes; byte for byte what
// json.Marshal writes, which does everything else.
// fastRequests checks at start that the types still have the fields this
// code knows and that it still writes what json.Marshal writes, so that a
// field added to a request turns the fast path off rather than go missing.

// EncodeRequest is json.Marshal(v).
func EncodeRequest(v any) ([]byte, error) {
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
