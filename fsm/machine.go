package fsm

import (
	"slices"
	"strings"
	"time"
)

// Cost.
//
// The machine keeps one entry per held key in a hash index of entry
// pointers for the commands' point lookups (keyindex.go: the key is stored
// once, in its entry), the same entries in key order in a B+tree of entry pointers (9 to
// 45 bytes a key; order.go says why it is written here), a FIFO queue only
// for keys with waiters (a linked list plus an index by owner), and a
// deadline index of all pending deadlines (two binary heaps: leases' ends,
// 16 bytes each, and the rest; deadlines.go) that is updated in place on extend,
// hand-off and cancel, so it never holds stale deadlines. NextDeadline is
// O(1) and Apply O(log n); the key order changes only when a key appears or
// goes, never on extend or hand-off. A newcomer joins a queue in O(1) plus
// the heap's O(log n), so filling a queue to MaxWaiters is linear; only an
// acquire retried by an owner already queued walks the queue to report its
// place. Range and RangeFrom seek in O(log n) and then pass only the keys
// they report (and leases that have ended but not yet been ticked away).
// Drop-unclaimed walks the key order until it has dropped every unclaimed
// waiter (a no-op when Unclaimed is 0): O(n) at most, once per leader change
// that left waiters behind. Snapshot walks the key order instead of
// sorting, and Restore, whose keys arrive sorted, builds it bottom-up in
// O(n). Sessions are a map by ID, each with one deadline in the same heap
// and a count of its keys per key: create and renew are O(log n), ending a
// session O(k log k) for its k keys (sorted, so replicas hand them off in
// the same order) plus their hand-offs; a Freezer copies all sessions when
// it starts, sorted by ID (O(s log s), a few milliseconds for 10,000).
// A semaphore or read/write key keeps its holders apart from the entry (a
// group behind holderExtra, so a mutex pays nothing for them; a mutex's
// apply pays one more nil check): a linked list in grant order with an
// index by owner, each holder a waiter record (112 bytes, about 170 with
// its index slot and its deadline in the heap). Acquire, release, extend
// and expiry of one holder are O(log n) plus the grants they cause, each
// O(log n); a read of the key (Lookup, Range) walks its holders for their
// count and latest end, O(h), h at most MaxHolders. A held lock must cost at most 115 bytes of memory, after applies
// and after a restore, which TestMemoryPerHeldLock checks at 1,000,000 held locks with
// FSM_MEMORY=1 (README, "Performance", has the figures).
// A multi-key grant's k keys are k ordinary mutex entries sharing one
// holderExtra (so a single key pays nothing for sets), each lease end in
// the index at the same time; a waiting set is k waiter records, one per
// queue, each with its deadline in the index. Acquire-all, its grant and
// its release are O(k log n) plus the hand-offs; ending a waiting set
// serves the keys it reserved, each O(log n) plus the grants it causes.
// The machine indexes sets by owner, so a retry finds its set in O(1).
// Remembered releases (releases.go) are a list in apply order with an
// index by key and owner: a release adds one and an acquire forgets one
// in O(1), and Apply drops those ReleaseMemory old from the list's front.

// entry is one held or reserved key. A key exists in the machine exactly
// while it is held or waited for: whenever a lease ends, the head waiter
// (if any) is granted in the same step, so a key has waiters without a
// holder (it is vacant, reserved) only while a multi-key waiter heads its
// queue and waits for another of its keys.
//
// A holder has a lease of its own (session nil: expiresAt is its end, in
// the deadline index) or is bound to a session (its end is the session's,
// and only the session is in the deadline index: index is -1). A key whose
// session expired with a lock-delay stays, with a zero owner and no
// session, until expiresAt, the delay's end.
//
// Its key follows its fields in the same allocation (inlinekey.go): an
// entry is made by newEntry (or a restore's entrySlab), never as a
// composite literal, and never copied by value.
type entry struct {
	owner     Owner
	token     uint64
	expiresAt time.Duration
	index     int32  // position of the lease's end in the deadline index; -1 for a session-bound holder
	keyLen    uint32 // the key's bytes follow the entry (key)
	more      uint32 // its entryMore's place in the machine's moreTable, plus one; 0 for a lease without metadata nobody waits for, the common case
}

// entryMore is what only some keys have: their holder's extras and their
// waiters, kept in the machine's moreTable rather than behind a pointer in
// the entry.
type entryMore struct {
	extra   *holderExtra
	waiters *queue
}

