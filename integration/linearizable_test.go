package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/raftlock/raftlock/lock"
)

// The linearizability workload: many clients, each one owner, acquire,
// release, extend and inspect a few keys through different nodes while a
// nemesis works; every operation is recorded with its invocation and
// response times and the history is checked with porcupine against
// lockModel (model_test.go), and the tokens against checkTokenOrder.

// linTTL is far longer than any run: no lease expires during the workload,
// which the model relies on (log time stands still while the cluster is
// down, so crashes do not bring expiry nearer either).
const linTTL = 6 * time.Hour

// checkTimeout bounds porcupine; a check that runs out is reported as a
// problem, not as a pass.
const checkTimeout = 5 * time.Minute

// belief is what a client believes about its hold on a key.
type belief int

const (
	notHolding belief = iota
	holding
	maybeHolding // an operation's outcome stayed unknown
)

type linWorkload struct {
	stores     storeSet
	keys       []string
	start      time.Time
	unexpected *errorLog
	kind       linKind
}

// linKind is the kind of the workload's keys: mutexes (the zero value), or
// semaphores of limit, or read/write locks (rw; an acquire reads three
// times in four), checked against groupModel.
type linKind struct {
	limit int
	rw    bool
}

func (k linKind) group() bool { return k.limit > 0 || k.rw }

func (w *linWorkload) now() int64 { return int64(time.Since(w.start)) }

// linClient is one client's share of the history.
type linClient struct {
	*workClient
	ops      []porcupine.Operation
	recorded tally // the operations as recorded: a failed read counts as without effect
}

// runClient issues operations until run ends; an operation in progress
// then may retry until budget ends.
func (w *linWorkload) runClient(c *linClient, run, budget context.Context) {
	beliefs := map[string]belief{}
	for run.Err() == nil {
		key := w.keys[c.rng.IntN(len(w.keys))]
		op := w.pick(c, beliefs[key])
		beliefs[key] = w.do(c, budget, op, key, beliefs[key])
		time.Sleep(time.Duration(c.rng.IntN(3)) * time.Millisecond)
	}
}

// pick chooses the next operation on a key: mostly what a lock user does
// next, sometimes what only a confused one would (releasing or extending a
// lock it does not hold), which must change nothing.
func (w *linWorkload) pick(c *linClient, b belief) lockOp {
	r := c.rng.IntN(100)
	if b == notHolding {
		switch {
		case r < 55:
			return opAcquire
		case r < 80:
			return opInspect
		case r < 92:
			return opRelease
		default:
			return opExtend
		}
	}
	switch {
	case r < 30:
		return opExtend
	case r < 75:
		return opRelease
	case r < 85:
		return opAcquire // again: must be the same grant
	default:
		return opInspect
	}
}

