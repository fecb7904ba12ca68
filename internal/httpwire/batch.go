package httpwire

import (
	"encoding/json"
	"slices"
	"strconv"
)

// POST /v1/batch carries several lock operations that need no wait in one
// HTTP exchange: the Go client sends the operations its goroutines start
// while an earlier exchange with the node is in flight as one batch, so that
// the per-request cost of HTTP (a request, an answer, their system calls and
// goroutines on both sides) is paid once per batch, not once per operation.
// Each operation is exactly what its own route takes and answers; an agent
// without the route (an older one) answers 404 not_found, and the client
// then sends the operations one by one.

// Operations a batch may carry: the names of their own routes.
const (
	BatchAcquire = "acquire" // POST /v1/acquire without wait: a batch answers when all its operations are done
	BatchRelease = "release" // POST /v1/release
	BatchExtend  = "extend"  // POST /v1/extend
)

// MaxBatchOps is the most operations one POST /v1/batch may carry.
const MaxBatchOps = 256

// BatchRequest is the body of POST /v1/batch.
type BatchRequest struct {
	Ops []BatchOp `json:"ops"`
}

// BatchOp is one operation of a batch: its route's name (BatchAcquire,
// BatchRelease, BatchExtend) and the body that route takes.
type BatchOp struct {
	Op   string          `json:"op"`
	Body json.RawMessage `json:"body"`
}

// BatchResponse answers POST /v1/batch (200) once every operation is done:
// one result per operation, in the order of the request.
type BatchResponse struct {
	Results []BatchResult `json:"results"`
}

// BatchResult is what the operation's own route would have answered: its
// HTTP status and its body (the 200 answer, or {"error": ...}).
type BatchResult struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// Both envelopes are written by hand: their bodies are json.Marshal's
// output already (compact, with HTML characters escaped, as an encoder
// would leave them), which encoding/json would scan once more.

// EncodeBatchRequest is the body of POST /v1/batch carrying ops, each
// Op one of the Batch names (nothing to escape) and each Body a
// request's JSON.
func EncodeBatchRequest(ops []BatchOp) []byte {
	size := len(`{"ops":[]}`)
	for _, op := range ops {
		size += len(`{"op":"","body":},`) + len(op.Op) + len(op.Body)
	}
	out := make([]byte, 0, size)
	out = append(out, `{"ops":[`...)
	for i, op := range ops {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"op":"`...)
		out = append(out, op.Op...)
		out = append(out, `","body":`...)
		out = append(out, op.Body...)
		out = append(out, '}')
	}
	return append(out, "]}"...)
}

// AppendBatchResponse appends what json.NewEncoder(w).Encode writes for a
// BatchResponse of results, byte for byte (its final newline included).
func AppendBatchResponse(out []byte, results []BatchResult) []byte {
	size := len(`{"results":[]}`) + 1
	for _, r := range results {
		size += len(`{"status":000,"body":},`) + len(r.Body)
	}
	out = slices.Grow(out, size)
	out = append(out, `{"results":[`...)
	for i, r := range results {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"status":`...)
		out = strconv.AppendInt(out, int64(r.Status), 10)
		out = append(out, `,"body":`...)
		out = append(out, r.Body...)
		out = append(out, '}')
	}
	return append(out, "]}\n"...)
}

// decodeBatchResponse reads {"results":[{"status":N,"body":VALUE},...]},
// each VALUE checked by json.Valid.
func decodeBatchResponse(b []byte, out *BatchResponse) bool {
	results := []BatchResult{}
	ok := objectArray(b, "results", func(b []byte, i int) (int, bool) {
		const head = `{"status":`
		if !hasPrefixAt(b, i, head) {
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
		if !hasPrefixAt(b, j, mid) {
			return 0, false
		}
		i = j + len(mid)
		end, ok := valueEnd(b, i)
		if !ok || !at(b, end, '}') || !json.Valid(b[i:end]) {
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

// fastDecodeBatch is DecodeFast for a batch: {"ops": [{"op": "...",
// "body": {...}}, ...]}, each body a flat object as DecodeFast reads one
// (which its operation's own decoding then checks against its fields).
func fastDecodeBatch(body []byte, req *BatchRequest) bool {
	ops := []BatchOp{}
	ok := objectArray(body, "ops", func(b []byte, i int) (int, bool) {
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
func scanBatchOp(b []byte, i int) (BatchOp, int, bool) {
	var op BatchOp
	if !at(b, i, '{') {
		return op, 0, false
	}
	i = skipSpace(b, i+1)
	haveOp, haveBody := false, false
	for {
		from, to, ok := plainString(b, i)
		if !ok {
			return op, 0, false
		}
		i = skipSpace(b, to+1)
		if !at(b, i, ':') {
			return op, 0, false
		}
		i = skipSpace(b, i+1)
		switch string(b[from:to]) {
		case "op":
			vf, vt, ok := plainString(b, i)
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
		i = skipSpace(b, i)
		if at(b, i, ',') {
			i = skipSpace(b, i+1)
			continue
		}
		if !at(b, i, '}') || !haveOp || !haveBody {
			return op, 0, false
		}
		return op, i + 1, true
	}
}
