package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/httpwire"
	"github.com/raftlock/raftlock/internal/streamwire"
)

// The lock operations are typed: each takes its caller and its request
// (the api wire type, already decoded) and returns its answer (the api
// wire type) or an error. They know nothing of HTTP: the front-ends (an
// HTTP route, POST /v1/batch, the binary stream) decode the request their
// way, tell the operation what differs between them (opCall), and write
// the answer their way. ops lists every operation once.

// operation is one entry of ops: what each front-end needs to serve it.
type operation struct {
	// name labels the operation in the metrics.
	name string
	// method and path are its HTTP route. A GET takes its request from the
	// query string, a POST from a JSON body.
	method, path string
	// batchName names it in a POST /v1/batch ("" when a batch cannot carry
	// it); streamOp on the binary stream (0 when the stream cannot).
	batchName string
	streamOp  byte
	// right is the right the caller needs on the keys the request names
	// (rightDeny, the zero value: none). The operation checks it (as
	// opCall.need) after the request's own fields, so that a bad field
	// wins over a missing right; a listing needs it on every key it
	// answers with. A session's operation needs it on some prefix, checked
	// before the request is read: see sessionUse.
	right right
	// sessionUse, when set, marks a session's operation and says what it
	// does, for the 403 of a caller without right on any prefix
	// (sessionAllowed).
	sessionUse string
	// waits is set when the operation may wait (for a lock, for a change)
	// past Config.OpTimeout: it then says how long its answer may take
	// (opCall.mayTake), and a front-end that cannot wait says so
	// (opCall.noWait).
	waits bool
	// run decodes the request from in and calls the typed operation.
	run func(h *Handler, ctx context.Context, who *caller, c *opCall, in *opInput) (any, *apiError)
}

// ops is every lock operation, once.
var ops = []*operation{
	{name: opAcquire, method: http.MethodPost, path: "/v1/acquire", batchName: api.BatchAcquire, streamOp: streamwire.OpAcquire,
		right: rightLock, waits: true, run: bodyOp((*Handler).acquire)},
	{name: opRelease, method: http.MethodPost, path: "/v1/release", batchName: api.BatchRelease, streamOp: streamwire.OpRelease,
		right: rightLock, run: bodyOp((*Handler).release)},
	{name: opExtend, method: http.MethodPost, path: "/v1/extend", batchName: api.BatchExtend, streamOp: streamwire.OpExtend,
		right: rightLock, run: bodyOp((*Handler).extend)},
	{name: opInspect, method: http.MethodGet, path: "/v1/inspect", right: rightRead, waits: true, run: queryOp(decodeInspect, (*Handler).inspect)},
	{name: opList, method: http.MethodGet, path: "/v1/locks", right: rightRead, waits: true, run: queryOp(decodeList, (*Handler).list)},

	{name: opSessionCreate, method: http.MethodPost, path: "/v1/session/create", right: rightLock, sessionUse: "create a session",
		run: bodyOp((*Handler).sessionCreate)},
	{name: opSessionRenew, method: http.MethodPost, path: "/v1/session/renew", right: rightLock, sessionUse: "renew a session",
		run: bodyOp((*Handler).sessionRenew)},
	{name: opSessionDestroy, method: http.MethodPost, path: "/v1/session/destroy", right: rightLock, sessionUse: "destroy a session",
		run: bodyOp((*Handler).sessionDestroy)},
	{name: opSessionInfo, method: http.MethodGet, path: "/v1/session/info", run: queryOp(decodeSessionInfo, (*Handler).sessionInfo)},

	{name: opWaiters, method: http.MethodGet, path: "/v1/waiters", right: rightRead, run: queryOp(decodeWaiters, (*Handler).waiters)},
	{name: opForceRelease, method: http.MethodPost, path: "/v1/force-release", right: rightAdmin, run: bodyOp((*Handler).forceRelease)},
}

// batchOps and streamOps find an operation by its name in a batch and its
// code on the stream.
var (
	batchOps  = map[string]*operation{}
	streamOps = map[byte]*operation{}
)

func init() {
	for _, op := range ops {
		if op.batchName != "" {
			batchOps[op.batchName] = op
		}
		if op.streamOp != 0 {
			streamOps[op.streamOp] = op
		}
	}
}

// typedOp is the form of every operation: Req is its request, Ans its answer.
type typedOp[Req, Ans any] func(h *Handler, ctx context.Context, who *caller, c *opCall, req *Req) (Ans, *apiError)

// bodyOp runs fn on the JSON body its front-end has, decoded strictly
// (decodeBody).
func bodyOp[Req, Ans any](fn typedOp[Req, Ans]) func(*Handler, context.Context, *caller, *opCall, *opInput) (any, *apiError) {
	return func(h *Handler, ctx context.Context, who *caller, c *opCall, in *opInput) (any, *apiError) {
		var req Req
		if e := in.decodeBody(&req); e != nil {
			return nil, e
		}
		return boxAnswer(fn(h, ctx, who, c, &req))
	}
}

// queryOp runs fn on the request decode makes of a query string.
func queryOp[Req, Ans any](decode func(rawQuery string) (Req, *apiError), fn typedOp[Req, Ans]) func(*Handler, context.Context, *caller, *opCall, *opInput) (any, *apiError) {
	return func(h *Handler, ctx context.Context, who *caller, c *opCall, in *opInput) (any, *apiError) {
		req, e := decode(in.rawQuery())
		if e != nil {
			return nil, e
		}
		return boxAnswer(fn(h, ctx, who, c, &req))
	}
}