// do runs one operation with its retries, records it, and returns the
// client's belief afterwards.
func (w *linWorkload) do(c *linClient, budget context.Context, op lockOp, key string, b belief) belief {
	in := lockInput{op: op, key: key, client: c.id}
	if op == opAcquire && w.kind.rw {
		in.shared = c.rng.IntN(4) != 0
	}
	call := w.now()
	var out lockOutput
	var res callResult
	next := b
	switch op {
	case opAcquire:
		var lease lock.Lease
		res = c.call(budget, func(ctx context.Context, s lock.Store) error {
			var err error
			lease, err = s.Acquire(ctx, w.acquireRequest(key, c.owner, in.shared))
			return err
		})
		var held *lock.HeldError
		switch {
		case res.known && res.err == nil:
			out, next = lockOutput{ok: true, token: lease.Token}, holding
		case res.known && errors.As(res.err, &held):
			out, next = lockOutput{held: true, token: held.Token}, notHolding
		case res.known: // an answer the model has no place for (ErrNotHeld for an acquire)
			out, next = lockOutput{unknown: true}, maybeHolding
		case res.unsure:
			out, next = lockOutput{unknown: true}, maybeHolding
		}
	case opRelease:
		var released bool
		res = c.call(budget, func(ctx context.Context, s lock.Store) error {
			var err error
			released, err = s.Release(ctx, key, c.owner)
			return err
		})
		switch {
		case res.known:
			out, next = lockOutput{ok: released, maybe: res.unsure}, notHolding
		case res.unsure:
			out = lockOutput{unknown: true}
			if b != notHolding {
				next = maybeHolding
			}
		}
	case opExtend:
		var lease lock.Lease
		res = c.call(budget, func(ctx context.Context, s lock.Store) error {
			var err error
			lease, err = s.Extend(ctx, key, c.owner, linTTL)
			return err
		})
		switch {
		case res.known && res.err == nil:
			out, next = lockOutput{ok: true, token: lease.Token}, holding
		case res.known:
			out, next = lockOutput{}, notHolding
		case res.unsure:
			out = lockOutput{unknown: true}
		}
	case opInspect:
		var info lock.KeyInfo
		res = c.call(budget, func(ctx context.Context, s lock.Store) error {
			var err error
			info, err = s.Inspect(ctx, key)
			return err
		})
		if res.known {
			out = lockOutput{ok: info.Locked, token: info.Token}
			if w.kind.group() {
				out.holders = info.Holders
			}
		}
		res.unsure = false // a read that failed had no effect
	}

	switch {
	case res.known:
		c.recorded.ops++
		if res.unsure {
			c.recorded.unsure++
		}
		c.ops = append(c.ops, porcupine.Operation{ClientId: c.id, Input: in, Call: call, Output: out, Return: w.now()})
	case res.unsure:
		c.recorded.unknown++
		c.ops = append(c.ops, porcupine.Operation{ClientId: c.id, Input: in, Call: call, Output: out, Return: never})
		if op == opAcquire && errors.Is(res.err, context.DeadlineExceeded) {
			// An api.Client acquire abandoned after it went out releases
			// what it may have been granted: a second effect, recorded as
			// a release whose outcome is unknown too.
			c.ops = append(c.ops, porcupine.Operation{ClientId: c.id, Input: lockInput{op: opRelease, key: key, client: c.id}, Call: call, Output: lockOutput{unknown: true}, Return: never})
		}
	default:
		c.recorded.dropped++ // certainly took no effect
	}
	return next
}

// acquireRequest is an acquire of key for owner, of the workload's kind.
func (w *linWorkload) acquireRequest(key string, owner lock.Owner, shared bool) lock.AcquireRequest {
	req := lock.AcquireRequest{Key: key, Owner: owner, TTL: linTTL}
	switch {
	case w.kind.limit > 0:
		req.Kind, req.Limit = lock.KindSemaphore, w.kind.limit
	case w.kind.rw:
		req.Kind, req.Shared = lock.KindRWLock, shared
	}
	return req
}

// runLinearizable runs the workload against stores with the nemesis, then
// checks the history.
func runLinearizable(t *testing.T, s settings, rep *report, stores storeSet, nem *nemesis, clients, keys int) {
	t.Helper()
	runLinearizableKind(t, s, rep, stores, nem, clients, keys, linKind{})
}