// moreTable holds the entryMore of each entry that has one, at the place
// its more field names. Entries hold no pointer, so Go's collector neither
// scans them nor writes a pointer map for each (at ten million keys, in a
// restore, setting the maps of the entries' blocks and scanning them was a
// fifth of the CPU time), and they live apart from short-lived objects
// with pointers. A place is freed when its entry has neither extras nor
// waiters any more, and reused first.
type moreTable struct {
	mores []entryMore
	free  []uint32
}

// extras is e's holder's extras, nil for a lease without metadata.
func (t *moreTable) extras(e *entry) *holderExtra {
	if e.more == 0 {
		return nil
	}
	return t.mores[e.more-1].extra
}

// waitQueue is e's queue, nil while nobody waits.
func (t *moreTable) waitQueue(e *entry) *queue {
	if e.more == 0 {
		return nil
	}
	return t.mores[e.more-1].waiters
}

func (t *moreTable) setExtras(e *entry, x *holderExtra) { t.setMore(e, x, t.waitQueue(e)) }

func (t *moreTable) setWaitQueue(e *entry, q *queue) { t.setMore(e, t.extras(e), q) }

// setMore sets e's extras and queue, freeing e's place when both are nil.
func (t *moreTable) setMore(e *entry, x *holderExtra, q *queue) {
	if x == nil && q == nil {
		if e.more != 0 {
			t.mores[e.more-1] = entryMore{} // drop the pointers for the collector
			t.free = append(t.free, e.more)
			e.more = 0
		}
		return
	}
	if e.more == 0 {
		if n := len(t.free); n > 0 {
			e.more, t.free = t.free[n-1], t.free[:n-1]
		} else {
			t.mores = append(t.mores, entryMore{})
			e.more = uint32(len(t.mores))
		}
	}
	t.mores[e.more-1] = entryMore{extra: x, waiters: q}
}

// inUse is how many places hold an entry's extras or queue.
func (t *moreTable) inUse() int { return len(t.mores) - len(t.free) }

// holderExtra is what only some holders have: kept apart (behind
// entryMore) so that a plain lease pays nothing for the 32 bytes of the
// fields. A
// semaphore or read/write key has only a group (its holders are there).
type holderExtra struct {
	session *session
	meta    string
	group   *group
	set     *keySet // a multi-key grant's keys share one holderExtra
}

// sess is the session e's holder is bound to, nil for a lease.
func (t *moreTable) sess(e *entry) *session {
	if x := t.extras(e); x != nil {
		return x.session
	}
	return nil
}

// metadata is e's holder's metadata.
func (t *moreTable) metadata(e *entry) string {
	if x := t.extras(e); x != nil {
		return x.meta
	}
	return ""
}

// bind sets e's holder's session and metadata.
func (t *moreTable) bind(e *entry, s *session, meta string) {
	if s == nil && meta == "" {
		t.setExtras(e, nil)
		return
	}
	t.setExtras(e, &holderExtra{session: s, meta: meta})
}

// session is a lease that locks are bound to. refs counts, per key, the
// holder and waiters bound to it there, so that ending it visits exactly
// its keys.
type session struct {
	id        Owner
	ttl       time.Duration
	expiresAt time.Duration
	lockDelay time.Duration
	refs      map[string]int // nil once the session has ended
	// end is its end's record in the deadline index (owner the ID,
	// session this session, index its position), so that a deadline
	// needs no pointer to a session.
	end waiter
}

// newSession returns a session, not yet in the deadline index.
func newSession(id Owner, ttl, expiresAt, lockDelay time.Duration) *session {
	s := &session{id: id, ttl: ttl, expiresAt: expiresAt, lockDelay: lockDelay, refs: make(map[string]int)}
	s.end.owner, s.end.session = id, s
	return s
}

// deadline is s's end in the deadline index.
func (s *session) deadline() deadline { return deadline{at: s.expiresAt, w: &s.end} }

func (s *session) ref(key string) {
	if s != nil && s.refs != nil {
		s.refs[key]++
	}
}

func (s *session) unref(key string) {
	if s == nil || s.refs == nil {
		return
	}
	if s.refs[key] <= 1 {
		delete(s.refs, key)
	} else {
		s.refs[key]--
	}
}

// leaseEnd is when e's holder's hold ends: its lease's end, or its
// session's; for a semaphore or read/write key, the latest end of its
// holds.
func (t *moreTable) leaseEnd(e *entry) time.Duration {
	if x := t.extras(e); x != nil {
		if x.group != nil {
			return x.group.latestEnd()
		}
		if s := x.session; s != nil {
			return s.expiresAt
		}
	}
	return e.expiresAt
}

