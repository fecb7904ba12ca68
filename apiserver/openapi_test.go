package apiserver

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/httpwire"
)

// TestOpenAPICoversRoutes keeps /v1/openapi.json in step with the Handler:
// every route it serves is described with its method, and nothing else is.
func TestOpenAPICoversRoutes(t *testing.T) {
	h := NewHandler(nil, Config{})
	documented := map[string]routeDoc{}
	for _, rd := range openAPIRoutes {
		if rd.prefix {
			continue
		}
		_, twice := documented[rd.path]
		assert.False(t, twice, "%s is described twice in openAPIRoutes", rd.path)
		documented[rd.path] = rd
	}
	for path, rt := range h.routes {
		rd, ok := documented[path]
		if !assert.True(t, ok, "route %s %s is served but not described: add a routeDoc for it to openAPIRoutes in apiserver/openapi.go "+
			"(method, summary, query parameters, request and answer types, error codes)", rt.method, path) {
			continue
		}
		assert.Equal(t, rt.method, rd.method, "openAPIRoutes describes %s with the wrong method: fix its routeDoc in apiserver/openapi.go", path)
	}
	for path := range documented {
		_, ok := h.routes[path]
		assert.True(t, ok, "openAPIRoutes describes %s, which the Handler does not serve: remove its routeDoc from apiserver/openapi.go", path)
	}
	// The prefix routes are served by ServeHTTP itself.
	assert.True(t, isConsolePath("/ui/"))
	assert.True(t, isPprofPath("/debug/pprof/"))
}

// TestOpenAPIDescribesEveryErrorCode checks the code table against every
// Code constant package api declares, and each route's codes against it.
func TestOpenAPIDescribesEveryErrorCode(t *testing.T) {
	// The constants of the lock errors' code table (internal/errcode:
	// string literals) and the Code constants of package api (string
	// literals, or the table's constants by name).
	lockCodes := codeConstants(t, "../internal/errcode", "", nil)
	apiCodes := codeConstants(t, "../api", "Code", lockCodes)
	declared := map[string]string{} // value -> constant name
	for name, v := range apiCodes {
		declared[v] = name
	}
	require.NotEmpty(t, declared)
	for v, name := range declared {
		assert.Contains(t, codeStatus, v, "api.%s (%q) has no HTTP status in codeStatus in apiserver/openapi.go: add it", name, v)
	}
	for v := range codeStatus {
		assert.Contains(t, declared, v, "codeStatus in apiserver/openapi.go lists %q, which package api does not declare: remove it", v)
	}
	for code, status := range lockCodeStatus {
		assert.Equal(t, status, codeStatus[code], "codeStatus in apiserver/openapi.go gives %q another status than the server answers (lockCodeStatus)", code)
	}
	for _, rd := range openAPIRoutes {
		for _, c := range rd.codes {
			assert.Contains(t, codeStatus, c, "%s %s lists code %q, which has no status in codeStatus", rd.method, rd.path, c)
		}
	}
}

// codeConstants reads the string constants whose name starts with prefix
// declared in the package in dir (tests excluded): name -> value. A value
// given as errcode.NAME is looked up in table.
func codeConstants(t *testing.T, dir, prefix string, table map[string]string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, prefix) || i >= len(vs.Values) {
						continue
					}
					switch v := vs.Values[i].(type) {
					case *ast.BasicLit:
						if v.Kind == token.STRING {
							s, err := strconv.Unquote(v.Value)
							require.NoError(t, err)
							out[name.Name] = s
						}
					case *ast.SelectorExpr:
						if pkg, ok := v.X.(*ast.Ident); ok && pkg.Name == "errcode" {
							s, ok := table[v.Sel.Name]
							require.True(t, ok, "%s = errcode.%s: no such string constant in package errcode", name.Name, v.Sel.Name)
							out[name.Name] = s
						}
					}
				}
			}
		}
	}
	return out
}

