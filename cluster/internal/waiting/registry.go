package waiting

import (
	"slices"
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

// registry holds the waiting acquires parked at this node while it
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
//
// Why withdrawals also know what was answered: a cancel-wait releases a
// grant it finds, the one its gone caller never heard of. But the owner's
// next call (a client that gave up on the first, whose withdrawal was not
// confirmed, tries again with the same owner, maybe through another node)
// may have been told of that grant, as the idempotent repeat of it, before
// the first call's withdrawal reaches the leader (a slow link, a cancel
// that arrives late). Releasing it then would end a lease a caller was
// told it holds. So the registry notes the grants it answered (acked) and
// the immediate acquires queued and not yet answered (answering, queued
// under claim like park's), and a withdrawal of (key, owner) waits for the
// latter and then leaves an answered grant alone: its caller learns that
// the outcome is unknown (Waiters.withdraw), never that the grant was ended.
type registry struct {
	claim   sync.Mutex // serializes the register-and-queue of park, withdraw, unlessParked and queueAcquires
	mu      sync.Mutex // protects the maps below; taken inside Apply by deliver
	waiting map[waiterKey]*waiter
	// acked is the token of the grant this node, leading, last answered to
	// a call of (key, owner), until the owner parks again or releases, or
	// its lease runs out.
	acked map[waiterKey]uint64
	// answering counts the immediate acquires of (key, owner) queued and
	// not yet answered.
	answering map[waiterKey]*answering
}

// answering is the immediate acquires of one (key, owner) in flight; done
// is closed when the last is answered.
type answering struct {
	n    int
	done chan struct{}
}

// maxAcked bounds acked: a hold that ends unseen by the registry (a
// force-release, a session's destroy) leaves its entry, so past this many
// entries the registry forgets them all. Forgetting only lets a late
// withdrawal end such a grant, as it could before the registry noted them.
const maxAcked = 1 << 16

func newRegistry() *registry {
	return &registry{waiting: make(map[waiterKey]*waiter), acked: make(map[waiterKey]uint64), answering: make(map[waiterKey]*answering)}
}

// ack notes that a call of (key, owner) was told it holds the grant of
// token.
func (r *registry) ack(key string, owner fsm.Owner, token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ackLocked(waiterKey{key, owner}, token)
}

func (r *registry) ackLocked(k waiterKey, token uint64) {
	if len(r.acked) >= maxAcked {
		clear(r.acked)
	}
	r.acked[k] = token
}

// forget drops what ack noted of (key, owner): its hold ended.
func (r *registry) forget(key string, owner fsm.Owner) {
	r.mu.Lock()
	delete(r.acked, waiterKey{key, owner})
	r.mu.Unlock()
}

// forgetAcked forgets every grant ack noted.
func (r *registry) forgetAcked() {
	r.mu.Lock()
	clear(r.acked)
	r.mu.Unlock()
}

// queueAcquires calls queue (which queues cmds) under claim, and counts
// the immediate acquires among them answering until answered(i, res, err)
// is called for each: a grant in res is what the caller is told it holds.
func (r *registry) queueAcquires(cmds []fsm.Command, queue func()) (answered func(i int, res fsm.Result, err error)) {
	if !slices.ContainsFunc(cmds, isAcquire) {
		queue() // no acquire: nothing a withdrawal waits for
		return func(int, fsm.Result, error) {}
	}
	keys := make([]waiterKey, len(cmds))
	for i, c := range cmds {
		if isAcquire(c) {
			keys[i] = waiterKey{waitKey(c), c.Owner}
		}
	}
	r.claim.Lock()
	defer r.claim.Unlock()
	r.mu.Lock()
	for _, k := range keys {
		if k == (waiterKey{}) {
			continue
		}
		a := r.answering[k]
		if a == nil {
			a = &answering{done: make(chan struct{})}
			r.answering[k] = a
		}
		a.n++
	}
	r.mu.Unlock()
	queue()
	return func(i int, res fsm.Result, err error) {
		k := keys[i]
		if k == (waiterKey{}) {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if token := grantedToken(res, err); token != 0 {
			r.ackLocked(k, token)
		}
		if a := r.answering[k]; a != nil {
			if a.n--; a.n == 0 {
				close(a.done)
				delete(r.answering, k)
			}
		}
	}
}

// isAcquire reports whether cmd is an acquire, which the registry knows by
// (waitKey, owner) while it is being answered.
func isAcquire(cmd fsm.Command) bool { return cmd.Op == fsm.OpAcquire || cmd.Op == fsm.OpAcquireAll }

// grantedToken is the token an acquire's answer tells its caller it
// holds: 0 unless granted.
func grantedToken(res fsm.Result, err error) uint64 {
	if err != nil || res.Status != fsm.StatusGranted {
		return 0
	}
	return res.Token
}

// park registers (key, owner) and then calls queue (which queues the acquire
// for proposal), both under claim, so a hand-off applied before the
// acquire's answer arrives is not missed. Registering the same (key, owner)
// twice replaces the first waiter, which then only returns through its own
// context or its term's end, and whose withdraw does nothing.
func (r *registry) park(key string, owner fsm.Owner, queue func() error) (*waiter, error) {
	w := newWaiter()
	k := waiterKey{key, owner}
	r.claim.Lock()
	defer r.claim.Unlock()
	r.mu.Lock()
	if old := r.waiting[k]; old != nil {
		close(old.gone)
	}
	r.waiting[k] = w
	delete(r.acked, k) // a new call: its own answer decides what it holds
	r.mu.Unlock()
	if err := queue(); err != nil {
		r.unregister(key, owner, w)
		return nil, err
	}
	return w, nil
}

// withdraw unregisters w and calls queue (which queues a cancel-wait) if w
// is still the latest call for (key, owner) and no grant to the owner was
// answered (acked) since it parked, once the owner's immediate acquires in
// flight are answered; it reports whether it queued.
func (r *registry) withdraw(key string, owner fsm.Owner, w *waiter, queue func()) bool {
	k := waiterKey{key, owner}
	for {
		r.claim.Lock()
		r.mu.Lock()
		if r.waiting[k] != w {
			r.mu.Unlock()
			r.claim.Unlock()
			return false
		}
		if a := r.answering[k]; a != nil {
			r.mu.Unlock()
			r.claim.Unlock()
			<-a.done
			continue
		}
		delete(r.waiting, k)
		close(w.gone)
		_, acked := r.acked[k]
		r.mu.Unlock()
		if !acked {
			queue()
		}
		r.claim.Unlock()
		return !acked
	}
}

// unlessParked calls queue (which queues a cancel-wait) unless a call by
// (key, owner) is parked or an immediate acquire of it is being answered
// (then it returns a channel closed when that is over, and does not call
// queue), or a grant to the owner was answered (then it returns its token,
// and does not call queue).
func (r *registry) unlessParked(key string, owner fsm.Owner, queue func()) (busy <-chan struct{}, acked uint64) {
	k := waiterKey{key, owner}
	r.claim.Lock()
	defer r.claim.Unlock()
	r.mu.Lock()
	w, a, token := r.waiting[k], r.answering[k], r.acked[k]
	r.mu.Unlock()
	switch {
	case w != nil:
		return w.gone, 0
	case a != nil:
		return a.done, 0
	case token != 0:
		return nil, token
	}
	queue()
	return nil, 0
}

func (r *registry) unregister(key string, owner fsm.Owner, w *waiter) {
	k := waiterKey{key, owner}
	r.mu.Lock()
	if r.waiting[k] == w {
		delete(r.waiting, k)
		close(w.gone)
	}
	r.mu.Unlock()
}

// deliver is the state machine's observer: it runs inside Apply, so it never blocks.
func (r *registry) deliver(ev fsm.Event) {
	switch ev.Kind {
	case fsm.EventGranted, fsm.EventWaitExpired, fsm.EventUnclaimed:
	case fsm.EventExpired:
		r.mu.Lock()
		delete(r.acked, waiterKey{ev.Key, ev.Owner})
		r.mu.Unlock()
		return
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

func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiting)
}