// runLinearizableKind is runLinearizable on keys of the given kind.
func runLinearizableKind(t *testing.T, s settings, rep *report, stores storeSet, nem *nemesis, clients, keys int, kind linKind) {
	t.Helper()
	if kind.group() && clients > maxGroupClients {
		t.Fatalf("at most %d clients on semaphores or read/write locks (groupModel)", maxGroupClients)
	}
	w := &linWorkload{stores: stores, start: rep.started, unexpected: &errorLog{}, kind: kind}
	for k := range keys {
		w.keys = append(w.keys, fmt.Sprintf("lin/%d", k))
	}
	run, stop := context.WithTimeout(context.Background(), s.workload)
	defer stop()
	budget, cancel := context.WithTimeout(context.Background(), s.workload+defaultRecoverIn+30*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	all := make([]*linClient, clients)
	for i := range all {
		all[i] = &linClient{workClient: &workClient{id: i, owner: lock.NewOwner(), stores: stores, node: i % stores.size(),
			rng: s.rng(uint64(1000 + i)), unexpected: w.unexpected}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.runClient(all[i], run, budget)
		}()
	}
	nem.run(run)
	wg.Wait()

	var ops []porcupine.Operation
	var sum tally
	for _, c := range all {
		ops = append(ops, c.ops...)
		sum.add(c.recorded)
	}
	rep.ops, rep.unsure, rep.unknown, rep.dropped = sum.ops, sum.unsure, sum.unknown, sum.dropped
	if n := w.unexpected.count.Load(); n > 0 {
		rep.problem("clients saw errors no store should give: %s", w.unexpected)
	}
	model := lockModel
	if kind.group() {
		model = groupModel(kind.limit)
	}
	checkHistoryWith(s, rep, nem.events, ops, model)
}

// countGrants counts the acquires in ops answered with a grant.
func countGrants(ops []porcupine.Operation) int {
	n := 0
	for _, op := range ops {
		in, out := op.Input.(lockInput), op.Output.(lockOutput)
		if in.op == opAcquire && out.ok && !out.unknown {
			n++
		}
	}
	return n
}

// checkHistory checks a linearizability workload's history and keeps it
// (with porcupine's visualisation) on a violation.
func checkHistory(s settings, rep *report, events *eventLog, ops []porcupine.Operation) {
	checkHistoryWith(s, rep, events, ops, lockModel)
}

// checkHistoryWith is checkHistory against model.
func checkHistoryWith(s settings, rep *report, events *eventLog, ops []porcupine.Operation, lockModel porcupine.Model) {
	rep.atLeast(1, countGrants(ops), "acquires granted")
	sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	result := porcupine.CheckOperationsTimeout(lockModel, ops, checkTimeout)
	tokenTrouble := checkTokenOrder(ops)
	for _, v := range tokenTrouble {
		rep.violation("%s", v)
	}
	switch result {
	case porcupine.Ok:
	case porcupine.Unknown:
		rep.problem("porcupine could not decide within %v (%d operations)", checkTimeout, len(ops))
	case porcupine.Illegal:
		rep.violation("the history of %d operations is not linearizable", len(ops))
	}
	if result != porcupine.Illegal && len(tokenTrouble) == 0 {
		return
	}
	_, info := porcupine.CheckOperationsVerbose(lockModel, ops, checkTimeout)
	rep.keep(s, map[string]func(io.Writer) error{
		"visualization.html": func(w io.Writer) error { return porcupine.Visualize(lockModel, info, w) },
		"history.txt": func(w io.Writer) error {
			_, err := io.WriteString(w, describeHistory(ops))
			return err
		},
		"events.txt": func(w io.Writer) error {
			_, err := io.WriteString(w, events.String())
			return err
		},
	})
}

// checkTokenOrder checks what the per-key model cannot see: fencing tokens
// are global. Two grants to different owners or keys never share a token,
// and a grant that began after another one ended has a larger token (a
// repeated acquire by the holder returns its old token, and is skipped).
func checkTokenOrder(ops []porcupine.Operation) []string {
	type grant struct {
		in             lockInput
		token          uint64
		call, response int64
	}
	var grants []grant
	for _, op := range ops {
		in, out := op.Input.(lockInput), op.Output.(lockOutput)
		if in.op == opAcquire && out.ok && !out.unknown {
			grants = append(grants, grant{in, out.token, op.Call, op.Return})
		}
	}
	var trouble []string
	byToken := map[uint64]grant{}
	for _, g := range grants {
		if h, ok := byToken[g.token]; ok && (h.in.key != g.in.key || h.in.client != g.in.client) {
			trouble = append(trouble, fmt.Sprintf("token %d granted twice: c%d on %q and c%d on %q", g.token, h.in.client, h.in.key, g.in.client, g.in.key))
		}
		byToken[g.token] = g
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].response < grants[j].response })
	// Highest token among the grants that responded up to each position.
	high := make([]uint64, len(grants))
	for i, g := range grants {
		high[i] = g.token
		if i > 0 {
			high[i] = max(high[i], high[i-1])
		}
	}
	first := map[uint64]int64{} // each token's first invocation: later grants of it are repeats by the holder
	for _, g := range grants {
		if c, ok := first[g.token]; !ok || g.call < c {
			first[g.token] = g.call
		}
	}
	for _, g := range grants {
		if g.call != first[g.token] {
			continue
		}
		// The grants that responded before g was invoked.
		n := sort.Search(len(grants), func(i int) bool { return grants[i].response >= g.call })
		if n > 0 && high[n-1] > g.token {
			trouble = append(trouble, fmt.Sprintf("c%d was granted %q with token %d after a grant with token %d had completed",
				g.in.client, g.in.key, g.token, high[n-1]))
		}
	}
	return trouble
}
