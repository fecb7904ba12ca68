package fsm

import (
	"encoding/binary"
	"strings"
	"time"
)

// group is the holders of a semaphore or read/write key, hung off the
// key's entry (holderExtra.group), so that a mutex pays nothing for it.
// The entry's own holder fields stay zero (owner zero, index -1): every
// holder is a waiter record with held set, in its own deadline (its lease
// or lock-delay end) or bound to a session like a mutex holder.
//
// Holders are kept in grant order, which is token order, so a snapshot
// lists them without sorting. A lock-delay slot (its session expired with
// a lock-delay) keeps its owner and token, counts as a holder until its
// delay ends, and answers nobody.
type group struct {
	kind      Kind
	limit     int   // a semaphore's N
	exclusive bool  // a read/write key held by its writer
	holders   queue // by owner, in grant order
}

// group is e's holder group, nil for a mutex.
func (t *moreTable) group(e *entry) *group {
	if x := t.extras(e); x != nil {
		return x.group
	}
	return nil
}

// kind is e's kind and, for a semaphore, its limit.
func (t *moreTable) kind(e *entry) (Kind, int) {
	if g := t.group(e); g != nil {
		return g.kind, g.limit
	}
	return KindMutex, 0
}

// fits reports whether a holder of the given mode can join g now.
func (g *group) fits(shared bool) bool {
	n := g.holders.len()
	switch {
	case n == 0:
		return true
	case g.kind == KindSemaphore:
		return n < g.limit
	default:
		return shared && !g.exclusive && n < MaxHolders
	}
}

// end is when h's hold ends: its lease's or lock-delay's end, or its
// session's.
func (h *waiter) end() time.Duration {
	if h.session != nil {
		return h.session.expiresAt
	}
	return h.deadline
}

// latestEnd is the latest end of any of g's holds: when g's key frees,
// if nobody else comes.
func (g *group) latestEnd() time.Duration {
	var end time.Duration
	for h := g.holders.head; h != nil; h = h.next {
		end = max(end, h.end())
	}
	return end
}

// oldest is the Result fields an answer about a held group key carries:
// the token and end of its oldest hold.
func (g *group) oldest(r Result) Result {
	if h := g.holders.head; h != nil {
		r.Token, r.ExpiresAt = h.token, h.end()
	}
	return r
}

// acquireGroup is acquire for a key that exists and is a semaphore or
// read/write key of c's kind (and limit).
func (m *Machine) acquireGroup(c Command, e *entry, g *group, s *session) Result {
	held := g.oldest(Result{Now: m.now, Waiters: m.waitQueue(e).len()})
	if h := g.holders.find(c.Owner); h != nil {
		// A retry by a holder: the same grant, if under the same binding
		// and mode; anything else finds the key held, as for a mutex.
		if h.delayed || h.session != s || h.shared != c.Shared {
			held.Status = StatusHeld
			return held
		}
		return Result{Status: StatusGranted, Token: h.token, ExpiresAt: h.end(), Now: m.now, Waiters: m.waitQueue(e).len()}
	}
	if w := m.waitQueue(e).find(c.Owner); w != nil {
		if w.session != s || w.shared != c.Shared {
			held.Status = StatusHeld
			return held
		}
		return m.retryQueued(e, w, held)
	}
	if m.waitQueue(e) == nil && g.fits(c.Shared) {
		// Strict FIFO: only a key nobody waits for takes a newcomer.
		m.changing(e)
		h := &waiter{owner: c.Owner, ttl: c.TTL, session: s, meta: strings.Clone(c.Meta), shared: c.Shared}
		m.addHolder(e, g, h)
		return Result{Status: StatusGranted, Token: h.token, ExpiresAt: h.end(), Now: m.now, Waiters: 0}
	}
	return m.enqueue(c, e, s, held)
}

// createGroup is acquire for a key nobody holds, of a semaphore or
// read/write kind: the key appears with c's owner its one holder.
func (m *Machine) createGroup(c Command, s *session) Result {
	g := &group{kind: c.Kind, limit: c.Limit}
	e := newEntry(c.Key)
	m.setMore(e, &holderExtra{group: g}, nil)
	m.adding(e.key())
	h := &waiter{owner: c.Owner, ttl: c.TTL, session: s, meta: strings.Clone(c.Meta), shared: c.Shared}
	m.addHolder(e, g, h)
	m.keys.add(e)
	m.order.insert(e)
	return Result{Status: StatusGranted, Token: h.token, ExpiresAt: h.end(), Now: m.now}
}

// addHolder grants h a slot of e's group with a fresh token: for its ttl
// from now, or bound to its session. The caller has called changing(e).
func (m *Machine) addHolder(e *entry, g *group, h *waiter) {
	m.lastToken++
	h.token = m.lastToken
	h.held = true
	h.prev, h.next = nil, nil
	if g.kind == KindRW {
		g.exclusive = !h.shared
	}
	if g.holders.len() > 0 {
		m.extraHolds++
	}
	g.holders.pushBack(h)
	if h.session != nil {
		h.deadline, h.index = 0, -1
		h.session.ref(e.key())
		return
	}
	h.deadline = m.now + h.ttl
	m.deadlines.push(deadline{at: h.deadline, e: e, w: h})
}

// removeHolder takes h out of e's group. The caller settles e after.
func (m *Machine) removeHolder(e *entry, g *group, h *waiter) {
	m.changing(e)
	if h.index >= 0 {
		m.deadlines.remove(h.index)
	}
	h.session.unref(e.key())
	g.holders.unlink(h)
	if g.holders.len() == 0 {
		g.exclusive = false
	} else {
		m.extraHolds--
	}
}

