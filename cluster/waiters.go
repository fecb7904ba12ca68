package cluster

import (
	"sync"

	"github.com/raftlock/raftlock/fsm"
)

// waiterKey identifies one queued acquire.
type waiterKey struct {
	key   string
	owner fsm.Owner
}

// waiter is one waiting acquire parked at the leader: its caller's request
// waits until the leader's own state machine hands it the lock or drops it
// from the queue.
type waiter struct {
	// wake receives the owner's EventGranted, EventWaitExpired or
	// EventUnclaimed. Size one: the state machine delivers without
	// blocking, replacing an unread event with a newer one (see deliver).
	wake chan fsm.Event
	// gone is closed when the waiter leaves the registry (its call ended,
	// withdrew, or a newer call by the same owner replaced it).
	gone chan struct{}
}

func newWaiter() *waiter {
	return &waiter{wake: make(chan fsm.Event, 1), gone: make(chan struct{})}
}

// waiterRegistry holds the waiting acquires parked at this node while it
// leads, keyed by (key, owner). Followers keep none: their callers' waits
// are parked at the leader. It knows nothing of raft: park and withdraw
// take the function that queues a command for proposal.
//
// Why park and withdraw queue their command under claim: a caller whose
// connection broke may send its acquire again (the same owner) while the
// leader is still withdrawing the broken call. The proposer keeps queue
// order, so queuing "register, acquire" and "check still mine, cancel-wait"
// under one lock puts the cancel-wait before the new acquire in the log,
// or skips it: a withdrawal never cancels a newer call's claim or grant.
type waiterRegistry struct {
	claim   sync.Mutex // serializes park's and withdraw's register-and-queue
	mu      sync.Mutex // protects waiting; taken inside Apply by deliver
	waiting map[waiterKey]*waiter
}

func newWaiterRegistry() *waiterRegistry {
	return &waiterRegistry{waiting: make(map[waiterKey]*waiter)}
}

// park registers (key, owner) and then calls queue (which queues the acquire
// for proposal), both under claim, so a hand-off applied before the
// acquire's answer arrives is not missed. Registering the same (key, owner)
// twice replaces the first waiter, which then only returns through its own
// context or its term's end, and whose withdraw does nothing.
func (r *waiterRegistry) park(key string, owner fsm.Owner, queue func() error) (*waiter, error) {
	w := newWaiter()
	k := waiterKey{key, owner}
	r.claim.Lock()
	defer r.claim.Unlock()
	r.mu.Lock()
	if old := r.waiting[k]; old != nil {
		close(old.gone)
	}
	r.waiting[k] = w
	r.mu.Unlock()
	if err := queue(); err != nil {
		r.unregister(key, owner, w)
		return nil, err
	}
	return w, nil
}

// withdraw unregisters w and calls queue (which queues a cancel-wait) if w
// is still the latest call for (key, owner); it reports whether it did.
func (r *waiterRegistry) withdraw(key string, owner fsm.Owner, w *waiter, queue func()) bool {
	k := waiterKey{key, owner}
	r.claim.Lock()
	defer r.claim.Unlock()
	r.mu.Lock()
	mine := r.waiting[k] == w
	if mine {
		delete(r.waiting, k)
		close(w.gone)
	}
	r.mu.Unlock()
	if mine {
		queue()
	}
	return mine
}

// unlessParked calls queue (which queues a cancel-wait) unless a call by
// (key, owner) is parked; then it returns a channel closed when that call
// leaves the registry, and does not call queue.
func (r *waiterRegistry) unlessParked(key string, owner fsm.Owner, queue func()) (parked <-chan struct{}) {
	r.claim.Lock()
	defer r.claim.Unlock()
	r.mu.Lock()
	w := r.waiting[waiterKey{key, owner}]
	r.mu.Unlock()
	if w != nil {
		return w.gone
	}
	queue()
	return nil
}

func (r *waiterRegistry) unregister(key string, owner fsm.Owner, w *waiter) {
	k := waiterKey{key, owner}
	r.mu.Lock()
	if r.waiting[k] == w {
		delete(r.waiting, k)
		close(w.gone)
	}
	r.mu.Unlock()
}

// deliver is the state machine's observer: it runs inside Apply, so it never blocks.
func (r *waiterRegistry) deliver(ev fsm.Event) {
	switch ev.Kind {
	case fsm.EventGranted, fsm.EventWaitExpired, fsm.EventUnclaimed:
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.waiting[waiterKey{ev.Key, ev.Owner}]
	if w == nil {
		return
	}
	// The newest event wins: an unread one may be stale (an earlier
	// acquisition's by the same owner), and the waiter skips stale ones, so
	// a stale event must never crowd out the real outcome. Holding r.mu
	// makes the drain-and-send atomic against other deliveries.
	for {
		select {
		case w.wake <- ev:
			return
		default:
			select {
			case <-w.wake:
			default:
			}
		}
	}
}

func (r *waiterRegistry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiting)
}