// Machine is the lock state machine. It is not safe for concurrent use:
// callers serialize Apply, reads, Snapshot and Restore.
type Machine struct {
	now       time.Duration
	lastToken uint64
	keys      keyIndex // the entries, by key
	order     keyOrder // the entries of keys, in key byte order
	deadlines deadlines
	observe   func(Event)
	freezer   *Freezer // a snapshot being copied a chunk at a time; told of every change
	onChange  func(key string)
	// epoch counts new-term commands; a waiter whose epoch is older has not
	// been claimed since the last one. unclaimed counts those waiters.
	epoch     uint64
	unclaimed int
	sessions  map[Owner]*session
	nWaiters  int               // callers queued, over all keys
	sets      map[Owner]*keySet // multi-key acquisitions, held or waiting, by owner

	// extraHolds counts the holds of semaphore and read/write keys
	// beyond each key's first (growth.go): with Len, the locks held.
	extraHolds int

	released releases // recent releases by their owners (releases.go)

	moreTable // the entries' extras and queues
}

// New returns an empty machine. observe (may be nil) receives events during
// Apply, synchronously and in order; it must not call back into the machine.
func New(observe func(Event)) *Machine {
	return &Machine{order: newKeyOrder(), observe: observe, sessions: make(map[Owner]*session), sets: make(map[Owner]*keySet)}
}

// Apply applies one command: now = max(now, Stamp); every deadline at or before
// now is processed in (time, kind, key, owner) order; then the command itself.
//
// A command that fails Validate answers StatusInvalid. Its stamp still moves
// the clock (and so processes due deadlines, like a tick) when the stamp
// itself is in range; nothing else changes.
func (m *Machine) Apply(c Command) Result {
	if c.Stamp > m.now && c.Stamp <= MaxStamp {
		m.now = c.Stamp
	}
	m.expire()
	m.released.prune(m.now)
	if c.Validate() != nil {
		return Result{Status: StatusInvalid, Now: m.now}
	}
	switch c.Op {
	case OpAcquire:
		m.released.forget(releaseID{c.Key, c.Owner})
		return m.acquire(c)
	case OpAcquireAll:
		for _, k := range c.Keys {
			m.released.forget(releaseID{k, c.Owner})
		}
		return m.acquireAll(c)
	case OpRelease:
		return m.release(c)
	case OpExtend:
		return m.extend(c)
	case OpCancelWait:
		return m.cancelWait(c)
	case OpSessionCreate:
		return m.createSession(c)
	case OpSessionRenew:
		return m.renewSession(c)
	case OpSessionDestroy:
		return m.destroySession(c)
	case OpForceRelease:
		return m.forceRelease(c)
	case OpNewTerm:
		m.epoch++
		m.unclaimed = m.Waiters()
		return Result{Status: StatusTicked, Now: m.now, Waiters: m.unclaimed}
	case OpDropUnclaimed:
		return Result{Status: StatusTicked, Now: m.now, Waiters: m.dropUnclaimed()}
	default: // OpTick; Validate admits no other op
		return Result{Status: StatusTicked, Now: m.now}
	}
}

func (m *Machine) acquire(c Command) Result {
	var s *session
	if !c.Session.IsZero() {
		if s = m.sessions[c.Session]; s == nil {
			return Result{Status: StatusNoSession, Now: m.now, Waiters: m.waiting(m.keys.get(c.Key))}
		}
	}
	e := m.keys.get(c.Key)
	if e == nil {
		if c.Kind != KindMutex {
			return m.createGroup(c, s)
		}
		// Copied (the key into the entry, the metadata cloned) so that the
		// machine never pins a larger buffer the caller's key (or metadata)
		// was sliced from (a decoded batch, a request); OnChange gets the
		// machine's copy, which its listener may keep.
		e = newEntry(c.Key)
		e.owner = c.Owner
		m.adding(e.key())
		m.grant(e, c.TTL, s, strings.Clone(c.Meta))
		m.keys.add(e)
		m.order.insert(e)
		m.setHolderDeadline(e)
		return Result{Status: StatusGranted, Token: e.token, ExpiresAt: m.leaseEnd(e), Now: m.now}
	}
	if kind, limit := m.kind(e); kind != c.Kind || limit != c.Limit {
		return Result{Status: StatusKindMismatch, Now: m.now, Waiters: m.waitQueue(e).len(), Kind: kind, Limit: limit}
	}
	if g := m.group(e); g != nil {
		return m.acquireGroup(c, e, g, s)
	}
	held := Result{Token: e.token, ExpiresAt: m.leaseEnd(e), Now: m.now, Waiters: m.waitQueue(e).len()}
	if e.owner == c.Owner && m.set(e) != nil {
		// Held as one key of a multi-key grant: a single-key acquire is
		// not a retry of that acquisition.
		held.Status = StatusHeld
		return held
	}
	if e.owner == c.Owner {
		// A retry by the live holder: the same grant, not lengthened. Only
		// with the same binding: a grant bound to one session (or to a
		// lease) is not the answer to an acquire under another, whose
		// renewals would not keep it; that acquire finds the key held.
		if m.sess(e) != s {
			held.Status = StatusHeld
			return held
		}
		held.Status = StatusGranted
		return held
	}
	if w := m.waitQueue(e).find(c.Owner); w != nil {
		if w.session != s || w.set != nil {
			held.Status = StatusHeld // as for the holder: another binding (or a multi-key wait)
			return held
		}
		return m.retryQueued(e, w, held)
	}
	return m.enqueue(c, e, s, held)
}

