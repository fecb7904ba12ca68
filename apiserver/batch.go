package apiserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/raftlock/raftlock/api"
)

// batch serves POST /v1/batch (package api's BatchRequest): each operation
// runs as its own route would run it, with the batch's caller (token
// rights, connection), concurrently with the others, and is counted in the
// metrics as its own; the answer, once all are done, holds each one's
// status and body. A malformed batch (not JSON, an unknown operation, too
// many) is refused as a whole, before any operation runs. Acquires in a
// batch may not wait: the batch would hold every other answer until the
// wait ends.
func (h *Handler) batch(w http.ResponseWriter, r *http.Request) {
	if e := noQuery(r); e != nil {
		writeError(w, e)
		return
	}
	var req api.BatchRequest
	if e := readJSON(w, r, h.cfg.MaxBodyBytes, &req); e != nil {
		writeError(w, e)
		return
	}
	if len(req.Ops) == 0 || len(req.Ops) > api.MaxBatchOps {
		writeError(w, badRequest("api: a batch carries 1 to %d operations in ops, not %d", api.MaxBatchOps, len(req.Ops)))
		return
	}
	type batchedOp struct {
		name string
		fn   opFunc
		path string
	}
	ops := make([]batchedOp, len(req.Ops))
	for i, op := range req.Ops {
		switch op.Op {
		case api.BatchAcquire:
			ops[i] = batchedOp{opAcquire, h.acquire, "/v1/acquire"}
		case api.BatchRelease:
			ops[i] = batchedOp{opRelease, h.release, "/v1/release"}
		case api.BatchExtend:
			ops[i] = batchedOp{opExtend, h.extend, "/v1/extend"}
		default:
			e := badRequest("api: ops[%d]: op %q is not one a batch carries (%s, %s or %s)", i, op.Op, api.BatchAcquire, api.BatchRelease, api.BatchExtend)
			e.detail.Field = "ops"
			writeError(w, e)
			return
		}
		if len(op.Body) == 0 {
			e := badRequest("api: ops[%d]: body is required: the JSON object the operation's own route takes", i)
			e.detail.Field = "ops"
			writeError(w, e)
			return
		}
	}
	resp := api.BatchResponse{Results: make([]api.BatchResult, len(ops))}
	run := func(i int) {
		sub := r.WithContext(r.Context()) // the caller's rights travel in the context
		sub.URL = &url.URL{Path: ops[i].path}
		sub.Body = io.NopCloser(bytes.NewReader(req.Ops[i].Body))
		sub.ContentLength = int64(len(req.Ops[i].Body))
		status, body := h.runOp(ops[i].name, ops[i].fn, batchWriter{}, sub, true)
		raw, err := json.Marshal(body)
		if err != nil { // no wire type fails to encode; say so rather than answer nothing
			status = http.StatusInternalServerError
			raw, _ = json.Marshal(api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeInternal, Message: "api: encoding the answer: " + err.Error()}})
		}
		resp.Results[i] = api.BatchResult{Status: status, Body: raw}
	}
	if len(ops) == 1 {
		run(0)
	} else {
		var wg sync.WaitGroup
		for i := range ops {
			wg.Go(func() { run(i) })
		}
		wg.Wait()
	}
	writeJSON(w, http.StatusOK, resp)
}

// batchWriter stands for the ResponseWriter of a batched operation, whose
// answer goes into the batch's: the operations only ask it for write
// deadlines (which the batch's own answer keeps) and never write to it.
type batchWriter struct{}

func (batchWriter) Header() http.Header         { return http.Header{} }
func (batchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (batchWriter) WriteHeader(int)             {}
