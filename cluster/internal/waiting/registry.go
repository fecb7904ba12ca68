package waiting

import (
	"slices"
	"sync"
	"time"

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
// An answer is noted only for as long as such a withdrawal may still come
// (answerMemory), and at most maxAcked of them, the oldest forgotten first
// (forgotUntil says what a withdrawal does then).
type registry struct {
	claim   sync.Mutex // serializes the register-and-queue of park, withdraw, unlessParked and queueAcquires
	mu      sync.Mutex // protects the fields below; taken inside Apply by deliver
	waiting map[waiterKey]*waiter
	// acked and older are the grants this node, leading, last answered to
	// a call of (key, owner), until the owner parks again or releases, its
	// lease runs out, or the answer is forgotten: acked holds the newer
	// answers, older the ones before, and each new answer goes in acked
	// (see ageLocked).
	acked, older answers
	memory       time.Duration        // answerMemory
	capacity     int                  // maxAcked
	now          func() time.Duration // this node's monotonic clock
	// forgotUntil is when the last answer forgotten for want of room
	// (capacity) would have been forgotten by age, and forgotToken the
	// newest token among such answers since forgotUntil last passed: until
	// then a withdrawal that finds no answer may have lost one (see
	// mayHaveAnswered).
	forgotUntil time.Duration
	forgotToken uint64
	// answering counts the immediate acquires of (key, owner) queued and
	// not yet answered.
	answering map[waiterKey]*answering
}

// answers is one generation of answered grants, each the token of the
// grant last answered to a call of (key, owner): those answered from start
// on (the monotonic clock), the last at last; newest is the newest token
// among them.
type answers struct {
	m           map[waiterKey]uint64
	start, last time.Duration
	newest      uint64
}

// answering is the immediate acquires of one (key, owner) in flight; done
// is closed when the last is answered.
type answering struct {
	n    int
	done chan struct{}
}

// answerMemory is how long the registry keeps an answered grant: for as
// long as a withdrawal of an earlier call of the same owner may still
// reach the leader, which nothing bounds hard. The leader's own
// withdrawal of a parked call (withdrawAtLeader) comes at once: a grant
// answered to another call of the owner is that parked call's own grant
// answered again (the state machine answers "held" to an immediate
// acquire by an owner it has queued), whose delivery wakes the parked
// call. A caller's withdrawal (Waiters.withdraw) is retried for at most
// patience (no more than RequestTimeout); past that its caller is told
// the outcome is unknown. What may still come later is a cancel-wait
// already sent and held up on its way: in the sender's transport queue (a
// stalled write is cut after ten seconds) or in a slow link, where TCP
// retransmits for minutes before it gives up. So the memory is a choice,
// four RequestTimeouts (40s by default): one for a withdrawal's own
// retries, which may run beside the newer call that was answered, and
// three for a request held up in transit, well past the transport's write
// timeout and TCP's first retransmissions. A withdrawal later than that
// ends the grant, as any did before the registry noted answers.
func answerMemory(requestTimeout time.Duration) time.Duration { return 4 * requestTimeout }

// maxAcked bounds the answers kept, for memory and for the cost of an
// answer, which grows with the maps' size (their slots fall out of the
// processor's caches): it keeps the newest 65,536 answers at least, as
// many as the registry kept at most when it forgot them all at once, in
// at most about 15 MB (measured with 16-byte keys, the two maps at their
// largest). Up to 1,600 immediate grants a second (65,536 in the 40s of
// the default memory) every answer is kept for its whole memory; faster,
// the older generation goes early (ageLocked), and a withdrawal that then
// finds no answer errs on the safe side (mayHaveAnswered).
const maxAcked = 1 << 17

func newRegistry(memory time.Duration, now func() time.Duration) *registry {
	r := &registry{
		waiting:   make(map[waiterKey]*waiter),
		memory:    memory,
		capacity:  maxAcked,
		now:       now,
		answering: make(map[waiterKey]*answering),
	}
	r.acked = answers{m: make(map[waiterKey]uint64), start: now()}
	return r
}

// ack notes that a call of (key, owner) was told it holds the grant of
// token.
func (r *registry) ack(key string, owner fsm.Owner, token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ackLocked(waiterKey{key, owner}, token)
}

func (r *registry) ackLocked(k waiterKey, token uint64) {
	now := r.now()
	r.ageLocked(now)
	if len(r.acked.m) >= r.capacity/2 {
		if len(r.older.m) > 0 { // and not all memory old: ageLocked would have let them go
			if r.forgotUntil <= now {
				r.forgotToken = 0 // the earlier ones' memory has ended
			}
			r.forgotUntil = max(r.forgotUntil, r.older.last+r.memory)
			r.forgotToken = max(r.forgotToken, r.older.newest)
		}
		r.nextGenerationLocked(now, true)
	}
	r.acked.m[k] = token
	r.acked.last = now
	r.acked.newest = max(r.acked.newest, token)
}

// ageLocked forgets the answers that are memory old: it starts a new
// generation (acked) once the current one is memory old, and lets the
// older one go once its last answer is. So an answer is kept at least
// memory, unless maxAcked newer ones push it out, and at most twice that,
// and forgetting costs no work per answer.
//
// Why generations, not a queue of answers pruned one by one: this is on
// every immediate grant's answer, thousands a second, and a map that
// has an entry deleted for every one added (the oldest) fills with
// deleted slots that lengthen every probe: measured with as many answers
// kept, such a queue cost two to three times what the one insert done
// here costs. Letting a whole generation go is one assignment.
func (r *registry) ageLocked(now time.Duration) {
	if now-r.acked.start >= r.memory {
		// The older generation's last answer is no later than the current
		// one's start: memory old too.
		r.nextGenerationLocked(now, false)
	}
	if r.older.m != nil && r.older.last+r.memory <= now {
		r.older = answers{}
	}
}

// nextGenerationLocked makes the current generation the older one, and
// lets the older one go. full says the current one is full: then the new
// one reuses the older one's map, cleared, whose room it will fill too
// (growing a map from empty rehashes every key at each doubling, which
// measured costs several times the insert); otherwise a fresh map lets a
// burst's room go.
func (r *registry) nextGenerationLocked(now time.Duration, full bool) {
	if len(r.acked.m) == 0 {
		r.acked.start = now
		return
	}
	m := r.older.m
	if full && m != nil {
		clear(m)
	} else {
		m = make(map[waiterKey]uint64)
	}
	r.older = r.acked
	r.acked = answers{m: m, start: now}
}

// answeredLocked is the token of the grant answered to a call of k, 0 if
// none is kept; then upTo, when not 0, is the newest token of the answers
// forgotten for want of room whose memory has not ended: k's may be one.
func (r *registry) answeredLocked(k waiterKey) (token, upTo uint64) {
	now := r.now()
	r.ageLocked(now)
	if token, ok := r.acked.m[k]; ok {
		return token, 0 // the newer answer, if older holds one too
	}
	if token, ok := r.older.m[k]; ok {
		return token, 0
	}
	if now < r.forgotUntil {
		return 0, r.forgotToken
	}
	return 0, 0
}

// forgetLocked drops what ack noted of k.
func (r *registry) forgetLocked(k waiterKey) {
	delete(r.acked.m, k)
	delete(r.older.m, k)
}

// mayHaveAnswered is the token of a hold in st, the state of owner's key,
// that may be a grant answered to a call of owner whose answer the
// registry forgot for want of room (its token at most upTo), 0 if none:
// the owner's hold of a mutex (or multi-key set); any slot of a semaphore
// or read/write key, whose state does not name holders; the newest such.
// A hold with a newer token than upTo was granted after every forgotten
// answer's grant (tokens only grow), so it is none of them.
//
// Why a withdrawal treats such a hold as answered, leaving it alone and
// telling its caller the outcome is unknown, rather than ending it as a
// withdrawal that finds no answer does: ending it may end a lease a
// caller was told it holds (two holders), while leaving it leaves what a
// caller that gave up might have had to its TTL (or, when the owner was
// only queued on a semaphore, its wait), which the unknown outcome tells
// the caller to settle with the same owner (the lock API's handle keeps
// the owner for its next acquire or release). The leader answers a safe
// "unknown" for a while when answers come faster than it keeps them,
// never an unsafe release.
func mayHaveAnswered(st fsm.KeyState, owner fsm.Owner, upTo uint64) uint64 {
	if st.Kind == fsm.KindMutex {
		if st.Held && st.Owner == owner && st.Token <= upTo {
			return st.Token
		}
		return 0
	}
	var token uint64
	for _, h := range st.Holds { // in token order
		if !h.Delayed && h.Token <= upTo {
			token = h.Token
		}
	}
	return token
}

// forget drops what ack noted of (key, owner): its hold ended.
func (r *registry) forget(key string, owner fsm.Owner) {
	r.mu.Lock()
	r.forgetLocked(waiterKey{key, owner})
	r.mu.Unlock()
}

// forgetAcked forgets every grant ack noted, and that any was forgotten.
func (r *registry) forgetAcked() {
	r.mu.Lock()
	r.acked = answers{m: make(map[waiterKey]uint64), start: r.now()}
	r.older = answers{}
	r.forgotUntil, r.forgotToken = 0, 0
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
	r.forgetLocked(k) // a new call: its own answer decides what it holds
	r.mu.Unlock()
	if err := queue(); err != nil {
		r.unregister(key, owner, w)
		return nil, err
	}
	return w, nil
}

// withdraw unregisters w and calls queue (which queues a cancel-wait) if w
// is still the latest call for (key, owner) and no grant to the owner was
// answered (acked) since it parked, nor may have been (keyState, which
// reads the key's state, and mayHaveAnswered), once the owner's immediate
// acquires in flight are answered; it reports whether it queued.
func (r *registry) withdraw(key string, owner fsm.Owner, w *waiter, keyState func() fsm.KeyState, queue func()) bool {
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
		token, upTo := r.answeredLocked(k)
		r.mu.Unlock()
		if token == 0 && upTo != 0 {
			token = mayHaveAnswered(keyState(), owner, upTo) // outside mu, which Apply takes
		}
		if token == 0 {
			queue()
		}
		r.claim.Unlock()
		return token == 0
	}
}

// unlessParked calls queue (which queues a cancel-wait) unless a call by
// (key, owner) is parked or an immediate acquire of it is being answered
// (then it returns a channel closed when that is over, and does not call
// queue), or a grant to the owner was answered, or may have been
// (keyState, which reads the key's state, and mayHaveAnswered): then it
// returns its token, and does not call queue.
func (r *registry) unlessParked(key string, owner fsm.Owner, keyState func() fsm.KeyState, queue func()) (busy <-chan struct{}, acked uint64) {
	k := waiterKey{key, owner}
	r.claim.Lock()
	defer r.claim.Unlock()
	r.mu.Lock()
	w, a := r.waiting[k], r.answering[k]
	var token, upTo uint64
	if w == nil && a == nil {
		token, upTo = r.answeredLocked(k)
	}
	r.mu.Unlock()
	switch {
	case w != nil:
		return w.gone, 0
	case a != nil:
		return a.done, 0
	case token == 0 && upTo != 0:
		token = mayHaveAnswered(keyState(), owner, upTo) // outside mu, which Apply takes
	}
	if token != 0 {
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
		r.forgetLocked(waiterKey{ev.Key, ev.Owner})
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