// retryQueued answers an acquire retried by w's owner, queued for e with
// the same binding: it keeps its place, claimed (see claim). held is the
// answer about e's holder.
func (m *Machine) retryQueued(e *entry, w *waiter, held Result) Result {
	m.claim(e, w)
	held.Status = StatusQueued
	held.Waiters = m.waitQueue(e).position(w)
	return held
}

// claim is a retry by a queued owner: it keeps its place and its
// deadline, and claims the place for the current epoch.
func (m *Machine) claim(e *entry, w *waiter) {
	if w.epoch != m.epoch {
		if m.freezer != nil {
			m.freezer.touch(e) // not a change readers see: no changing(e)
		}
		w.epoch = m.epoch
		m.unclaimed--
	}
}

// enqueue queues c's owner at the back of e's queue, if c may wait and
// the queue has room; held is the answer about e's holder.
func (m *Machine) enqueue(c Command, e *entry, s *session, held Result) Result {
	if refusal, refused := queueRefusal(c, held); refused {
		return refusal
	}
	m.changing(e)
	if m.waitQueue(e) == nil {
		m.setWaitQueue(e, &queue{})
	}
	w := &waiter{owner: c.Owner, ttl: c.TTL, deadline: m.now + c.Wait, epoch: m.epoch, session: s, meta: strings.Clone(c.Meta), shared: c.Shared}
	m.waitQueue(e).pushBack(w)
	m.nWaiters++
	s.ref(e.key())
	m.deadlines.push(deadline{at: w.deadline, e: e, w: w})
	held.Status = StatusQueued
	held.Waiters = m.waitQueue(e).len()
	return held
}

// queueRefusal is the answer to c, which may not queue behind the holder
// held answers about: c does not wait (held), or the queue is full
// (queue-full). refused is false when c may queue. A single-key acquire and
// a multi-key acquire decide it here alike.
func queueRefusal(c Command, held Result) (refusal Result, refused bool) {
	switch {
	case c.Wait == 0:
		held.Status = StatusHeld
	case held.Waiters >= MaxWaiters:
		held.Status = StatusQueueFull
	default:
		return Result{}, false
	}
	return held, true
}

// release ends c.Owner's hold on c.Key, and remembers that it did: a
// repeat answers released, changing nothing (releases.go).
func (m *Machine) release(c Command) Result {
	id := releaseID{c.Key, c.Owner}
	e := m.keys.get(c.Key)
	var res Result
	switch {
	case e != nil && m.group(e) != nil:
		h := m.extras(e).group.liveHolder(c.Owner)
		if h == nil {
			return m.releaseRepeated(e, id)
		}
		res = m.releaseHolder(e, m.extras(e).group, h)
	case e == nil || e.owner != c.Owner:
		return m.releaseRepeated(e, id)
	default:
		res = m.releaseHeld(e)
	}
	m.released.remember(releaseID{e.key(), c.Owner}, m.now) // the machine's copy of the key: c's may pin a larger buffer
	return res
}

// releaseRepeated answers a release (or a session's destroy) that finds
// nothing to end: released when it repeats one the machine remembers
// (Token zero: the lease is over), else not held.
func (m *Machine) releaseRepeated(e *entry, id releaseID) Result {
	if !m.released.recalls(id) {
		return m.notHeld(e)
	}
	return Result{Status: StatusReleased, Now: m.now, Waiters: m.waiting(e)}
}

// releaseHeld ends e's live lease by its owner's request and hands the key on.
func (m *Machine) releaseHeld(e *entry) Result {
	token := e.token
	m.handOff(e)
	return Result{Status: StatusReleased, Token: token, Now: m.now, Waiters: m.waiting(e)}
}

