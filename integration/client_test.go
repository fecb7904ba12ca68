package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// storeSet is a cluster as the workloads' clients see it: one lock.Store per
// node. For a process cluster that is each agent's HTTP API (api.Client);
// for an in-process cluster, each *cluster.Node.
type storeSet interface {
	size() int
	// store returns node i's store, or nil while node i is known to be down
	// or paused (a call to it could only fail or hang).
	store(i int) lock.Store
}

// outcome says what a store call's error means for the operation.
type outcome int

const (
	answered   outcome = iota // nil or an answer about the lock (held, not held): the outcome is known
	notApplied                // certainly took no effect (no leader, node down): retry anywhere
	mayHave                   // may or may not have taken effect: retry with the same owner
)

// classify sorts a store call's error. lock.ErrUnknownOutcome comes first:
// it is also lock.ErrUnavailable.
func classify(err error) outcome {
	switch {
	case err == nil, errors.Is(err, lock.ErrLocked), errors.Is(err, lock.ErrNotHeld), errors.Is(err, lock.ErrNoSession):
		return answered
	case errors.Is(err, lock.ErrUnknownOutcome):
		return mayHave
	case errors.Is(err, lock.ErrUnavailable), errors.Is(err, lock.ErrClosed):
		return notApplied
	}
	// Timeouts, and whatever else: assume the worst.
	return mayHave
}

// expectedError reports whether err is one a store may give under faults;
// anything else (an internal error, a bad request) is worth reporting.
func expectedError(err error) bool {
	return err == nil || errors.Is(err, lock.ErrLocked) || errors.Is(err, lock.ErrNotHeld) || errors.Is(err, lock.ErrNoSession) ||
		errors.Is(err, lock.ErrUnknownOutcome) || errors.Is(err, lock.ErrUnavailable) ||
		errors.Is(err, lock.ErrClosed) || errors.Is(err, context.DeadlineExceeded)
}

// callResult is how one operation (with its retries) ended.
type callResult struct {
	err    error // the answer when known; the last error otherwise
	known  bool  // an answer came back
	unsure bool  // some attempt's outcome was unknown (so it may have taken effect)
}

// attemptTimeout bounds one store call. It is far longer than any node
// takes to answer (a node answers within its request timeout, and a paused
// one once resumed), so a call is not abandoned midway: an api.Client
// acquire abandoned after it was sent releases on its own, which would be a
// second effect the history does not show.
const attemptTimeout = time.Minute

// workClient is one client of a workload: one owner, one node it prefers,
// one operation at a time.
type workClient struct {
	id     int
	owner  lock.Owner
	stores storeSet
	node   int // preferred node; moves on when that node cannot answer
	rng    *rand.Rand

	unexpected *errorLog
	tally      tally // every call's outcome
}

// call runs fn against the client's node until the outcome is known, moving
// to another node whenever one cannot answer, and retrying calls whose
// outcome was unknown with the same owner (the store makes that safe). It
// gives up when budget ends (checked between attempts) with known false.
func (c *workClient) call(budget context.Context, fn func(context.Context, lock.Store) error) callResult {
	var res callResult
	pause := 10 * time.Millisecond
	for {
		s := c.stores.store(c.node)
		if s == nil {
			c.node = (c.node + 1) % c.stores.size()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
			err := fn(ctx, s)
			cancel()
			res.err = err
			if !expectedError(err) {
				c.unexpected.add(fmt.Errorf("client %d on node %d: %w", c.id, c.node, err))
			}
			switch classify(err) {
			case answered:
				res.known = true
				c.count(res)
				return res
			case mayHave:
				res.unsure = true
			}
			c.node = (c.node + 1) % c.stores.size()
		}
		select {
		case <-budget.Done():
			c.count(res)
			return res
		case <-time.After(pause):
			pause = min(2*pause, 200*time.Millisecond)
		}
	}
}

// errorLog keeps the unexpected errors clients saw (the first few in full).
type errorLog struct {
	mu    sync.Mutex // protects first
	first []error
	count atomic.Int64
}

func (l *errorLog) add(err error) {
	if l.count.Add(1) > 10 {
		return
	}
	l.mu.Lock()
	l.first = append(l.first, err)
	l.mu.Unlock()
}

func (l *errorLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d unexpected errors, first: %v", l.count.Load(), l.first)
}

func (c *workClient) count(res callResult) {
	switch {
	case res.known:
		c.tally.ops++
		if res.unsure {
			c.tally.unsure++
		}
	case res.unsure:
		c.tally.unknown++
	default:
		c.tally.dropped++
	}
}

// tally counts a client's operations by how they ended.
type tally struct {
	ops     int // outcome known
	unsure  int // of those, some attempt's outcome was unknown first
	unknown int // outcome never known
	dropped int // certainly took no effect, or a read that failed
}

func (a *tally) add(b tally) {
	a.ops += b.ops
	a.unsure += b.unsure
	a.unknown += b.unknown
	a.dropped += b.dropped
}
