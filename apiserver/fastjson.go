package apiserver

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/jsonscan"
)

// A fast path for request bodies. readJSON's two passes (checkStrictJSON's
// token walk, then encoding/json's reflection) cost more CPU than the lock
// operation they carry: json.Decoder.Token builds an error value for every
// scalar it reads. Almost every body a program sends is a flat object of
// plain strings and whole numbers, which fastDecode reads in one pass
// without allocating beyond the fields themselves. It handles a body only
// when it can tell that the usual decoding would accept it and give the very
// same value: one object, each member's name exactly one of the type's JSON
// names and given once, every value a string without escapes or a whole
// number that fits the field, nothing but whitespace after it. Anything
// else (an escape, a nested value, null, a duplicate, a name in another
// letter case, a field of a kind it does not know, a malformed duration)
// makes it decline, and the usual decoding runs and says what is wrong, so
// that errors stay as they were, word for word.

// fastKind is what fastDecode can store in a field.
type fastKind int

const (
	fastOther    fastKind = iota // unknown to fastDecode: a body that sets it takes the usual path
	fastString                   // *string
	fastDuration                 // *api.Duration, from a string
	fastMillis                   // *api.MillisField, from a whole number
	fastInt                      // *int, from a whole number
)

type fastField struct {
	name  string
	index []int
	kind  fastKind
}

var (
	stringPtrType = reflect.TypeOf((*string)(nil))
	durationPtr   = reflect.TypeOf((*api.Duration)(nil))
	millisPtr     = reflect.TypeOf((*api.MillisField)(nil))
	intPtr        = reflect.TypeOf((*int)(nil))
)

var fastFieldCache sync.Map // reflect.Type -> []fastField

// fastFields lists struct type t's JSON fields (embedded structs' included)
// with what fastDecode can store in each; the names are jsonFieldNames'.
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
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
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

// maxFastMembers bounds the members of an object fastDecode reads; a body
// with more takes the usual path.
const maxFastMembers = 16

// member is one "name": value of a flat object, as offsets into the body.
type member struct {
	nameFrom, nameTo   int
	valueFrom, valueTo int // a string's without its quotes
	str                bool
}

// fastDecode decodes body into v, a pointer to a request struct, and
// reports true; or reports false, having changed nothing, when the body is
// not one it handles (see above).
func fastDecode(body []byte, v any) bool {
	if req, ok := v.(*api.BatchRequest); ok {
		return fastDecodeBatch(body, req)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return false
	}
	var ms [maxFastMembers]member
	n, end, ok := scanFlatObject(body, jsonscan.SkipSpace(body, 0), &ms)
	if !ok || jsonscan.SkipSpace(body, end) != len(body) {
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
			if !m.str {
				return false
			}
		case fastDuration:
			if !m.str {
				return false
			}
			d, err := time.ParseDuration(string(raw))
			if err != nil {
				return false
			}
			durations[i] = d
		case fastMillis, fastInt:
			if m.str || !wholeNumber(raw) {
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
			dst.Set(reflect.ValueOf(api.NewDuration(durations[i])))
		case fastMillis:
			dst.Set(reflect.ValueOf(api.NewMillisField(millis[i])))
		case fastInt:
			x := int(millis[i])
			dst.Set(reflect.ValueOf(&x))
		}
	}
	return true
}

// fastDecodeBatch is fastDecode for a batch: {"ops": [{"op": "...",
// "body": {...}}, ...]}, each body a flat object as fastDecode reads one
// (which its operation's own decoding then checks against its fields).
func fastDecodeBatch(body []byte, req *api.BatchRequest) bool {
	ops := []api.BatchOp{}
	ok := jsonscan.ObjectArray(body, "ops", func(b []byte, i int) (int, bool) {
		op, end, ok := scanBatchOp(b, i)
		ops = append(ops, op)
		return end, ok
	})
	if !ok {
		return false
	}
	req.Ops = ops
	return true
}