// forceRelease ends Key's lease whoever holds it and hands the key on, as
// the holder's own release would; the answer carries the token of the lease
// it ended (never the owner). A key nobody holds answers not held.
func (m *Machine) forceRelease(c Command) Result {
	e := m.keys.get(c.Key)
	if e == nil || m.vacant(e) {
		return m.notHeld(e) // a reserved key: nobody holds it yet
	}
	if g := m.group(e); g != nil {
		return m.forceReleaseGroup(e, g)
	}
	return m.releaseHeld(e)
}

func (m *Machine) extend(c Command) Result {
	e := m.keys.get(c.Key)
	if e != nil && m.extras(e) != nil && m.extras(e).group != nil {
		if h := m.extras(e).group.liveHolder(c.Owner); h != nil {
			return m.extendHolder(c, e, h)
		}
		return m.notHeld(e)
	}
	if e == nil || e.owner != c.Owner {
		return m.notHeld(e)
	}
	if m.sess(e) != nil {
		// The lock has no lease of its own: it lasts as long as its
		// session, which only a renew of the session lengthens.
		return Result{Status: StatusExtended, Token: e.token, ExpiresAt: m.leaseEnd(e), Now: m.now, Waiters: m.waitQueue(e).len()}
	}
	if set := m.set(e); set != nil {
		m.extendSet(set, c.TTL)
		return Result{Status: StatusExtended, Token: e.token, ExpiresAt: e.expiresAt, Now: m.now, Waiters: m.waitQueue(e).len()}
	}
	m.changing(e)
	e.expiresAt = m.now + c.TTL
	m.deadlines.fixLease(e, e.expiresAt)
	return Result{Status: StatusExtended, Token: e.token, ExpiresAt: e.expiresAt, Now: m.now, Waiters: m.waitQueue(e).len()}
}

func (m *Machine) cancelWait(c Command) Result {
	e := m.keys.get(c.Key)
	if e == nil {
		return m.notHeld(e)
	}
	g := m.group(e)
	if g != nil {
		if h := g.liveHolder(c.Owner); h != nil {
			return m.releaseHolder(e, g, h)
		}
	} else if e.owner == c.Owner {
		// Granted while the caller gave up: give the key back at once.
		return m.releaseHeld(e)
	}
	w := m.waitQueue(e).find(c.Owner)
	if w == nil {
		return m.notHeld(e)
	}
	if w.set != nil {
		// One key of a multi-key wait: the whole set leaves its queues,
		// and the keys it reserved go to their next waiters.
		m.removeSet(w.set, 0, m.now)
		return Result{Status: StatusCanceled, Token: e.token, ExpiresAt: m.leaseEnd(e), Now: m.now, Waiters: m.waiting(e)}
	}
	m.removeWaiter(e, w)
	if g != nil {
		m.settle(e, g) // the head may have left: who follows may fit now
		return g.oldest(Result{Status: StatusCanceled, Now: m.now, Waiters: m.waiting(e)})
	}
	return Result{Status: StatusCanceled, Token: e.token, ExpiresAt: m.leaseEnd(e), Now: m.now, Waiters: m.waitQueue(e).len()}
}

func (m *Machine) notHeld(e *entry) Result {
	return Result{Status: StatusNotHeld, Now: m.now, Waiters: m.waiting(e)}
}

// waiting is the queue length of e's key, 0 if e is no longer in the machine.
func (m *Machine) waiting(e *entry) int {
	if e == nil || m.keys.get(e.key()) != e {
		return 0
	}
	return m.waitQueue(e).len()
}

// grant gives e to e.owner with a fresh token: for ttl from now, or bound
// to session s. The caller then places the hold in the deadline index
// (setHolderDeadline).
func (m *Machine) grant(e *entry, ttl time.Duration, s *session, meta string) {
	m.lastToken++
	e.token = m.lastToken
	m.bind(e, s, meta)
	if s != nil {
		e.expiresAt = 0
		s.ref(e.key())
	} else {
		e.expiresAt = m.now + ttl
	}
}

// setHolderDeadline puts e's hold in the deadline index: its own end for a
// lease or lock-delay, nothing for a session-bound holder (the session's
// end is there).
func (m *Machine) setHolderDeadline(e *entry) {
	switch {
	case m.sess(e) != nil:
		if e.index >= 0 {
			m.deadlines.removeLease(e)
		}
		e.index = -1
	case e.index >= 0:
		m.deadlines.fixLease(e, e.expiresAt)
	default:
		m.deadlines.pushLease(e.expiresAt, e)
	}
}