// TestOpenAPISchemasMatchWireTypes checks the generated schemas against the
// JSON the Go types read and write: every request schema's properties are
// exactly the fields strict decoding accepts, every answer schema's are
// exactly the keys encoding/json writes for a fully set value, and every
// $ref resolves.
func TestOpenAPISchemasMatchWireTypes(t *testing.T) {
	doc := fetchOpenAPI(t)
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	props := func(name string) []string {
		s, ok := schemas[name].(map[string]any)
		require.True(t, ok, "no schema %s", name)
		var out []string
		for p := range s["properties"].(map[string]any) {
			out = append(out, p)
		}
		sort.Strings(out)
		return out
	}
	for _, rd := range openAPIRoutes {
		if rd.request != nil {
			typ := reflect.TypeOf(rd.request)
			want := append([]string(nil), httpwire.FieldNames(typ)...)
			sort.Strings(want)
			assert.Equal(t, want, props(typ.Name()), "request %s of %s: the schema's fields differ from what the handler decodes", typ.Name(), rd.path)
		}
		if rd.answer != nil {
			typ := reflect.TypeOf(rd.answer)
			if typ.Kind() != reflect.Struct {
				continue
			}
			assert.Equal(t, encodedKeys(t, typ), props(typ.Name()), "answer %s of %s: the schema's fields differ from its JSON", typ.Name(), rd.path)
		}
	}
	// Every $ref points at a schema.
	raw, err := json.Marshal(doc)
	require.NoError(t, err)
	for _, part := range strings.Split(string(raw), `"$ref":"#/components/schemas/`)[1:] {
		name := part[:strings.IndexByte(part, '"')]
		assert.Contains(t, schemas, name, "a $ref to a missing schema")
	}
}

// encodedKeys is the keys encoding/json writes for a value of struct type
// typ with every field set (so that omitempty drops nothing).
func encodedKeys(t *testing.T, typ reflect.Type) []string {
	v := reflect.New(typ).Elem()
	fill(v)
	b, err := json.Marshal(v.Interface())
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// fill sets every settable field of v to a non-zero value.
func fill(v reflect.Value) {
	if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
		v.SetBytes([]byte(`"x"`))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}

func fetchOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	n := newTestNode(t, Config{Token: testToken})
	a := n.do(t, "GET", "/v1/openapi.json", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	return a.body
}

func TestOpenAPIServedDocument(t *testing.T) {
	doc := fetchOpenAPI(t)
	assert.Equal(t, "3.0.3", doc["openapi"])
	paths := doc["paths"].(map[string]any)
	acquire := paths["/v1/acquire"].(map[string]any)["post"].(map[string]any)
	responses := acquire["responses"].(map[string]any)
	assert.Contains(t, responses, "200")
	conflict := responses["409"].(map[string]any)
	assert.ElementsMatch(t, []any{api.CodeCanceled, api.CodeKindMismatch, api.CodeLocked, api.CodeNoSession}, conflict["x-error-codes"])
	health := paths["/healthz"].(map[string]any)["get"].(map[string]any)
	assert.Empty(t, health["security"], "/healthz needs no token")
	assert.NotEmpty(t, acquire["security"])
	assert.Equal(t, fmt.Sprint(codeStatus[api.CodeLocked]), fmt.Sprint(doc["x-error-codes"].(map[string]any)[api.CodeLocked]))
}

// The members' version, level and mark are described, and every field
// note names a field its schema has (a renamed field cannot leave its note
// behind).
func TestOpenAPIFieldNotes(t *testing.T) {
	schemas := fetchOpenAPI(t)["components"].(map[string]any)["schemas"].(map[string]any)
	member, ok := schemas["Member"].(map[string]any)
	require.True(t, ok, "no Member schema")
	props := member["properties"].(map[string]any)
	memberKeys := encodedKeys(t, reflect.TypeOf(api.Member{}))
	assert.Len(t, props, len(memberKeys), "the Member schema's fields differ from its JSON: %v", memberKeys)
	for _, field := range []string{"version", "level", "below_leader_level"} {
		assert.Contains(t, memberKeys, field)
		require.Contains(t, props, field)
		assert.NotEmpty(t, props[field].(map[string]any)["description"], field)
	}
	for schema, notes := range fieldNotes {
		s, ok := schemas[schema].(map[string]any)
		require.True(t, ok, "a note on schema %s, which does not exist", schema)
		for field := range notes {
			assert.Contains(t, s["properties"], field, "a note on %s.%s, which does not exist", schema, field)
		}
	}
}
