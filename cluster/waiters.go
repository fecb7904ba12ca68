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

// waiter is a local caller blocked in Acquire until its own node's state
// machine hands it the lock or drops it from the queue.
type waiter struct {
	// wake receives the owner's EventGranted or EventWaitExpired. Size one:
	// the state machine delivers without blocking, replacing an unread
	// event with a newer one (see deliver).
	wake chan fsm.Event
}

// waiterRegistry wakes local callers keyed by (key, owner). Every node keeps
// one for the callers it serves, leader or not: a node learns of a hand-off
// when its own state machine applies it.
type waiterRegistry struct {
	mu      sync.Mutex // protects waiting
	waiting map[waiterKey]*waiter
}

func newWaiterRegistry() *waiterRegistry {
	return &waiterRegistry{waiting: make(map[waiterKey]*waiter)}
}

// register must be called before the acquire is proposed, so that a hand-off
// applied before the proposal's own answer arrives is not missed. Registering
// the same (key, owner) twice replaces the first waiter, which then only
// returns through its own context or timer.
func (r *waiterRegistry) register(key string, owner fsm.Owner) *waiter {
	w := &waiter{wake: make(chan fsm.Event, 1)}
	r.mu.Lock()
	r.waiting[waiterKey{key, owner}] = w
	r.mu.Unlock()
	return w
}

func (r *waiterRegistry) unregister(key string, owner fsm.Owner, w *waiter) {
	k := waiterKey{key, owner}
	r.mu.Lock()
	if r.waiting[k] == w {
		delete(r.waiting, k)
	}
	r.mu.Unlock()
}

// deliver is the state machine's observer: it runs inside Apply, so it never blocks.
func (r *waiterRegistry) deliver(ev fsm.Event) {
	if ev.Kind != fsm.EventGranted && ev.Kind != fsm.EventWaitExpired {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.waiting[waiterKey{ev.Key, ev.Owner}]
	if w == nil {
		return
	}
	// The newest event wins: an unread one may be stale (an earlier
	// acquisition's, re-applied), and the waiter skips stale ones, so a
	// stale event must never crowd out the real outcome. Holding r.mu makes
	// the drain-and-send atomic against other deliveries.
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

// settle wakes waiters whose grant arrived inside a restored snapshot rather
// than as an event: holds reports whether owner holds key now.
func (r *waiterRegistry) settle(holds func(key string, owner fsm.Owner) (fsm.KeyState, bool)) {
	r.mu.Lock()
	keys := make([]waiterKey, 0, len(r.waiting))
	for k := range r.waiting {
		keys = append(keys, k)
	}
	r.mu.Unlock()
	for _, k := range keys {
		if st, ok := holds(k.key, k.owner); ok {
			r.deliver(fsm.Event{Kind: fsm.EventGranted, Key: k.key, Owner: k.owner, Token: st.Token, ExpiresAt: st.ExpiresAt})
		}
	}
}

func (r *waiterRegistry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiting)
}
