package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/internal/httpwire"
)

// Batching. Over HTTP/1.1 each operation is a request and an answer: on
// loopback, with a node that commits a raft entry in about a millisecond,
// their system calls, goroutines and JSON cost several times the CPU of
// the operation itself. So the client keeps at most one exchange that
// carries batchable operations (acquires without wait, releases, extends)
// in flight per endpoint: an operation that finds none goes at once on its
// own route, so that a lone caller waits for nothing; one that finds one
// queues, and when that exchange ends, whatever queued meanwhile goes as one
// POST /v1/batch (or on its own route when it is alone), and so on. Each
// operation then waits at most one exchange longer than it would alone, and
// many goroutines of one program share the cost of each exchange, as they
// share a raft entry on the node.
//
// Every operation keeps the meaning it has alone: the node runs each one as
// its own route would and answers each one's status and body, which the
// client reads exactly as it reads a lone answer; when the batch's exchange
// fails, each operation sees that failure as its own and is resent (or not)
// by the same rules (roundTrip). A node that answers the batch 404 or 405
// (an agent older than the route) gets every later operation on its own
// route; a batch the node refuses as a whole before running anything (too
// large, malformed) is sent again one operation at a time.

// maxInflight is how many exchanges with batchable operations may be in
// flight to one endpoint before operations queue. One gave both the most
// operations per second and the least CPU per operation in bench's par64
// (2, 3, 8, 16 and 64 did worse): the node answers a batch in about one
// raft commit, which the queued operations would have waited for anyway.
const maxInflight = 1

// batchMaxBytes bounds the operations' bodies in one batch, well under the
// node's default body limit (apiserver.DefaultMaxBodyBytes, 64 KiB).
const batchMaxBytes = 32 << 10

// batcher is the queue of one endpoint.
type batcher struct {
	mu       sync.Mutex
	inflight int // exchanges with batchable operations in flight
	queue    []*batchItem
	off      atomic.Bool // the node has no /v1/batch
	// arrived counts the operations ever queued.
	arrived uint64
	// want and ready: a linger (see sendQueued) waits until arrived
	// reaches want; ready is closed when it has.
	want  uint64
	ready chan struct{}
}

// batchItem is one queued operation and, once done, its outcome as
// Client.send reports it.
type batchItem struct {
	ctx   context.Context
	x     exchange
	body  []byte
	state atomic.Int32 // itemQueued, itemTaken or itemAbandoned
	done  chan struct{}

	status      int
	payload     []byte
	sent, stale bool
	err         error
}

const (
	itemQueued    = iota
	itemTaken     // in a batch on its way: its caller can no longer take it back
	itemAbandoned // its caller's context ended first: never sent
)

// perEndpoint is m's *T of the endpoint base, made on first use.
func perEndpoint[T any](m *sync.Map, base *url.URL) *T {
	if v, ok := m.Load(base); ok {
		return v.(*T)
	}
	v, _ := m.LoadOrStore(base, new(T))
	return v.(*T)
}

// sendOp is send, for operations that may travel in a batch.
func (c *Client) sendOp(ctx context.Context, base *url.URL, x exchange, body []byte) (status int, payload []byte, sent, stale bool, err error) {
	if x.batch == "" || c.noBatch || len(body) > batchMaxBytes {
		return c.sendAlone(ctx, base, x, body)
	}
	b := perEndpoint[batcher](&c.batchers, base)
	if b.off.Load() {
		return c.send(ctx, base, x, body)
	}
	b.mu.Lock()
	if b.inflight < maxInflight {
		b.inflight++
		b.mu.Unlock()
		status, payload, sent, stale, err = c.sendAlone(ctx, base, x, body)
		c.sendQueued(b, base)
		return status, payload, sent, stale, err
	}
	it := &batchItem{ctx: ctx, x: x, body: body, done: make(chan struct{})}
	b.queue = append(b.queue, it)
	b.arrived++
	if b.ready != nil && b.arrived >= b.want {
		close(b.ready)
		b.ready = nil
	}
	b.mu.Unlock()
	select {
	case <-it.done:
		return it.status, it.payload, it.sent, it.stale, it.err
	case <-ctx.Done():
		if it.state.CompareAndSwap(itemQueued, itemAbandoned) {
			return 0, nil, false, false, ctx.Err()
		}
		// On its way: the node may act on it, as on a request whose
		// context ends once it is written.
		return 0, nil, true, false, ctx.Err()
	}
}

// sendAlone sends one operation on the endpoint's stream when one is up
// and takes the operation, else as a request of its own.
func (c *Client) sendAlone(ctx context.Context, base *url.URL, x exchange, body []byte) (status int, payload []byte, sent, stale bool, err error) {
	if x.stream != 0 && !c.noStream && len(body) <= batchMaxBytes {
		if s := c.stream(base); s != nil {
			var ok bool
			if status, payload, sent, err, ok = s.do(ctx, x.stream, body); ok {
				return status, payload, sent, false, err
			}
		}
	}
	return c.send(ctx, base, x, body)
}