// handOff ends e's hold (released, expired, or a lock-delay that ran
// out) and serves its queue: the first waiter claimed in the current epoch
// is granted, the unclaimed ones ahead of it dropped (see serve, which also
// handles a multi-key waiter at the head), or the key is forgotten when
// nobody claimed waits. A hold that is one key of a multi-key grant ends
// on every key of the set, each handed on in key order. Every queued
// waiter has a deadline later than the moment the hold ended, because due
// wait deadlines are processed first.
func (m *Machine) handOff(e *entry) {
	if s := m.set(e); s != nil {
		m.releaseSet(s)
		return
	}
	m.changing(e)
	if w := m.waitQueue(e).first(); w != nil && w.set == nil && w.epoch == m.epoch {
		// The common case, kept cheap: the lease passes to the head in
		// place (its deadline moves in the index).
		m.sess(e).unref(e.key())
		m.grantHead(e, w)
		return
	}
	m.vacate(e)
	m.serve(e)
}

// dropWaiter removes an unclaimed waiter and says so.
func (m *Machine) dropWaiter(e *entry, w *waiter) {
	m.removeWaiter(e, w)
	m.emit(Event{Kind: EventUnclaimed, Key: e.key(), Owner: w.owner, At: m.now})
}

// dropUnclaimed drops every waiter not claimed in the current epoch, key
// by key in key order, and returns how many it dropped. A multi-key waiter
// leaves all its queues at its first key, and a key it reserved goes to
// its next waiter (serve). The keys are collected first: serving may take
// a key out of the key order, which is not changed while it is walked.
func (m *Machine) dropUnclaimed() int {
	var keys []*entry
	pending := m.unclaimed
	m.order.ascend("", func(e *entry) bool {
		n := 0
		for w := m.waitQueue(e).first(); w != nil; w = w.next {
			if w.epoch != m.epoch {
				n++
			}
		}
		if n > 0 {
			keys = append(keys, e)
			pending -= n
		}
		return pending > 0
	})
	// Serving a key a set left may drop unclaimed waiters elsewhere too:
	// the count is what the whole walk took off Unclaimed.
	before := m.unclaimed
	var stale []*waiter
	for _, e := range keys {
		if m.keys.get(e.key()) != e {
			continue // served away by a set's departure
		}
		stale = stale[:0]
		for w := m.waitQueue(e).first(); w != nil; w = w.next {
			if w.epoch != m.epoch {
				stale = append(stale, w)
			}
		}
		for _, w := range stale {
			switch {
			case m.waitQueue(e).find(w.owner) != w:
				// Gone meanwhile (a set dropped from another key).
			case w.set != nil:
				m.removeSet(w.set, EventUnclaimed, m.now)
			default:
				m.dropWaiter(e, w)
			}
		}
		if g := m.group(e); g != nil && len(stale) > 0 && m.keys.get(e.key()) == e {
			m.settle(e, g) // grants only: the key keeps its holders
		}
	}
	return before - m.unclaimed
}

func (m *Machine) removeWaiter(e *entry, w *waiter) {
	m.changing(e)
	if w.epoch != m.epoch {
		m.unclaimed--
	}
	m.nWaiters--
	w.session.unref(e.key())
	m.deadlines.remove(w.index)
	m.waitQueue(e).unlink(w)
	if m.waitQueue(e).len() == 0 {
		m.setWaitQueue(e, nil)
	}
}

// expire processes every deadline at or before now, earliest first. Each is
// judged at its own time: a lease that ended at t goes to the head waiter,
// whose deadline is later than t. New grants end after now, so the loop ends.
func (m *Machine) expire() {
	for {
		d, ok := m.deadlines.next()
		if !ok || d.at > m.now {
			return
		}
		switch {
		case d.e == nil:
			s := d.session()
			m.emit(Event{Kind: EventSessionExpired, Owner: s.id, ExpiresAt: s.expiresAt, At: d.at})
			m.endSession(s, true, d.at)
		case d.w != nil && d.w.held:
			m.expireHolder(d.e, d.w, d.at)
		case d.w != nil && d.w.set != nil:
			m.removeSet(d.w.set, EventWaitExpired, d.at)
		case d.w != nil:
			m.removeWaiter(d.e, d.w)
			m.emit(Event{Kind: EventWaitExpired, Key: d.e.key(), Owner: d.w.owner, At: d.at})
			if g := m.group(d.e); g != nil {
				m.settle(d.e, g)
			}
		case d.e.owner.IsZero():
			m.handOff(d.e) // a lock-delay ran out
		case m.set(d.e) != nil:
			// A multi-key lease: every key's end is due at once, the
			// first key's first; they all end now.
			for _, e := range m.set(d.e).entries {
				m.emit(Event{Kind: EventExpired, Key: e.key(), Owner: e.owner, Token: e.token, ExpiresAt: e.expiresAt, At: d.at})
			}
			m.handOff(d.e)
		default:
			e := d.e
			m.emit(Event{Kind: EventExpired, Key: e.key(), Owner: e.owner, Token: e.token, ExpiresAt: e.expiresAt, At: d.at})
			m.handOff(e)
		}
	}
}

