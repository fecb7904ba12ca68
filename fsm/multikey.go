package fsm

import (
	"slices"
	"strings"
	"time"
)

// keySet is one multi-key acquisition (OpAcquireAll): an owner's set of
// mutex keys, granted all at once or waited for on every key at once.
//
// Granted, each of its entries is an ordinary mutex holder (owner, token,
// lease end, each lease end in the deadline index at the same time) whose
// extra, shared by all of them, points back here; waiting, it has one
// waiter record in each key's queue (waits, parallel to entries), each
// with the same deadline, epoch, TTL and metadata. The machine indexes sets
// by owner (Machine.sets): an owner is in at most one set, which is how a
// retry finds its set and how Restore puts a set back together.
type keySet struct {
	owner   Owner
	entries []*entry  // its keys' entries, in key order
	waits   []*waiter // waiting: its record in each key's queue; nil once granted
	extra   *holderExtra
}

// set is the multi-key grant e's holder holds e by, nil for a single key.
func (t *moreTable) set(e *entry) *keySet {
	if x := t.extras(e); x != nil {
		return x.set
	}
	return nil
}

// vacant reports that e has no holder: no lease, no lock-delay, no group.
// A vacant key is in the machine only while a multi-key waiter heads its
// queue (it is reserved for that waiter); otherwise it is served at once.
func (t *moreTable) vacant(e *entry) bool {
	return e.owner.IsZero() && e.index < 0 && t.extras(e) == nil
}

// sameKeys reports whether s is the set of keys.
func (s *keySet) sameKeys(keys []string) bool {
	if len(keys) != len(s.entries) {
		return false
	}
	for i, e := range s.entries {
		if e.key() != keys[i] {
			return false
		}
	}
	return true
}

// acquireAll is OpAcquireAll: every key of c.Keys for c.Owner, at once
// when every key is free (absent from the machine: not held, not delayed,
// nobody waiting), or else, with a wait, queued on all of them in this one
// command.
func (m *Machine) acquireAll(c Command) Result {
	if s := m.sets[c.Owner]; s != nil {
		return m.retryAll(c, s)
	}
	entries := make([]*entry, len(c.Keys))
	held := Result{Now: m.now}
	free := true
	for i, k := range c.Keys {
		e := m.keys.get(k)
		if e == nil {
			continue
		}
		entries[i] = e
		if kind, limit := m.kind(e); kind != KindMutex {
			// Waiters names the key: its 1-based place in Keys.
			return Result{Status: StatusKindMismatch, Now: m.now, Waiters: i + 1, Kind: kind, Limit: limit}
		}
		if free {
			// The answer about the set's holders is about its first key
			// that is not free.
			free = false
			held.Token, held.ExpiresAt = e.token, m.leaseEnd(e)
		}
		held.Waiters = max(held.Waiters, m.waitQueue(e).len())
		if e.owner == c.Owner || m.waitQueue(e).find(c.Owner) != nil {
			held.Status = StatusHeld // the owner holds or waits for a key of the set singly
		}
	}
	if held.Status == StatusHeld {
		return held
	}
	s := &keySet{owner: c.Owner, entries: entries}
	if free {
		for i, k := range c.Keys {
			e := newEntry(k)
			m.adding(e.key()) // the machine's copy: OnChange may keep it
			m.keys.add(e)
			m.order.insert(e)
			entries[i] = e
		}
		m.grantSet(s, c.TTL, strings.Clone(c.Meta))
		return Result{Status: StatusGranted, Token: entries[0].token, ExpiresAt: entries[0].expiresAt, Now: m.now}
	}
	if refusal, refused := queueRefusal(c, held); refused {
		return refusal
	}
	meta := strings.Clone(c.Meta)
	s.waits = make([]*waiter, len(entries))
	for i, k := range c.Keys {
		e := entries[i]
		if e == nil {
			// A free key is reserved for the set at once: it joins as a
			// vacant entry with the set at the head of its queue.
			e = newEntry(k)
			m.adding(e.key())
			m.keys.add(e)
			m.order.insert(e)
			entries[i] = e
		} else {
			m.changing(e)
		}
		if m.waitQueue(e) == nil {
			m.setWaitQueue(e, &queue{})
		}
		w := &waiter{owner: c.Owner, ttl: c.TTL, deadline: m.now + c.Wait, epoch: m.epoch, meta: meta, set: s}
		m.waitQueue(e).pushBack(w)
		m.nWaiters++
		m.deadlines.push(deadline{at: w.deadline, e: e, w: w})
		s.waits[i] = w
		held.Waiters = max(held.Waiters, m.waitQueue(e).len())
	}
	m.sets[s.owner] = s
	held.Status = StatusQueued
	return held
}

