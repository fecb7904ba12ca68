package apiserver

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// The OpenAPI 3.0 description served at GET /v1/openapi.json. Routes are
// listed here by hand (method, query parameters, request and answer types,
// error codes); the schemas of the request and answer types are generated
// from the Go types by reflection, so that they follow the JSON tags.
// TestOpenAPICoversRoutes checks the list against the Handler's route table
// and the error codes against package api, so that neither can drift.

// routeDoc describes one route for the OpenAPI document.
type routeDoc struct {
	method, path string
	summary      string
	query        []paramDoc
	request      any    // the body's Go type (a zero value), nil without a body
	answer       any    // the 200 answer's Go type, nil when answerType says
	answerType   string // content type of a 200 that is not JSON
	codes        []string
	open         bool // served without the token
	// right is what a caller needs (docs/http.md, "Security: rights
	// per key prefix"), as the README's table of routes says it:
	// TestREADMERouteTable checks that table against this one.
	right  string
	prefix bool // path is a prefix: every path under it
}

type paramDoc struct {
	name, description string
	required          bool
}

// Codes every route may answer besides its own: the guard's and the token's.
var commonCodes = []string{api.CodeUnauthorized, api.CodeHostNotAllowed, api.CodeOriginNotAllowed, api.CodeMethodNotAllowed}

// Codes of the routes that take a JSON body.
var bodyCodes = []string{api.CodeBadRequest, api.CodeBodyTooLarge, api.CodeUnsupportedMedia}

// storeCodes a lock operation may answer when the store fails.
var storeCodes = []string{api.CodeUnavailable, api.CodeUnknownOutcome, api.CodeClosed, api.CodeInternal}

// watchParams make a read a blocking query (apiserver/watch.go).
var watchParams = []paramDoc{
	{"index", "block until a change after this index (the X-Raftlock-Index header of an earlier answer); 0 answers at once with the index to start from", false},
	{"wait", "with index: the longest block, a duration such as 30s or 5m (default 5m, at most 10m: a longer one is refused, 400 invalid_wait; plus up to 1/16 of jitter); the answer then is the unchanged state", false},
	{"consistent", "with index: read the state through the leader once woken (linearizable) rather than from this node's own state", false},
}

// watchCodes a blocking query may answer besides a read's.
var watchCodes = []string{api.CodeInvalidWait, api.CodeTooManyWatchers, api.CodeNotImplemented}