func (m *Machine) createSession(c Command) Result {
	m.released.forget(releaseID{owner: c.Session})
	if s := m.sessions[c.Session]; s != nil {
		// A retry: the session as it is, not lengthened.
		return Result{Status: StatusGranted, ExpiresAt: s.expiresAt, Now: m.now, Waiters: len(s.refs)}
	}
	s := newSession(c.Session, c.TTL, m.now+c.TTL, c.LockDelay)
	m.sessions[s.id] = s
	m.deadlines.push(s.deadline())
	return Result{Status: StatusGranted, ExpiresAt: s.expiresAt, Now: m.now}
}

func (m *Machine) renewSession(c Command) Result {
	s := m.sessions[c.Session]
	if s == nil {
		return Result{Status: StatusNoSession, Now: m.now}
	}
	s.expiresAt = m.now + s.ttl
	m.deadlines.fix(s.end.index, s.expiresAt)
	return Result{Status: StatusExtended, ExpiresAt: s.expiresAt, Now: m.now, Waiters: len(s.refs)}
}

func (m *Machine) destroySession(c Command) Result {
	id := releaseID{owner: c.Session}
	s := m.sessions[c.Session]
	if s == nil {
		if m.released.recalls(id) {
			// A repeat of the destroy that ended it (releases.go): it
			// released no lock this time.
			return Result{Status: StatusReleased, Now: m.now}
		}
		return Result{Status: StatusNoSession, Now: m.now}
	}
	released := m.endSession(s, false, m.now)
	m.released.remember(id, m.now)
	return Result{Status: StatusReleased, ExpiresAt: s.expiresAt, Now: m.now, Waiters: released}
}

// endSession ends s (expired at time at, or destroyed) and returns how many
// locks it released. Key by key in key order, so that replicas agree: its
// waiters leave the queue (EventWaitExpired), and the key it holds is
// released and handed to the next waiter, or, after an expiry with a
// lock-delay, kept unavailable until the delay runs out.
func (m *Machine) endSession(s *session, expired bool, at time.Duration) int {
	keys := make([]string, 0, len(s.refs))
	for k := range s.refs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s.refs = nil // no more bookkeeping for a session that has ended
	delete(m.sessions, s.id)
	m.deadlines.remove(s.end.index)
	released := 0
	for _, k := range keys {
		e := m.keys.get(k)
		if e == nil {
			continue
		}
		for w := m.waitQueue(e).first(); w != nil; {
			next := w.next
			if w.session == s {
				m.removeWaiter(e, w)
				m.emit(Event{Kind: EventWaitExpired, Key: e.key(), Owner: w.owner, At: at})
			}
			w = next
		}
		if g := m.group(e); g != nil {
			released += m.endGroupSession(e, g, s, expired, at)
			continue
		}
		if m.sess(e) != s {
			continue
		}
		released++
		if !expired {
			m.handOff(e)
			continue
		}
		m.emit(Event{Kind: EventExpired, Key: e.key(), Owner: e.owner, Token: e.token, ExpiresAt: s.expiresAt, At: at})
		if s.lockDelay == 0 {
			m.handOff(e)
			continue
		}
		m.changing(e)
		e.owner = Owner{}
		m.bind(e, nil, "")
		e.expiresAt = at + s.lockDelay // due at once if the delay is already over: the loop in expire processes it
		m.setHolderDeadline(e)
	}
	return released
}

// OnChange sets fn (nil: none) to be called, during Apply and before the
// change, with every key whose state a reader can see is about to change:
// its holder, token, lease end, metadata or queue. A key may be reported
// more than once in one Apply. Renewing a session that holds the key is not
// a change of the key. fn must not call back into the machine. The key is
// the machine's own copy, never a slice of a command's buffer: fn may keep
// it.
func (m *Machine) OnChange(fn func(key string)) { m.onChange = fn }

// changing records that e is about to change: the snapshot being copied
// keeps its state as it was, and OnChange hears of it.
func (m *Machine) changing(e *entry) {
	if m.freezer != nil {
		m.freezer.touch(e)
	}
	if m.onChange != nil {
		m.onChange(e.key())
	}
}