// retryAll answers an acquire-all by an owner that already has set s: the
// same grant or the same places (claimed again) for the same keys, and
// StatusHeld, changing nothing, for another set: one acquisition is one set.
func (m *Machine) retryAll(c Command, s *keySet) Result {
	first := s.entries[0]
	if !s.sameKeys(c.Keys) {
		return Result{Status: StatusHeld, Token: first.token, ExpiresAt: m.leaseEnd(first), Now: m.now, Waiters: m.waitQueue(first).len()}
	}
	if s.waits == nil {
		return Result{Status: StatusGranted, Token: first.token, ExpiresAt: first.expiresAt, Now: m.now, Waiters: m.waitQueue(first).len()}
	}
	m.claimSet(s)
	r := Result{Status: StatusQueued, Token: first.token, ExpiresAt: m.leaseEnd(first), Now: m.now}
	for i, e := range s.entries {
		r.Waiters = max(r.Waiters, m.waitQueue(e).position(s.waits[i]))
	}
	return r
}

// claimSet claims every place of a waiting set for the current epoch.
func (m *Machine) claimSet(s *keySet) {
	for i, w := range s.waits {
		if w.epoch != m.epoch {
			if m.freezer != nil {
				m.freezer.touch(s.entries[i])
			}
			w.epoch = m.epoch
			m.unclaimed--
		}
	}
}

// grantSet gives every key of s (each vacant, and no longer queued for
// by s) to s's owner with one fresh token and one lease end, ttl from now.
func (m *Machine) grantSet(s *keySet, ttl time.Duration, meta string) {
	m.lastToken++
	s.waits = nil
	s.extra = &holderExtra{meta: meta, set: s}
	m.sets[s.owner] = s
	for _, e := range s.entries {
		m.changing(e)
		e.owner, e.token, e.expiresAt = s.owner, m.lastToken, m.now+ttl
		m.setExtras(e, s.extra)
		m.setHolderDeadline(e)
	}
}

// grantWaiting grants s, which waits at the head of every one of its
// keys' queues, each key vacant: it leaves the queues and holds the keys,
// one EventGranted per key in key order.
func (m *Machine) grantWaiting(s *keySet) {
	ttl, meta := s.waits[0].ttl, s.waits[0].meta
	for i, e := range s.entries {
		m.removeWaiter(e, s.waits[i])
	}
	m.grantSet(s, ttl, meta)
	for _, e := range s.entries {
		m.emit(Event{Kind: EventGranted, Key: e.key(), Owner: e.owner, Token: e.token, ExpiresAt: e.expiresAt, At: m.now})
	}
}

// ready reports whether waiting set s can be granted: every one of its
// keys is vacant with s at the head of its queue.
func (s *keySet) ready(t *moreTable) bool {
	for i, e := range s.entries {
		if !t.vacant(e) || t.waitQueue(e).first() != s.waits[i] {
			return false
		}
	}
	return true
}

// releaseSet ends held set s's lease on every key (released, expired or
// force-released) and hands each key to its next waiter, in key order, in
// this one command.
func (m *Machine) releaseSet(s *keySet) {
	delete(m.sets, s.owner)
	for _, e := range s.entries {
		m.changing(e)
		m.vacate(e)
	}
	for _, e := range s.entries {
		m.serve(e)
	}
}