// scanBatchOp reads {"op": "name", "body": {flat object}} (in either order)
// at i.
func scanBatchOp(b []byte, i int) (api.BatchOp, int, bool) {
	var op api.BatchOp
	if !jsonscan.At(b, i, '{') {
		return op, 0, false
	}
	i = jsonscan.SkipSpace(b, i+1)
	haveOp, haveBody := false, false
	for {
		from, to, ok := jsonscan.PlainString(b, i)
		if !ok {
			return op, 0, false
		}
		i = jsonscan.SkipSpace(b, to+1)
		if !jsonscan.At(b, i, ':') {
			return op, 0, false
		}
		i = jsonscan.SkipSpace(b, i+1)
		switch string(b[from:to]) {
		case "op":
			vf, vt, ok := jsonscan.PlainString(b, i)
			if !ok || haveOp {
				return op, 0, false
			}
			op.Op, haveOp, i = string(b[vf:vt]), true, vt+1
		case "body":
			var ms [maxFastMembers]member
			_, end, ok := scanFlatObject(b, i, &ms)
			if !ok || haveBody {
				return op, 0, false
			}
			op.Body, haveBody, i = append([]byte(nil), b[i:end]...), true, end
		default:
			return op, 0, false
		}
		i = jsonscan.SkipSpace(b, i)
		if jsonscan.At(b, i, ',') {
			i = jsonscan.SkipSpace(b, i+1)
			continue
		}
		if !jsonscan.At(b, i, '}') || !haveOp || !haveBody {
			return op, 0, false
		}
		return op, i + 1, true
	}
}

// scanFlatObject reads an object at i whose values are plain strings or
// numbers, with distinct plain names, at most maxFastMembers of them; end
// is just past its '}'.
func scanFlatObject(b []byte, i int, ms *[maxFastMembers]member) (n, end int, ok bool) {
	if !jsonscan.At(b, i, '{') {
		return 0, 0, false
	}
	i = jsonscan.SkipSpace(b, i+1)
	if jsonscan.At(b, i, '}') {
		return 0, i + 1, true
	}
	for {
		if n == maxFastMembers {
			return 0, 0, false
		}
		from, to, ok := jsonscan.PlainString(b, i)
		if !ok {
			return 0, 0, false
		}
		for _, prev := range ms[:n] {
			if string(b[prev.nameFrom:prev.nameTo]) == string(b[from:to]) {
				return 0, 0, false
			}
		}
		m := member{nameFrom: from, nameTo: to}
		i = jsonscan.SkipSpace(b, to+1)
		if !jsonscan.At(b, i, ':') {
			return 0, 0, false
		}
		i = jsonscan.SkipSpace(b, i+1)
		if jsonscan.At(b, i, '"') {
			vf, vt, ok := jsonscan.PlainString(b, i)
			if !ok {
				return 0, 0, false
			}
			m.valueFrom, m.valueTo, m.str, i = vf, vt, true, vt+1
		} else {
			j := i
			for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
				j++
			}
			if j == i || !jsonNumber(b[i:j]) {
				return 0, 0, false
			}
			m.valueFrom, m.valueTo, i = i, j, j
		}
		ms[n] = m
		n++
		i = jsonscan.SkipSpace(b, i)
		if jsonscan.At(b, i, ',') {
			i = jsonscan.SkipSpace(b, i+1)
			continue
		}
		if !jsonscan.At(b, i, '}') {
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
func wholeNumber(b []byte) bool {
	for _, c := range b {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// Answers, the other way: marshalAnswer writes the two answers of every
// lock cycle (a lease, a release) by hand, byte for byte what json.Marshal
// writes for them, when their strings need no escaping (printable ASCII
// without the characters json.Marshal escapes: " \ < > &); anything else
// goes to json.Marshal. fastAnswers checks at start that the hand-written
// encoding still matches json.Marshal for values with every field set, so
// that a field added to either type turns it off rather than go missing.

// marshalAnswer is json.Marshal(v).
func marshalAnswer(v any) ([]byte, error) {
	if b, ok := appendAnswer(make([]byte, 0, 160), v); ok {
		return b, nil
	}
	return json.Marshal(v)
}

var fastAnswers = func() bool {
	for _, v := range []any{api.LeaseResponse{}, api.ReleaseResponse{}} {
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

// appendAnswer appends v's JSON when v is an answer it writes by hand.
func appendAnswer(out []byte, v any) ([]byte, bool) {
	if !fastAnswers {
		return out, false
	}
	return appendAnswerUnchecked(out, v)
}

func appendAnswerUnchecked(out []byte, v any) ([]byte, bool) {
	switch a := v.(type) {
	case api.LeaseResponse:
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
	case api.ReleaseResponse:
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
func appendKeyOut(out []byte, k api.KeyOut) []byte {
	if k.Key != "" {
		out = append(append(append(out, `"key":"`...), k.Key...), `",`...)
	}
	if k.KeyB64 != "" {
		out = append(append(append(out, `"key_b64":"`...), k.KeyB64...), `",`...)
	}
	return out
}

// plainJSON reports whether json.Marshal writes s as it is between quotes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
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