// boxAnswer boxes a typed answer, or nothing with an error.
func boxAnswer[Ans any](ans Ans, e *apiError) (any, *apiError) {
	if e != nil {
		return nil, e
	}
	return ans, nil
}

// opInput is an operation's request as its front-end has it: a body
// already read (batch, stream), or an HTTP request to read it from.
type opInput struct {
	body []byte
	http *httpInput // when not nil: the request is there
}

// httpInput is the request of an operation served on its own route: its
// body (at most maxBody bytes) or, for a GET, its query string.
type httpInput struct {
	w       http.ResponseWriter
	r       *http.Request
	maxBody int64
}

// decodeBody decodes the request's JSON body into v as readJSON does.
func (in *opInput) decodeBody(v any) *apiError {
	if in.http != nil {
		return readJSON(in.http.w, in.http.r, in.http.maxBody, v)
	}
	return decodeBody(in.body, v)
}

// rawQuery is a GET route's query string ("" without an HTTP request).
func (in *opInput) rawQuery() string {
	if in.http != nil {
		return in.http.r.URL.RawQuery
	}
	return ""
}

// opCall is what a front-end tells an operation, beyond its caller and
// request, and what the operation tells back.
type opCall struct {
	// op labels the operation in the metrics; the operation may refine it
	// (acquire -> acquire_wait).
	op    string
	start time.Time
	// need is the right the operation needs (operation.right).
	need right
	// remote is the caller's address, for the audit trail.
	remote string
	// noWait, when set, is why this front-end cannot let the operation
	// wait (a batch answers when all its operations are done): an
	// operation asked to wait refuses with it (400 invalid_wait).
	noWait string
	// bounded, when not nil, is a context already bounded by
	// Config.OpTimeout from start (a batch's: one timer per batch rather
	// than one per operation), for store calls with that limit.
	bounded context.Context
	// answerDeadline, when not nil, moves the deadline of the answer's
	// write (an HTTP route's): see mayTake.
	answerDeadline interface{ SetWriteDeadline(time.Time) error }
	// index is a blocking query's index (IndexHeader), set with hasIndex.
	index    uint64
	hasIndex bool
}

// mayTake tells the front-end that the answer may go out as late as d
// after the operation's start (an acquire that waits, a blocking query).
// A batched or streamed operation has no write deadline of its own.
func (c *opCall) mayTake(d time.Duration) {
	if c.answerDeadline != nil {
		_ = c.answerDeadline.SetWriteDeadline(c.start.Add(d))
	}
}

// opContext bounds the operation's store calls by limit from its start:
// ctx with a deadline of its own, or the front-end's context already
// bounded by Config.OpTimeout when that is the limit.
func (h *Handler) opContext(ctx context.Context, c *opCall, limit time.Duration) (context.Context, context.CancelFunc) {
	if c.bounded != nil && limit == h.cfg.OpTimeout {
		return c.bounded, func() {}
	}
	return context.WithTimeout(ctx, limit)
}

// runOp runs op: the caller check of a session operation, the request's
// decoding and the operation itself, counts it in the metrics and returns
// the status and body of its answer.
func (h *Handler) runOp(ctx context.Context, op *operation, who *caller, c *opCall, in *opInput) (int, any) {
	c.start, c.need = time.Now(), op.right
	var body any
	apiErr := sessionAllowed(who, op.right, op.sessionUse)
	if apiErr == nil {
		body, apiErr = op.run(h, ctx, who, c, in)
	}
	result := "ok"
	if apiErr != nil {
		result = apiErr.detail.Code
	}
	h.metrics.observe(c.op, result, time.Since(c.start))
	if apiErr != nil {
		if apiErr.status == http.StatusInternalServerError {
			h.log.Error("api: internal error", "op", c.op, "error", apiErr.detail.Message)
		}
		return apiErr.status, api.ErrorBody{Error: apiErr.detail}
	}
	return http.StatusOK, body
}

// runOpEncoded is runOp for an operation whose answer goes inside another
// (a batch's, a stream's frame): the answer is JSON already.
func (h *Handler) runOpEncoded(ctx context.Context, op *operation, who *caller, c *opCall, in *opInput) (int, []byte) {
	return encodeAnswer(h.runOp(ctx, op, who, c, in))
}

// encodeAnswer encodes runOp's answer for a batch or a stream.
func encodeAnswer(status int, body any) (int, []byte) {
	raw, err := httpwire.EncodeAnswer(body)
	if err != nil { // no wire type fails to encode; say so rather than answer nothing
		status = http.StatusInternalServerError
		raw, _ = json.Marshal(api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeInternal, Message: "api: encoding the answer: " + err.Error()}})
	}
	return status, raw
}

// httpOp is one operation served on its own HTTP route: its call, its
// input and the answer's write deadline, in one allocation.
type httpOp struct {
	call     opCall
	in       opInput
	req      httpInput
	deadline http.ResponseController
}

// serveOp is the HTTP route of op: the caller is the request's token, the
// request its body or query string, and the answer its JSON body (with a
// blocking query's index in IndexHeader).
func (h *Handler) serveOp(op *operation) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		x := &httpOp{
			call: opCall{op: op.name, remote: r.RemoteAddr},
			req:  httpInput{w: w, r: r, maxBody: h.cfg.MaxBodyBytes},
		}
		x.in.http = &x.req
		if op.waits {
			x.deadline = *http.NewResponseController(w)
			x.call.answerDeadline = &x.deadline
		}
		status, body := h.runOp(r.Context(), op, callerOf(r), &x.call, &x.in)
		if x.call.hasIndex && status == http.StatusOK {
			w.Header().Set(IndexHeader, strconv.FormatUint(x.call.index, 10))
		}
		writeJSON(w, status, body)
	}
}