// removeSet takes waiting set s out of every queue it is in (its wait
// ended, it went unclaimed, or its owner canceled), one event of the given
// kind per key (none for 0), and then serves each of its keys left
// vacant: a key it reserved goes to its next waiter in this command.
func (m *Machine) removeSet(s *keySet, kind EventKind, at time.Duration) {
	delete(m.sets, s.owner)
	for i, e := range s.entries {
		m.removeWaiter(e, s.waits[i])
		if kind != 0 {
			m.emit(Event{Kind: kind, Key: e.key(), Owner: s.owner, At: at})
		}
	}
	for _, e := range s.entries {
		if m.keys.get(e.key()) == e && m.vacant(e) {
			m.serve(e)
		}
	}
}

// extendSet sets held set s's lease, on every key, to end ttl from now.
func (m *Machine) extendSet(s *keySet, ttl time.Duration) {
	end := m.now + ttl
	for _, e := range s.entries {
		m.changing(e)
		e.expiresAt = end
		m.deadlines.fixLease(e, end)
	}
}

// vacate ends e's hold (a mutex lease, session-bound hold, lock-delay or a
// set's hold) without serving its queue; the caller serves it.
func (m *Machine) vacate(e *entry) {
	m.sess(e).unref(e.key())
	e.owner, e.token, e.expiresAt = Owner{}, 0, 0
	m.setExtras(e, nil)
	if e.index >= 0 {
		m.deadlines.removeLease(e)
	}
	e.index = -1
}

// serve gives vacant e to its queue: unclaimed heads are dropped (an
// unclaimed set from all its queues), a single waiter at the head is
// granted, a set at the head is granted if every other key of it is ready
// for it too and otherwise keeps e reserved; a key nobody waits for leaves
// the machine. Dropping a set may serve its other keys, and granting one
// takes its other keys too: each loop checks that e is still vacant.
func (m *Machine) serve(e *entry) {
	for m.keys.get(e.key()) == e && m.vacant(e) {
		w := m.waitQueue(e).first()
		switch {
		case w == nil:
			m.changing(e)
			m.forget(e)
		case w.epoch != m.epoch && w.set != nil:
			m.removeSet(w.set, EventUnclaimed, m.now)
		case w.epoch != m.epoch:
			m.dropWaiter(e, w)
		case w.set == nil:
			m.grantHead(e, w)
		default:
			if w.set.ready(&m.moreTable) {
				m.grantWaiting(w.set)
			}
			return
		}
	}
}

// grantHead gives e, whose hold has ended, to w, the single waiter at the
// head of its queue.
func (m *Machine) grantHead(e *entry, w *waiter) {
	m.removeWaiter(e, w)
	e.owner = w.owner
	m.grant(e, w.ttl, w.session, w.meta)
	m.setHolderDeadline(e)
	m.emit(Event{Kind: EventGranted, Key: e.key(), Owner: e.owner, Token: e.token, ExpiresAt: m.leaseEnd(e), At: m.now})
}

// forget takes e, which nobody holds or waits for, out of the machine.
func (m *Machine) forget(e *entry) {
	if m.freezer != nil {
		m.freezer.removing(e.key())
	}
	if e.index >= 0 {
		m.deadlines.removeLease(e)
	}
	m.setMore(e, nil, nil) // a group's extras; the place goes back to the table
	m.keys.remove(e.key())
	m.order.remove(e)
}

// setKeys is how many keys e's holder holds with it: 0 unless a set.
func (t *moreTable) setKeys(e *entry) int {
	if s := t.set(e); s != nil {
		return len(s.entries)
	}
	return 0
}

// SetKeys lists, in key order, the keys of the multi-key acquisition of
// owner (held or waited for), nil if it has none. A read, serialized with
// Apply like every read.
func (m *Machine) SetKeys(owner Owner) []string {
	s := m.sets[owner]
	if s == nil {
		return nil
	}
	keys := make([]string, len(s.entries))
	for i, e := range s.entries {
		keys[i] = e.key()
	}
	return slices.Clip(keys)
}