// settle grants, in queue order, every waiter at the head of e's queue that
// now fits (dropping the unclaimed ones it would grant, as a hand-off
// does), and stops at the first that does not: nobody behind it goes
// first. A key left with no holder (and so, as any waiter fits an empty
// group, none waiting) leaves the machine.
func (m *Machine) settle(e *entry, g *group) {
	for w := m.waitQueue(e).first(); w != nil && g.fits(w.shared); w = m.waitQueue(e).first() {
		if w.epoch != m.epoch {
			m.dropWaiter(e, w)
			continue
		}
		m.removeWaiter(e, w)
		m.addHolder(e, g, w)
		m.emit(Event{Kind: EventGranted, Key: e.key(), Owner: w.owner, Token: w.token, ExpiresAt: w.end(), At: m.now})
	}
	if g.holders.len() > 0 {
		return
	}
	m.changing(e)
	m.forget(e)
}

// releaseHolder ends h's hold by its owner's request (or an operator's)
// and grants the waiters that then fit.
func (m *Machine) releaseHolder(e *entry, g *group, h *waiter) Result {
	m.removeHolder(e, g, h)
	m.settle(e, g)
	return Result{Status: StatusReleased, Token: h.token, Now: m.now, Waiters: m.waiting(e)}
}

// liveHolder is owner's hold of e's group, nil if it holds none (a
// lock-delay slot is nobody's).
func (g *group) liveHolder(owner Owner) *waiter {
	if h := g.holders.find(owner); h != nil && !h.delayed {
		return h
	}
	return nil
}

// extendHolder is extend for a holder of a group.
func (m *Machine) extendHolder(c Command, e *entry, h *waiter) Result {
	if h.session == nil {
		m.changing(e)
		h.deadline = m.now + c.TTL
		m.deadlines.fix(h.index, h.deadline)
	}
	return Result{Status: StatusExtended, Token: h.token, ExpiresAt: h.end(), Now: m.now, Waiters: m.waitQueue(e).len()}
}

// forceReleaseGroup ends every hold of e's group (lock-delay slots too) and
// grants the waiters that then fit; the answer carries the newest ended
// token.
func (m *Machine) forceReleaseGroup(e *entry, g *group) Result {
	var token uint64
	for h := g.holders.head; h != nil; h = g.holders.head {
		token = max(token, h.token)
		m.removeHolder(e, g, h)
	}
	m.settle(e, g)
	return Result{Status: StatusReleased, Token: token, Now: m.now, Waiters: m.waiting(e)}
}

// expireHolder processes the end of h's lease or lock-delay, due at at.
func (m *Machine) expireHolder(e *entry, h *waiter, at time.Duration) {
	g := m.group(e)
	if !h.delayed {
		m.emit(Event{Kind: EventExpired, Key: e.key(), Owner: h.owner, Token: h.token, ExpiresAt: h.deadline, At: at})
	}
	m.removeHolder(e, g, h)
	m.settle(e, g)
}

// endGroupSession ends the holds session s has in e's group (expired at at,
// or destroyed) and returns how many: each ends at once, or after an
// expiry with a lock-delay becomes a slot nobody holds until the delay
// ends. Then the waiters that fit are granted.
func (m *Machine) endGroupSession(e *entry, g *group, s *session, expired bool, at time.Duration) int {
	released := 0
	for h := g.holders.head; h != nil; {
		next := h.next
		if h.session == s {
			released++
			if expired {
				m.emit(Event{Kind: EventExpired, Key: e.key(), Owner: h.owner, Token: h.token, ExpiresAt: s.expiresAt, At: at})
			}
			if expired && s.lockDelay > 0 {
				m.changing(e)
				// The slot is nobody's now: its owner may acquire again and
				// must find a newcomer's answer (queued, or held without a
				// wait), as with a mutex's lock-delay. Re-keyed rather than
				// zeroed, since several slots of a key may be delayed at once.
				g.holders.rekey(h, delayedSlotOwner(h.token))
				h.session, h.meta, h.delayed = nil, "", true
				h.deadline = at + s.lockDelay // due at once if already over: expire's loop processes it
				m.deadlines.push(deadline{at: h.deadline, e: e, w: h})
			} else {
				m.removeHolder(e, g, h)
			}
		}
		h = next
	}
	m.settle(e, g)
	return released
}

// groupState is what a read at t sees of a semaphore or read/write key.
func (g *group) state(waiters int, t time.Duration) KeyState {
	st := KeyState{Kind: g.kind, Limit: g.limit, Waiters: waiters}
	for h := g.holders.head; h != nil; h = h.next {
		end := h.end()
		if end <= t {
			continue
		}
		st.Held = true
		st.Holders++
		st.Token = h.token // grant order is token order: the last is the newest
		st.ExpiresAt = max(st.ExpiresAt, end)
		st.Holds = append(st.Holds, Hold{Token: h.token, ExpiresAt: end, Meta: h.meta, Shared: h.shared, Delayed: h.delayed})
	}
	st.Shared = st.Held && g.kind == KindRW && !g.exclusive
	return st
}

// delayedSlotOwner is the owner a lock-delayed slot is kept under: unique
// in its key (tokens are), and not an owner any client will send (128
// random bits of an owner match it with probability 2^-128; one that did
// would find the key held, never granted).
func delayedSlotOwner(token uint64) Owner {
	o := Owner{0xde, 0x1a, 0x7e, 0xd5, 0x10, 0x70, 0x00, 0x00}
	binary.BigEndian.PutUint64(o[8:], token)
	return o
}
