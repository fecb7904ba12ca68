package apiserver

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/internal/httpwire"
)

// batch serves POST /v1/batch (package api's BatchRequest): each operation
// is the one its route runs (acquire, release, extend, from ops: the same
// decoding, rights and answers), with the batch's caller (token rights,
// connection), concurrently with the others, and is counted in the
// metrics as its own; the answer, once all are done, holds each one's
// status and body. The operations share one context bounded by
// Config.OpTimeout (opCall.bounded): no per-operation timer. On a cluster
// node their commands go to the raft leader as one group
// (cluster.CommandGroup), so that they share one raft entry. A malformed
// batch (not JSON, an unknown operation, too many) is refused as a whole,
// before any operation runs. Acquires in a
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
	batched := make([]*operation, len(req.Ops))
	for i, op := range req.Ops {
		if batched[i] = batchOps[op.Op]; batched[i] == nil {
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
	h.metrics.batchOps.Observe(float64(len(batched)))
	results := make([]api.BatchResult, len(batched))
	type batchedCall struct {
		call opCall
		in   opInput
	}
	calls := make([]batchedCall, len(batched))
	who := callerOf(r)
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.OpTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var group *cluster.CommandGroup
	if g, ok := h.store.(commandGrouper); ok && len(batched) > 1 {
		group = g.NewCommandGroup(ctx, len(batched))
	}
	run := func(i int) {
		defer wg.Done()
		opCtx := ctx
		if group != nil {
			var done func()
			opCtx, done = group.Member(ctx)
			defer done()
		}
		c := &calls[i]
		c.call = opCall{op: batched[i].name, remote: r.RemoteAddr, bounded: opCtx}
		if batched[i].waits {
			c.call.noWait = batchNoWait
		}
		c.in = opInput{body: req.Ops[i].Body}
		status, raw := h.runOpEncoded(r.Context(), batched[i], who, &c.call, &c.in)
		results[i] = api.BatchResult{Status: status, Body: raw}
	}
	wg.Add(len(batched))
	for i := range batched[1:] {
		h.batchWorkers.run(func() { run(i + 1) })
	}
	run(0)
	wg.Wait()
	writeBatchResponse(w, results)
}

// batchNoWait refuses an acquire in a batch that asks to wait.
const batchNoWait = "api: an acquire in a batch cannot wait; send it on its own to /v1/acquire"

// commandGrouper is a store that sends the commands of concurrent callers
// to the raft leader together (cluster.Node): a batch's operations, which
// reach the node one by one, then share one forwarding message and one
// raft entry, and the batch's answer waits for one commit rather than for
// the last of two or three.
type commandGrouper interface {
	NewCommandGroup(ctx context.Context, size int) *cluster.CommandGroup
}

// writeBatchResponse writes what writeJSON writes for an api.BatchResponse
// of results, byte for byte (httpwire.AppendBatchResponse), with its
// Content-Length.
func writeBatchResponse(w http.ResponseWriter, results []api.BatchResult) {
	out := httpwire.AppendBatchResponse(nil, results)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	// Announced, so that an answer larger than net/http's buffer (2 KiB:
	// about a dozen results) goes out as it is, not in chunks to frame and
	// for the client to reassemble.
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out) // the client may be gone; nothing useful to do about it
}

// readBody reads a request's body, at most limit bytes, into a buffer of
// the size it announces (io.ReadAll would grow one from 512 bytes).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	if r.ContentLength <= 0 || r.ContentLength > limit {
		return io.ReadAll(rd)
	}
	buf := make([]byte, 0, r.ContentLength+1) // +1: room to see the end without growing
	for {
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

// workerPool runs the operations of batches on goroutines that live on
// for a while between batches, keeping the stacks they grew: a fresh
// goroutine per operation spends a good part of its CPU growing its stack
// through the store call.
type workerPool struct{ work chan func() }

// workerIdle is how long a worker waits for the next operation before it
// ends.
const workerIdle = time.Second

func (p *workerPool) run(fn func()) {
	select {
	case p.work <- fn: // an idle worker takes it
	default:
		go p.worker(fn)
	}
}

func (p *workerPool) worker(fn func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(workerIdle)
		select {
		case fn = <-p.work:
		case <-idle.C:
			return
		}
	}
}
