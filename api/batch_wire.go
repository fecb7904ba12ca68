package api

import "encoding/json"

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