// sendQueued is called when an exchange with batchable operations ends:
// what queued meanwhile goes out (in a goroutine of its own, so that the
// caller has its answer at once), else the endpoint has none in flight.
//
// When a batch of n operations comes back, their callers are likely to
// start their next operations right away: the goroutine lingers until n
// more have queued (beyond those that queued while the batch was out), for
// at most a quarter of the batch's round trip (and batchMaxLinger), and
// sends them all together. Without it, the first to come back would find
// nothing in flight and go alone, and the others would queue behind it for
// a whole round trip: every wave of operations would take two round trips,
// and the node two raft commits. Counting only the operations already
// queued would do the same to two halves of the callers: those that queued
// while a batch was out would go without the batch's own callers, which
// would queue behind them, and so on, each half in batches of its own.
func (c *Client) sendQueued(b *batcher, base *url.URL) {
	items := b.take()
	if len(items) == 0 {
		return
	}
	go func() {
		for len(items) > 0 {
			start := time.Now()
			answered := c.sendBatch(b, base, items)
			if len(items) > 1 {
				b.linger(answered+uint64(len(items)), min(time.Since(start)/4, batchMaxLinger))
			}
			items = b.take()
		}
	}()
}

// batchMaxLinger bounds the wait for the callers of a batch to come back.
const batchMaxLinger = time.Millisecond

// linger waits until want operations have ever queued (arrived), or for d.
func (b *batcher) linger(want uint64, d time.Duration) {
	b.mu.Lock()
	if b.arrived >= want || d <= 0 {
		b.mu.Unlock()
		return
	}
	ready := make(chan struct{})
	b.want, b.ready = want, ready
	b.mu.Unlock()
	t := time.NewTimer(d)
	select {
	case <-ready:
	case <-t.C:
	}
	t.Stop()
	b.mu.Lock()
	if b.ready == ready {
		b.ready = nil
	}
	b.mu.Unlock()
}

// take removes the next batch from the queue (what fits in one), or marks
// the endpoint as having nothing in flight when the queue is empty.
func (b *batcher) take() []*batchItem {
	b.mu.Lock()
	defer b.mu.Unlock()
	var items []*batchItem
	size, n := 0, 0
	for _, it := range b.queue {
		if len(items) == MaxBatchOps || len(items) > 0 && size+len(it.body) > batchMaxBytes {
			break
		}
		n++
		if it.state.CompareAndSwap(itemQueued, itemTaken) {
			items = append(items, it)
			size += len(it.body)
		}
	}
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil // let the array go
	}
	if len(items) == 0 {
		b.inflight--
	}
	return items
}

// sendBatch sends items (taken from the queue) and reports each one's
// outcome to its caller. It returns how many operations had ever queued
// (batcher.arrived) when it did.
func (c *Client) sendBatch(b *batcher, base *url.URL, items []*batchItem) (arrived uint64) {
	defer func() {
		b.mu.Lock()
		arrived = b.arrived
		b.mu.Unlock()
		for _, it := range items {
			close(it.done)
		}
	}()
	if len(items) == 1 {
		it := items[0]
		it.status, it.payload, it.sent, it.stale, it.err = c.sendAlone(it.ctx, base, it.x, it.body)
		return
	}
	// The batch is wanted while any of its callers waits for it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waiting atomic.Int32
	waiting.Store(int32(len(items)))
	ops := make([]BatchOp, len(items))
	for i, it := range items {
		stop := context.AfterFunc(it.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
		ops[i] = BatchOp{Op: it.x.batch, Body: it.body}
	}
	body := httpwire.EncodeBatchRequest(ops)
	status, payload, sent, stale, err := c.send(ctx, base, exchange{method: http.MethodPost, path: "/v1/batch", write: true, resend: resendAlways}, body)
	switch {
	case err != nil:
		for _, it := range items {
			it.sent, it.stale, it.err = sent, stale, err
		}
	case status == http.StatusOK:
		var resp BatchResponse
		if !httpwire.DecodeAnswer(payload, &resp) && json.Unmarshal(payload, &resp) != nil || len(resp.Results) != len(items) {
			resp.Results = make([]BatchResult, len(items)) // each reads as a 200 that is not the expected JSON
		}
		for i, it := range items {
			it.status, it.payload, it.sent = resp.Results[i].Status, resp.Results[i].Body, true
			if it.status == 0 {
				it.status = http.StatusOK
			}
		}
	default:
		var e ErrorBody
		_ = json.Unmarshal(payload, &e)
		switch e.Error.Code {
		case CodeNotFound, CodeMethodNotAllowed:
			b.off.Store(true) // an agent without the route
			c.sendEach(base, items)
		case CodeBadRequest, CodeBodyTooLarge, CodeUnsupportedMedia:
			c.sendEach(base, items) // refused as a whole: nothing ran
		default:
			// An answer for the whole batch (no token, a proxy's error):
			// each operation reads it as its own.
			for _, it := range items {
				it.status, it.payload, it.sent = status, payload, true
			}
		}
	}
	return // arrived: set as the callers are told
}

// sendEach sends items one by one on their own routes, at once.
func (c *Client) sendEach(base *url.URL, items []*batchItem) {
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Go(func() {
			it.status, it.payload, it.sent, it.stale, it.err = c.send(it.ctx, base, it.x, it.body)
		})
	}
	wg.Wait()
}