// adding is changing for a key that is not in the machine yet.
func (m *Machine) adding(key string) {
	if m.freezer != nil {
		m.freezer.touchNew(key)
	}
	if m.onChange != nil {
		m.onChange(key)
	}
}

func (m *Machine) emit(ev Event) {
	if m.observe != nil {
		m.observe(ev)
	}
}

// Now is the machine's log time.
func (m *Machine) Now() time.Duration { return m.now }

// NextDeadline is the earliest pending lease expiry or wait deadline.
func (m *Machine) NextDeadline() (time.Duration, bool) {
	return m.deadlines.nextAt()
}

// Lookup reports key as seen at log time max(Now(), at): a lease whose
// ExpiresAt is at or before that time is not Held. Lookup does not play the
// hand-off forward: a key whose lease has ended by then reads as free (with
// its Waiters) until a command or tick at that time grants it to the head
// waiter.
func (m *Machine) Lookup(key string, at time.Duration) KeyState {
	e := m.keys.get(key)
	if e == nil {
		return KeyState{}
	}
	return m.state(e, max(m.now, at))
}

func (m *Machine) state(e *entry, t time.Duration) KeyState {
	if g := m.group(e); g != nil {
		return g.state(m.waitQueue(e).len(), t)
	}
	end := m.leaseEnd(e)
	if end <= t {
		return KeyState{Waiters: m.waitQueue(e).len(), Reserved: m.vacant(e)}
	}
	st := KeyState{Held: true, Owner: e.owner, Token: e.token, ExpiresAt: end, Waiters: m.waitQueue(e).len(), Meta: m.metadata(e), Delayed: e.owner.IsZero(), SetKeys: m.setKeys(e)}
	if s := m.sess(e); s != nil {
		st.Session = s.id
	}
	return st
}

// SessionState is what a read sees of one session.
type SessionState struct {
	Live      bool
	TTL       time.Duration
	ExpiresAt time.Duration
	LockDelay time.Duration
	Keys      int // keys where the session holds or waits
}

// Session reports session id as seen at log time max(Now(), at).
func (m *Machine) Session(id Owner, at time.Duration) SessionState {
	s := m.sessions[id]
	if s == nil || s.expiresAt <= max(m.now, at) {
		return SessionState{}
	}
	return SessionState{Live: true, TTL: s.ttl, ExpiresAt: s.expiresAt, LockDelay: s.lockDelay, Keys: len(s.refs)}
}

// Sessions is the number of live sessions.
func (m *Machine) Sessions() int { return len(m.sessions) }

// Range calls fn for every held key with the given prefix in key order, as seen
// at max(Now(), at), until fn returns false. It seeks to the prefix in the
// key order and walks from there: O(log n) plus the keys it passes, which
// are the keys it reports and any whose lease has ended by the read time.
// fn must not call back into the machine.
func (m *Machine) Range(prefix string, at time.Duration, fn func(key string, st KeyState) bool) {
	m.RangeFrom(prefix, "", at, fn)
}

// RangeFrom is Range restricted to the keys that sort strictly after the
// key after, which need not be held: the next page of a listing whose last
// key was after, found by a seek rather than a walk past the keys before it.
// An after of "" starts at the beginning, as no key is empty.
func (m *Machine) RangeFrom(prefix, after string, at time.Duration, fn func(key string, st KeyState) bool) {
	t := max(m.now, at)
	from := max(prefix, after)
	m.order.ascend(from, func(e *entry) bool {
		// Keys with the prefix are contiguous in byte order, from the
		// prefix itself on; from is at or after the prefix, so the first key
		// without it ends the walk.
		if !strings.HasPrefix(e.key(), prefix) {
			return false
		}
		if e.key() == after || m.leaseEnd(e) <= t {
			return true
		}
		return fn(e.key(), m.state(e, t))
	})
}

// Len is the number of keys with a holder or waiters: held, or reserved
// for a multi-key waiter.
func (m *Machine) Len() int { return m.keys.len() }

// Waiters is the number of callers queued, over all keys.
func (m *Machine) Waiters() int { return m.nWaiters }

// Epoch is the number of new-term commands applied.
func (m *Machine) Epoch() uint64 { return m.epoch }

// Unclaimed is the number of queued callers whose place has not been
// claimed again since the last new-term command.
func (m *Machine) Unclaimed() int { return m.unclaimed }

// LastToken is the highest fencing token ever granted.
func (m *Machine) LastToken() uint64 { return m.lastToken }