func codes(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// openAPIRoutes is every route the Handler serves. A route added to
// NewHandler's table must be added here (TestOpenAPICoversRoutes says so).
var openAPIRoutes = []routeDoc{
	{method: http.MethodPost, path: "/v1/acquire", right: "`lock` on the key (on each key of `keys`)", summary: "Take a lock, waiting up to wait for it; the answer carries the owner and the fencing token. With session instead of ttl, the lock ends with that session. With limit, a slot of a semaphore of limit holders; with shared, a read (true) or the write (false) of a read/write lock; kind_mismatch while the key exists as another kind or limit. With keys instead of key, a multi-key lock: every key at once, all or nothing, one token for the set (release or extend any of its keys to act on all).",
		request: api.AcquireRequest{}, answer: api.LeaseResponse{},
		codes: codes(bodyCodes, []string{api.CodeInvalidKey, api.CodeInvalidTTL, api.CodeInvalidWait, api.CodeInvalidOwner, api.CodeInvalidSession, api.CodeInvalidMetadata, api.CodeNoSession, api.CodeNotImplemented, api.CodeLocked, api.CodeCanceled, api.CodeQueueFull, api.CodePermissionDenied,
			api.CodeKindMismatch, api.CodeInvalidLimit, api.CodeInvalidKind}, storeCodes, []string{api.CodeQuotaExceeded})},
	{method: http.MethodPost, path: "/v1/session/create", right: "`lock` on some prefix (a session only serves to bind locks; an acquire under it still needs `lock` on its key)", summary: "Start a session (a lease that locks are bound to); renew it every ttl/3.",
		request: api.SessionCreateRequest{}, answer: api.SessionResponse{},
		codes: codes(bodyCodes, []string{api.CodeInvalidSession, api.CodeNotImplemented}, storeCodes, []string{api.CodeQuotaExceeded})},
	{method: http.MethodPost, path: "/v1/session/renew", right: "`lock` on some prefix", summary: "Make a session end its ttl from now.",
		request: api.SessionRequest{}, answer: api.SessionResponse{},
		codes: codes(bodyCodes, []string{api.CodeInvalidSession, api.CodeNoSession, api.CodeNotImplemented}, storeCodes)},
	{method: http.MethodPost, path: "/v1/session/destroy", right: "`lock` on some prefix", summary: "End a session and release all its locks in one step, each to its next waiter.",
		request: api.SessionRequest{}, answer: api.SessionDestroyResponse{},
		codes: codes(bodyCodes, []string{api.CodeInvalidSession, api.CodeNoSession, api.CodeNotImplemented}, storeCodes)},
	{method: http.MethodGet, path: "/v1/session/info", right: "any known token (the session's id is its secret)", summary: "A session's state: live, ttl, time left, lock delay, keys it holds or waits for.",
		query: []paramDoc{{"id", "the session's id", true}}, answer: api.SessionInfoResponse{},
		codes: codes([]string{api.CodeBadRequest, api.CodeInvalidSession, api.CodeNotImplemented}, storeCodes)},
	{method: http.MethodPost, path: "/v1/release", right: "`lock` on the key", summary: "Release a lock held by owner; the next waiter gets it. Idempotent: repeated by the owner whose release ended the lease (its answer lost), it answers released again.",
		request: api.ReleaseRequest{}, answer: api.ReleaseResponse{},
		codes: codes(bodyCodes, []string{api.CodeInvalidKey, api.CodeInvalidOwner, api.CodeNotHeld, api.CodePermissionDenied}, storeCodes)},
	{method: http.MethodPost, path: "/v1/extend", right: "`lock` on the key", summary: "Renew a lease held by owner for ttl from now.",
		request: api.ExtendRequest{}, answer: api.LeaseResponse{},
		codes: codes(bodyCodes, []string{api.CodeInvalidKey, api.CodeInvalidOwner, api.CodeInvalidTTL, api.CodeNotHeld, api.CodePermissionDenied}, storeCodes)},
	{method: http.MethodGet, path: "/v1/inspect", right: "`read` on the key", summary: "A key's state: held or not, token, time left, waiters; never the owner. With index, a blocking query (a watch, as Consul's): it answers once the key changes after that index, or when wait ends, from this node's own state (a follower's may lag), with the answer's index in the X-Raftlock-Index header.",
		query: append([]paramDoc{{"key", "the key, percent-encoded", true}}, watchParams...), answer: api.KeyInfo{},
		codes: codes([]string{api.CodeBadRequest, api.CodeInvalidKey, api.CodePermissionDenied}, watchCodes, storeCodes)},
	{method: http.MethodGet, path: "/v1/locks", right: "`read`: lists only the keys the token may read; `403` if none under the prefix may be; with `index`, `read` on every key under it", summary: "Held locks in key order, one page at a time. With index, a blocking query on the prefix (it needs read on every key under it): it answers once a key under the prefix changes after that index, or when wait ends, with the answer's index in the X-Raftlock-Index header.",
		query:  append([]paramDoc{{"prefix", "only keys starting with it", false}, {"after", "the last key of the previous page", false}, {"limit", "most locks in the page (the node caps it)", false}}, watchParams...),
		answer: api.ListResponse{},
		codes:  codes([]string{api.CodeBadRequest, api.CodeInvalidList, api.CodeNotImplemented, api.CodePermissionDenied}, watchCodes, storeCodes)},
	{method: http.MethodGet, path: "/v1/waiters", right: "`read` on the key", summary: "The callers queued for a key, next first, read from this node's own state (may be a little behind); never their owners.",
		query: []paramDoc{{"key", "the key, percent-encoded", true}}, answer: api.WaitersResponse{},
		codes: []string{api.CodeBadRequest, api.CodeInvalidKey, api.CodeNotImplemented, api.CodePermissionDenied, api.CodeClosed, api.CodeInternal}},
	{method: http.MethodGet, path: "/v1/cluster", right: "any known token (it names no key)", summary: "This node's view of its cluster: members (each with its raftlock version and command level, a mark on those below the leader's level, and its status and health as the leader judges them, which a follower shows as the leader last reported them), leader, term, raft figures.",
		answer: api.ClusterStatus{}, codes: []string{api.CodeBadRequest, api.CodeNotCluster}},
	{method: http.MethodPost, path: "/v1/leave", right: "`admin` on the prefix `\"\"`", summary: "Take this node out of its cluster for good; it then stops.",
		answer: api.LeaveResponse{}, codes: codes([]string{api.CodeBadRequest, api.CodeUnsupportedMedia, api.CodeNotImplemented, api.CodePermissionDenied}, storeCodes)},
	{method: http.MethodGet, path: "/healthz", right: "nothing; without a token it tells the status alone", summary: "Ready (200) when a leader is known and the raft log can be written; 503 otherwise, with the same body and an error. Without a token (on a node that has tokens) the body holds the status alone; with a known token also the node, its role and its leader.",
		answer: api.HealthResponse{}, codes: []string{api.CodeNoLeader, api.CodeLogFault, api.CodeHalted}, open: true},
	{method: http.MethodGet, path: "/readyz", right: "nothing; without a token it tells the status alone", summary: "Ready (200) when the cluster would survive losing one more node (the leader's failure tolerance is at least 1 and it judges this node healthy): what a rollout or a PodDisruptionBudget waits for; 503 not_ready with the reason otherwise. Without a token (on a node that has tokens) the body holds the status alone; with a known token also the node, leader, failure tolerance and reason.",
		answer: api.ReadyResponse{}, codes: []string{api.CodeNotReady}, open: true},
	{method: http.MethodGet, path: "/metrics", right: "any known token (it names no key)", summary: "Prometheus metrics of the API and the node.",
		answerType: "text/plain"},
	{method: http.MethodGet, path: "/v1/events", right: "any known token; it shows only the locks the token may `read`", summary: "Server-sent events: one ConsoleEvent a second, as \"data:\" lines, for the web console.",
		query: []paramDoc{{"prefix", "only locks whose key starts with it", false}}, answer: api.ConsoleEvent{}, answerType: "text/event-stream",
		codes: []string{api.CodeBadRequest}},
	{method: http.MethodGet, path: "/v1/whoami", right: "any known token", summary: "The caller's token name and its rules (right per key prefix, longest prefix first); never its secret. The console shows admin actions from it.",
		answer: api.WhoAmIResponse{}, codes: []string{api.CodeBadRequest}},
	{method: http.MethodPost, path: "/v1/force-release", right: "`admin` on the key", summary: "End a key's lease whoever holds it and hand the key to the next waiter; needs the admin right on the key, and is logged with the caller's token name.",
		request: api.ForceReleaseRequest{}, answer: api.ForceReleaseResponse{},
		codes: codes(bodyCodes, []string{api.CodeInvalidKey, api.CodeNotHeld, api.CodePermissionDenied, api.CodeNotImplemented}, storeCodes)},
	{method: http.MethodPost, path: "/v1/batch", right: "each operation what its own route needs", summary: "Several acquires (without wait), releases and extends in one exchange, each as its own route takes and answers it; the answer, once all are done, holds each one's status and body in order. The Go client batches the operations its goroutines start while an exchange is in flight.",
		request: api.BatchRequest{}, answer: api.BatchResponse{},
		codes: codes(bodyCodes, []string{api.CodePermissionDenied}, storeCodes)},
	{method: http.MethodGet, path: "/v1/stream", right: "any known token to open it; each operation what its own route needs", summary: "The Go client's binary stream: asked for with \"Connection: Upgrade\" and \"Upgrade: raftlock-stream/1\" (426 without them), answered 101 Switching Protocols; the connection then carries acquires (waiting ones too), releases and extends, each framed with an id and the JSON body its own route takes, each answered as soon as it is done with its route's status and JSON answer. Rights are the token's, as on the routes.",
		answerType: "application/octet-stream", codes: []string{api.CodeBadRequest, api.CodeTooManyInFlight}},
	{method: http.MethodGet, path: "/v1/agent/config", right: "`admin` on the prefix `\"\"`", summary: "The agent's effective configuration, secrets redacted; needs the admin right on every key (prefix \"\").",
		answer: map[string]any{}, codes: []string{api.CodeBadRequest, api.CodeNotImplemented, api.CodePermissionDenied}},
	{method: http.MethodGet, path: "/v1/agent/logs", right: "`admin` on the prefix `\"\"`", summary: "The agent's most recent log lines; needs the admin right on every key (prefix \"\").",
		answer: api.AgentLogsResponse{}, codes: []string{api.CodeBadRequest, api.CodeNotImplemented, api.CodePermissionDenied}},
	{method: http.MethodGet, path: "/v1/openapi.json", right: "any known token", summary: "This description.",
		answer: map[string]any{}, codes: []string{api.CodeBadRequest}},
	{method: http.MethodGet, path: "/ui/", right: "nothing (the page; its figures come from the API, with the token typed into it)", summary: "The web console's page and files (no data; served without the token).",
		answerType: "text/html", open: true, prefix: true},
	{method: http.MethodGet, path: "/debug/pprof/", right: "`admin` on the prefix `\"\"`, and profiling on (`-enable-pprof`)", summary: "net/http/pprof, when the node runs with profiling on (agent -enable-pprof); 404 otherwise.",
		answerType: "application/octet-stream", prefix: true, codes: []string{api.CodeNotFound, api.CodePermissionDenied}},
}

// codeStatus is the HTTP status of every error code of package api.
var codeStatus = map[string]int{
	api.CodeBadRequest:          400,
	api.CodeInvalidKey:          400,
	api.CodeInvalidTTL:          400,
	api.CodeInvalidWait:         400,
	api.CodeInvalidOwner:        400,
	api.CodeInvalidList:         400,
	api.CodeInvalidSession:      400,
	api.CodeInvalidMetadata:     400,
	api.CodeHTTPSRequired:       400,
	api.CodeUnauthorized:        401,
	api.CodeHostNotAllowed:      403,
	api.CodeOriginNotAllowed:    403,
	api.CodePermissionDenied:    403,
	api.CodeNotCluster:          404,
	api.CodeNotFound:            404,
	api.CodeMethodNotAllowed:    405,
	api.CodeLocked:              409,
	api.CodeNotHeld:             409,
	api.CodeCanceled:            409,
	api.CodeNoSession:           409,
	api.CodeKindMismatch:        409,
	api.CodeInvalidLimit:        400,
	api.CodeInvalidKind:         400,
	api.CodeBodyTooLarge:        413,
	api.CodeUnsupportedMedia:    415,
	api.CodeQueueFull:           429,
	api.CodeTooManyWatchers:     429,
	api.CodeQuotaExceeded:       429,
	api.CodeTooManyInFlight:     429,
	api.CodeHeadersTooLarge:     431,
	api.CodeInternal:            500,
	api.CodeNotImplemented:      501,
	api.CodeUnavailable:         503,
	api.CodeUnknownOutcome:      503,
	api.CodeClosed:              503,
	api.CodeNoLeader:            503,
	api.CodeLogFault:            503,
	api.CodeNotReady:            503,
	api.CodeMemberTooOld:        503,
	api.CodeHalted:              503,
	api.CodeUnsupportedProtocol: 505,
}

// openAPIBody is the description's JSON, made on first use.
var openAPIBody = sync.OnceValue(func() []byte {
	b, err := json.MarshalIndent(openAPIDocument(), "", "  ")
	if err != nil {
		panic(err) // the document is built from fixed Go values
	}
	return b
})

// openAPI serves GET /v1/openapi.json.
func (h *Handler) openAPI(w http.ResponseWriter, r *http.Request) {
	if e := noQuery(r); e != nil {
		writeError(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openAPIBody())
}

// openAPIDocument builds the description.
func openAPIDocument() map[string]any {
	schemas := map[string]any{}
	gen := schemaGen{schemas: schemas}
	errorRef := gen.schema(reflect.TypeOf(api.ErrorBody{}))
	paths := map[string]any{}
	for _, rd := range openAPIRoutes {
		op := map[string]any{
			"summary":     rd.summary,
			"operationId": strings.ToLower(rd.method) + operationName(rd.path),
		}
		if rd.prefix {
			op["description"] = "Every path under " + rd.path + "."
		}
		// The right the route needs, a vendor extension (OpenAPI has no
		// field for rights per key prefix).
		op["x-raftlock-right"] = strings.ReplaceAll(rd.right, "`", "")
		if !rd.open {
			op["security"] = []any{map[string]any{"bearer": []any{}}, map[string]any{"tokenHeader": []any{}}}
		} else {
			op["security"] = []any{}
		}
		var params []any
		for _, p := range rd.query {
			params = append(params, map[string]any{
				"name": p.name, "in": "query", "required": p.required, "description": p.description,
				"schema": map[string]any{"type": "string"},
			})
		}
		if params != nil {
			op["parameters"] = params
		}
		if rd.request != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": gen.schema(reflect.TypeOf(rd.request))},
			}}
		}
		ok := map[string]any{"description": "OK"}
		switch {
		case rd.answerType != "" && rd.answer != nil:
			ok["content"] = map[string]any{rd.answerType: map[string]any{"schema": gen.schema(reflect.TypeOf(rd.answer))}}
		case rd.answerType != "":
			ok["content"] = map[string]any{rd.answerType: map[string]any{"schema": map[string]any{"type": "string"}}}
		case rd.answer != nil:
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": gen.schema(reflect.TypeOf(rd.answer))}}
		}
		responses := map[string]any{"200": ok}
		byStatus := map[int][]string{}
		all := append(append([]string(nil), rd.codes...), commonCodes...)
		if rd.open {
			all = append([]string(nil), rd.codes...)
			all = append(all, api.CodeHostNotAllowed, api.CodeOriginNotAllowed, api.CodeMethodNotAllowed)
		}
		seen := map[string]bool{}
		for _, c := range all {
			if seen[c] {
				continue
			}
			seen[c] = true
			byStatus[codeStatus[c]] = append(byStatus[codeStatus[c]], c)
		}
		for status, cs := range byStatus {
			sort.Strings(cs)
			responses[itoa(status)] = map[string]any{
				"description":   "error codes: " + strings.Join(cs, ", "),
				"content":       map[string]any{"application/json": map[string]any{"schema": errorRef}},
				"x-error-codes": cs,
			}
		}
		op["responses"] = responses
		item, _ := paths[rd.path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[rd.path] = item
		}
		item[strings.ToLower(rd.method)] = op
	}
	codeTable := map[string]any{}
	for c, s := range codeStatus {
		codeTable[c] = s
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":   "raftlock HTTP API",
			"version": "1",
			"description": "Distributed locks with fencing tokens over a Raft cluster. Keys travel in bodies and queries, never in paths. " +
				"Every error answer is {\"error\":{\"code\":...,\"message\":...}}; x-error-codes maps every code to its HTTP status.",
		},
		"paths": paths,
		"components": map[string]any{
			"schemas": schemas,
			"securitySchemes": map[string]any{
				"bearer":      map[string]any{"type": "http", "scheme": "bearer"},
				"tokenHeader": map[string]any{"type": "apiKey", "in": "header", "name": api.TokenHeader},
			},
		},
		"x-error-codes": codeTable,
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// operationName turns /v1/agent/config into AgentConfig.
func operationName(path string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(strings.TrimPrefix(path, "/v1"), func(r rune) bool { return r == '/' || r == '.' || r == '-' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// fieldNotes describe fields of the schemas whose names do not say
// enough, by schema and JSON field name (TestOpenAPIFieldNotes checks
// that each names a field of its schema).
var fieldNotes = map[string]map[string]string{
	"Member": {
		"version": "the member's raftlock version, as `raftlock version` prints it, as the member told it; absent until it has, or when its version is too old to tell",
		"level": "the highest command level the member's version reads, as it told it; absent until it has, or when its version is too old to tell " +
			"(it then counts as reading 1, which every version reads)",
		"below_leader_level": "true when the member reads a lower command level than the leader: the leader refuses the commands above that level " +
			"(member_too_old) until the member runs the leader's version; absent while the node answering does not know the leader's level",
	},
}

// schemaGen turns Go types into JSON schemas the way encoding/json sees
// them: named structs become components, embedded structs' fields are the
// outer struct's, omitempty fields are optional; fieldNotes become the
// fields' descriptions.
type schemaGen struct{ schemas map[string]any }

var (
	durationType    = reflect.TypeOf(api.Duration{})
	millisFieldType = reflect.TypeOf(api.MillisField{})
	timeDuration    = reflect.TypeOf(time.Duration(0))
	rawMessageType  = reflect.TypeOf(json.RawMessage(nil))
)

func (g schemaGen) schema(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case rawMessageType:
		return map[string]any{"description": "any JSON value"}
	case durationType:
		return map[string]any{"type": "string", "description": "a Go duration: \"30s\", \"1m30s\", \"250ms\"", "example": "30s"}
	case millisFieldType:
		return map[string]any{"type": "integer", "format": "int64", "description": "whole milliseconds"}
	case timeDuration:
		return map[string]any{"type": "integer", "format": "int64", "description": "nanoseconds"}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "format": "int64", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"} // encoding/json writes []byte as base64
		}
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		name := t.Name()
		ref := map[string]any{"$ref": "#/components/schemas/" + name}
		if _, done := g.schemas[name]; done {
			return ref
		}
		g.schemas[name] = nil // placeholder against recursion
		props := map[string]any{}
		var required []string
		g.fields(t, props, &required)
		for field, note := range fieldNotes[name] {
			if p, ok := props[field].(map[string]any); ok {
				p["description"] = note
			}
		}
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			sort.Strings(required)
			s["required"] = required
		}
		g.schemas[name] = s
		return ref
	default:
		return map[string]any{}
	}
}

// fields adds t's JSON fields to props, those of embedded structs included.
func (g schemaGen) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && f.Type.Kind() == reflect.Struct && name == "" {
			g.fields(f.Type, props, required)
			continue
		}
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.schema(f.Type)
		if !strings.Contains(","+opts+",", ",omitempty,") && f.Type.Kind() != reflect.Pointer {
			*required = append(*required, name)
		}
	}
}
