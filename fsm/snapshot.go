package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"time"
)

// Snapshot format, version 6 (varints as in the command encoding):
//
//	snapshot := version now lastToken epoch sessions session* releases release* count key*
//	session  := id ttl expiresAt lockDelay
//	release  := length key owner at            (key "": the destroy of session owner)
//	key      := length bytes holder waiters waiter*
//	holder   := 0 owner token expiresAt meta     (a mutex: a lease)
//	          | 1 owner token session meta       (bound to a session)
//	          | 2 token expiresAt                (a lock-delay until expiresAt)
//	          | 3 kind limit exclusive slots slot*  (a semaphore or read/write key)
//	          | 4                                (nobody: reserved for the multi-key waiter at the head)
//	          | 5 owner token expiresAt meta     (one key of a multi-key grant)
//	slot     := owner token hold
//	hold     := 0 expiresAt meta | 1 session meta | 2 expiresAt (a lock-delay slot)
//	waiter   := owner grant deadline epoch meta [shared]
//	grant    := 0 ttl | 1 session | 2 ttl        (2: one key of a multi-key waiter)
//	meta     := length bytes
//
// A multi-key grant is the keys whose holder kind is 5 with the same token
// (one token per grant); a multi-key waiter is the waiters of grant kind 2
// with the same owner (an owner is in at most one multi-key acquisition).
// Their records agree on owner, lease end, TTL, deadline, epoch and
// metadata, which Restore checks. The releases are the remembered
// releases (releases.go) in the order they were applied. Version 5, written
// before releases were remembered (and still, by SnapshotIn, for members
// that read no later), is version 6 without releases. Version
// 4, written before multi-key locks, is version 5 without holder kinds 4
// and 5 and grant kind 2.
//
// kind is 1 (semaphore: limit is N, exclusive 0) or 2 (read/write: limit
// 0, exclusive 1 for a writer's hold); slots are in grant (token) order;
// shared (0 or 1) follows only a read/write key's waiters. Sessions are in
// ascending ID order, keys in ascending byte order and waiters in queue
// order, so equal states give equal bytes. Version 3, written before
// semaphores and read/write keys, is version 4 without holder kind 3, and
// reads the same. Version 2,
// written before sessions and metadata existed, is
//
//	snapshot := version now lastToken epoch count key*
//	key      := length bytes owner token expiresAt waiters waiter*
//	waiter   := owner ttl deadline epoch
//
// and version 1, written before claims existed, is version 2 without the
// epochs. Restore reads both: no sessions, no metadata, and for version 1
// epoch 0 with every waiter claimed.
const (
	snapshotVersion   = 6
	snapshotVersionV5 = 5
	snapshotVersionV4 = 4
	snapshotVersionV3 = 3
	snapshotVersionV2 = 2
	snapshotVersionV1 = 1
)

// Holder and grant kinds in a version 3 snapshot.
const (
	holdLease   = 0
	holdSession = 1
	holdDelayed = 2
	holdGroup   = 3
	holdNone    = 4 // reserved key; nothing follows
	holdSet     = 5 // holder kind: one key of a multi-key grant; grant kind: of a multi-key waiter (2)
	grantSet    = 2
)

// Shortest encodings of a key record (1-byte key, no waiters) and of a
// waiter record; they bound counts read from a snapshot before allocating.
const (
	minKeyRecord       = 1 + 1 + ownerLen + 1 + 1 + 1
	minWaiterRecord    = ownerLen + 1 + 1 // version 1; version 2 adds one byte
	minKeyRecordV3     = 1 + 1 + 1 + 1 + 1 + 1
	minWaiterRecordV3  = ownerLen + 1 + 1 + 1 + 1 + 1
	minSessionRecordV3 = ownerLen + 1 + 1 + 1
	minSessionRecord   = minSessionRecordV3
	minReleaseRecord   = 1 + ownerLen + 1
)

// Snapshot returns the machine's whole state, deterministically encoded in
// the latest version (6).
func (m *Machine) Snapshot() []byte { return m.freeze(snapshotVersion).appendTo(nil) }

// SnapshotIn returns the machine's whole state encoded in the given
// snapshot version, for members whose builds read no later one
// (SnapshotVersionFor): 6, or 5, which leaves out the remembered releases
// (a machine restored from it answers a repeat of an earlier release not
// held). Equal states give equal bytes in each version. Other versions are
// refused with an error wrapping ErrBadVersion.
func (m *Machine) SnapshotIn(version int) ([]byte, error) {
	if err := checkWritable(version); err != nil {
		return nil, err
	}
	return m.freeze(byte(version)).appendTo(nil), nil
}

// checkWritable refuses a snapshot version this build does not write: it
// writes the latest, and version 5 for builds that read no later.
func checkWritable(version int) error {
	if version != snapshotVersion && version != snapshotVersionV5 {
		return fmt.Errorf("%w: cannot write snapshot version %d: this build writes versions %d and %d",
			ErrBadVersion, version, snapshotVersionV5, snapshotVersion)
	}
	return nil
}

// frozen is keys and waiters copied out of a machine, in the order and with
// the fields the snapshot encoding needs: the whole state (freeze, for
// Snapshot) or a Freezer's chunk.
type frozen struct {
	version   byte // the snapshot version to write
	now       time.Duration
	lastToken uint64
	epoch     uint64
	sessions  []frozenSession // whole-state copies only; a Freezer keeps its own
	releases  []frozenRelease // likewise
	keys      []frozenKey
	waiters   []frozenWaiter // every key's waiters, key after key, each in queue order
	slots     []frozenSlot   // every group key's holders, key after key, each in grant order
}

type frozenSession struct {
	id                        Owner
	ttl, expiresAt, lockDelay time.Duration
}

type frozenKey struct {
	key       string // strings are immutable: sharing it copies nothing
	owner     Owner  // zero: a lock-delay (or a group)
	token     uint64
	expiresAt time.Duration // a lease's or lock-delay's end; unused when session is set
	session   Owner         // the session the holder is bound to, or zero
	meta      string
	nWaiters  int
	// A semaphore or read/write key: kind is not KindMutex and its
	// nSlots holders are in frozen.slots, key after key.
	kind      Kind
	limit     int
	exclusive bool
	nSlots    int
	reserved  bool // nobody holds it: a multi-key waiter heads its queue
	multi     bool // its holder holds it as one key of a multi-key grant
}

type frozenWaiter struct {
	owner         Owner
	ttl, deadline time.Duration
	epoch         uint64
	session       Owner
	meta          string
	shared        bool
	multi         bool // one record of a multi-key waiter
}

// frozenSlot is one holder of a semaphore or read/write key.
type frozenSlot struct {
	owner     Owner
	token     uint64
	expiresAt time.Duration // a lease's or lock-delay's end; unused when session is set
	session   Owner
	meta      string
	delayed   bool
}

type frozenRelease struct {
	key   string
	owner Owner
	at    time.Duration
}

// frozenCursor is where the next key's waiters and slots start.
type frozenCursor struct{ waiter, slot int }

// freeze copies the whole state, to be written in version.
func (m *Machine) freeze(version byte) *frozen {
	f := &frozen{version: version, now: m.now, lastToken: m.lastToken, epoch: m.epoch, sessions: m.freezeSessions(), releases: m.freezeReleases(), keys: make([]frozenKey, 0, len(m.keys))}
	m.order.ascend("", func(e *entry) bool {
		f.appendEntry(e)
		return true
	})
	return f
}

// freezeSessions copies every session, in ID order.
func (m *Machine) freezeSessions() []frozenSession {
	out := make([]frozenSession, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, frozenSession{id: s.id, ttl: s.ttl, expiresAt: s.expiresAt, lockDelay: s.lockDelay})
	}
	slices.SortFunc(out, func(a, b frozenSession) int { return bytes.Compare(a.id[:], b.id[:]) })
	return out
}

// freezeReleases copies the remembered releases, oldest first.
func (m *Machine) freezeReleases() []frozenRelease {
	out := make([]frozenRelease, 0, m.released.len())
	for r := m.released.head; r != nil; r = r.next {
		out = append(out, frozenRelease{key: r.id.key, owner: r.id.owner, at: r.at})
	}
	return out
}

// Size is the length of the encoding, exactly.
func (f *frozen) size() int {
	size := len(appendSnapshotHeader(nil, f.version, f.now, f.lastToken, f.epoch, f.sessions, f.releases, len(f.keys)))
	for i := range f.keys {
		k := &f.keys[i]
		if k.kind != KindMutex {
			size += uvarintLen(uint64(len(k.key))) + len(k.key) + 1 + 1 + uvarintLen(uint64(k.limit)) + 1 + uvarintLen(uint64(k.nSlots)) + uvarintLen(uint64(k.nWaiters))
			continue
		}
		size += uvarintLen(uint64(len(k.key))) + len(k.key) + 1 + uvarintLen(k.token) + uvarintLen(uint64(k.nWaiters))
		switch {
		case k.reserved:
			size -= uvarintLen(k.token) // none: the holder kind alone
		case k.owner.IsZero():
			size += uvarintLen(uint64(k.expiresAt))
		case k.session.IsZero():
			size += ownerLen + uvarintLen(uint64(k.expiresAt)) + uvarintLen(uint64(len(k.meta))) + len(k.meta)
		default:
			size += 2*ownerLen + uvarintLen(uint64(len(k.meta))) + len(k.meta)
		}
	}
	for i := range f.waiters {
		w := &f.waiters[i]
		size += ownerLen + 1 + uvarintLen(uint64(w.deadline)) + uvarintLen(w.epoch) + uvarintLen(uint64(len(w.meta))) + len(w.meta)
		if w.session.IsZero() {
			size += uvarintLen(uint64(w.ttl))
		} else {
			size += ownerLen
		}
	}
	for i := range f.slots {
		h := &f.slots[i]
		size += ownerLen + uvarintLen(h.token) + 1
		switch {
		case h.delayed:
			size += uvarintLen(uint64(h.expiresAt))
		case h.session.IsZero():
			size += uvarintLen(uint64(h.expiresAt)) + uvarintLen(uint64(len(h.meta))) + len(h.meta)
		default:
			size += ownerLen + uvarintLen(uint64(len(h.meta))) + len(h.meta)
		}
	}
	for i := range f.keys {
		if f.keys[i].kind == KindRW {
			size += f.keys[i].nWaiters // the shared flags
		}
	}
	return size
}

// appendTo appends the snapshot encoding to b. Keys are already in byte
// order, so equal states give equal bytes with no sort.
func (f *frozen) appendTo(b []byte) []byte {
	b = slices.Grow(b, f.size())
	b = f.appendHeader(b)
	var next frozenCursor
	for i := range f.keys {
		b = f.appendKey(b, i, &next)
	}
	return b
}

func (f *frozen) appendHeader(b []byte) []byte {
	return appendSnapshotHeader(b, f.version, f.now, f.lastToken, f.epoch, f.sessions, f.releases, len(f.keys))
}

// appendSnapshotHeader appends everything before the keys: the sessions
// and releases too, which a Freezer copies whole when it starts. Version 5
// leaves the releases out; the rest is the same in both versions.
func appendSnapshotHeader(b []byte, version byte, now time.Duration, lastToken, epoch uint64, sessions []frozenSession, releases []frozenRelease, count int) []byte {
	b = append(b, version)
	b = appendUvarint(b, uint64(now))
	b = appendUvarint(b, lastToken)
	b = appendUvarint(b, epoch)
	b = appendUvarint(b, uint64(len(sessions)))
	for _, s := range sessions {
		b = append(b, s.id[:]...)
		b = appendUvarint(b, uint64(s.ttl))
		b = appendUvarint(b, uint64(s.expiresAt))
		b = appendUvarint(b, uint64(s.lockDelay))
	}
	if version < snapshotVersion {
		return appendUvarint(b, uint64(count))
	}
	b = appendUvarint(b, uint64(len(releases)))
	for _, r := range releases {
		b = appendUvarint(b, uint64(len(r.key)))
		b = append(b, r.key...)
		b = append(b, r.owner[:]...)
		b = appendUvarint(b, uint64(r.at))
	}
	return appendUvarint(b, uint64(count))
}

func appendMeta(b []byte, meta string) []byte {
	b = appendUvarint(b, uint64(len(meta)))
	return append(b, meta...)
}

// appendKey appends key i's record; its waiters and slots start where next
// says, which it moves on to the next key's.
func (f *frozen) appendKey(b []byte, i int, next *frozenCursor) []byte {
	k := &f.keys[i]
	b = appendUvarint(b, uint64(len(k.key)))
	b = append(b, k.key...)
	switch {
	case k.kind != KindMutex:
		b = append(b, holdGroup, byte(k.kind))
		b = appendUvarint(b, uint64(k.limit))
		exclusive := byte(0)
		if k.exclusive {
			exclusive = 1
		}
		b = append(b, exclusive)
		b = appendUvarint(b, uint64(k.nSlots))
		for _, h := range f.slots[next.slot : next.slot+k.nSlots] {
			b = append(b, h.owner[:]...)
			b = appendUvarint(b, h.token)
			switch {
			case h.delayed:
				b = append(b, holdDelayed)
				b = appendUvarint(b, uint64(h.expiresAt))
			case h.session.IsZero():
				b = append(b, holdLease)
				b = appendUvarint(b, uint64(h.expiresAt))
				b = appendMeta(b, h.meta)
			default:
				b = append(b, holdSession)
				b = append(b, h.session[:]...)
				b = appendMeta(b, h.meta)
			}
		}
		next.slot += k.nSlots
	case k.reserved:
		b = append(b, holdNone)
	case k.owner.IsZero():
		b = append(b, holdDelayed)
		b = appendUvarint(b, k.token)
		b = appendUvarint(b, uint64(k.expiresAt))
	case k.session.IsZero():
		hold := byte(holdLease)
		if k.multi {
			hold = holdSet
		}
		b = append(b, hold)
		b = append(b, k.owner[:]...)
		b = appendUvarint(b, k.token)
		b = appendUvarint(b, uint64(k.expiresAt))
		b = appendMeta(b, k.meta)
	default:
		b = append(b, holdSession)
		b = append(b, k.owner[:]...)
		b = appendUvarint(b, k.token)
		b = append(b, k.session[:]...)
		b = appendMeta(b, k.meta)
	}
	b = appendUvarint(b, uint64(k.nWaiters))
	for _, w := range f.waiters[next.waiter : next.waiter+k.nWaiters] {
		b = append(b, w.owner[:]...)
		if w.multi {
			b = append(b, grantSet)
			b = appendUvarint(b, uint64(w.ttl))
		} else if w.session.IsZero() {
			b = append(b, holdLease)
			b = appendUvarint(b, uint64(w.ttl))
		} else {
			b = append(b, holdSession)
			b = append(b, w.session[:]...)
		}
		b = appendUvarint(b, uint64(w.deadline))
		b = appendUvarint(b, w.epoch)
		b = appendMeta(b, w.meta)
		if k.kind == KindRW {
			shared := byte(0)
			if w.shared {
				shared = 1
			}
			b = append(b, shared)
		}
	}
	next.waiter += k.nWaiters
	return b
}

// Restore replaces the state with a snapshot's. It checks everything a
// machine could not have produced (limits, order, duplicates, leases and
// deadlines already past, tokens beyond the counter, holders bound to
// sessions that do not exist) and returns an error wrapping ErrBadEncoding
// or ErrBadVersion; on error the state is unchanged. The observer is kept.
func (m *Machine) Restore(b []byte) error {
	d := decoder{b: b}
	v := d.byte()
	if d.err == nil && (v < snapshotVersionV1 || v > snapshotVersion) {
		return fmt.Errorf("%w: snapshot version %d", ErrBadVersion, v)
	}
	now := d.duration("now", MaxStamp, ErrStampRange)
	lastToken := d.uvarint()
	var epoch uint64
	minWaiter, minKey := uint64(minWaiterRecord), uint64(minKeyRecord)
	switch v {
	case snapshotVersion, snapshotVersionV5, snapshotVersionV4, snapshotVersionV3:
		epoch = d.uvarint()
		minWaiter, minKey = minWaiterRecordV3, minKeyRecordV3
	case snapshotVersionV2:
		epoch = d.uvarint()
		minWaiter++
	}
	sessions := make(map[Owner]*session)
	var heap deadlines
	if v >= snapshotVersionV3 {
		ns := d.uvarint()
		if d.err == nil && ns > uint64(len(b)-d.off)/minSessionRecord {
			d.fail("session count exceeds its bytes")
		}
		var prev Owner
		for i := uint64(0); i < ns && d.err == nil; i++ {
			s := &session{refs: make(map[string]int)}
			s.id = d.owner()
			if d.err == nil && i > 0 && bytes.Compare(s.id[:], prev[:]) <= 0 {
				d.fail("sessions not in strictly ascending order")
			}
			prev = s.id
			s.ttl = d.duration("session ttl", MaxTTL, ErrTTLRange)
			if d.err == nil && s.ttl < MinTTL {
				d.failLimit("session ttl", ErrTTLRange)
			}
			s.expiresAt = d.deadline("session end", now, s.ttl)
			s.lockDelay = d.duration("lock delay", MaxLockDelay, ErrDelayRange)
			sessions[s.id] = s
			heap = append(heap, deadline{at: s.expiresAt, s: s})
		}
	}
	var released releases
	if v >= snapshotVersion {
		released = d.releases(now, sessions)
	}
	unclaimed, nWaiters := 0, 0
	n := d.uvarint()
	if d.err == nil && n > uint64(len(b)-d.off)/minKey {
		d.fail("key count exceeds its bytes")
	}
	if d.err != nil {
		return d.err
	}

	sessionOf := func(what string) *session {
		id := d.owner()
		s := sessions[id]
		if d.err == nil && s == nil {
			d.fail(what + " bound to a session that does not exist")
		}
		return s
	}
	keys := make(map[string]*entry, n)
	sorted := make([]*entry, 0, n)       // the key order's input, already in order
	heldSets := make(map[uint64]*keySet) // multi-key grants by token
	sets := make(map[Owner]*keySet)      // every multi-key acquisition by owner
	heap = slices.Grow(heap, int(n))
	tokens := make([]uint64, 0, n)
	prev := ""
	for i := uint64(0); i < n; i++ {
		e := &entry{index: -1}
		e.key = d.key()
		if d.err == nil && i > 0 && e.key <= prev {
			d.fail("keys not in strictly ascending order")
		}
		prev = e.key
		hold := byte(holdLease)
		if v >= snapshotVersionV3 {
			hold = d.byte()
		}
		var g *group
		switch hold {
		case holdGroup:
			if v < snapshotVersionV4 {
				d.fail("unknown holder kind")
				break
			}
			g = d.group(e, now, lastToken, sessionOf)
			for h := g.holders.first(); h != nil; h = h.next {
				tokens = append(tokens, h.token)
				if h.session == nil {
					heap = append(heap, deadline{at: h.deadline, e: e, w: h})
				} else {
					h.session.ref(e.key)
				}
			}
		case holdLease:
			e.owner = d.owner()
			e.token = d.uvarint()
			e.expiresAt = d.deadline("lease end", now, MaxTTL)
		case holdSession:
			e.owner = d.owner()
			e.token = d.uvarint()
			e.bind(sessionOf("holder"), "")
		case holdDelayed:
			e.token = d.uvarint()
			e.expiresAt = d.deadline("lock delay end", now, MaxLockDelay)
		case holdNone:
			if v < snapshotVersionV5 {
				d.fail("unknown holder kind")
			}
		case holdSet:
			if v < snapshotVersionV5 {
				d.fail("unknown holder kind")
				break
			}
			e.owner = d.owner()
			e.token = d.uvarint()
			e.expiresAt = d.deadline("lease end", now, MaxTTL)
		default:
			d.fail("unknown holder kind")
		}
		if d.err == nil && g == nil && hold != holdNone && (e.token == 0 || e.token > lastToken) {
			d.fail("token outside 1..last token")
		}
		if v >= snapshotVersionV3 && hold != holdDelayed && hold != holdNone && g == nil {
			if meta := d.meta(); meta != "" {
				e.bind(e.sess(), meta)
			}
		}
		newSet := false
		if hold == holdSet && d.err == nil {
			s := heldSets[e.token]
			if s == nil {
				s = &keySet{owner: e.owner, extra: &holderExtra{meta: e.metadata()}}
				s.extra.set = s
				heldSets[e.token] = s
				newSet = true
				if sets[s.owner] != nil {
					d.fail("owner in two multi-key acquisitions")
				}
				sets[s.owner] = s
			} else if s.owner != e.owner || s.entries[0].expiresAt != e.expiresAt || s.extra.meta != e.metadata() {
				d.fail("keys of one multi-key grant disagree")
			}
			e.extra = s.extra
			s.entries = append(s.entries, e)
		}
		waiters := d.uvarint()
		if d.err == nil && (waiters > MaxWaiters || waiters > uint64(len(b)-d.off)/minWaiter) {
			d.fail("waiter count out of range")
		}
		if d.err != nil {
			return d.err
		}
		if hold == holdNone {
			if waiters == 0 {
				d.fail("reserved key without waiters")
				return d.err
			}
		} else if g == nil {
			if hold != holdSet || newSet {
				tokens = append(tokens, e.token)
			}
			if s := e.sess(); s == nil {
				heap = append(heap, deadline{at: e.expiresAt, e: e})
			} else {
				s.ref(e.key)
			}
		}
		if waiters > 0 {
			e.waiters = &queue{byOwner: make(map[Owner]*waiter, waiters)}
		}
		for j := uint64(0); j < waiters; j++ {
			w := &waiter{owner: d.owner()}
			grant := byte(holdLease)
			if v >= snapshotVersionV3 {
				grant = d.byte()
			}
			switch grant {
			case holdLease:
				ttl := d.duration("waiter ttl", MaxTTL, ErrTTLRange)
				if d.err == nil && ttl < MinTTL {
					d.failLimit("waiter ttl", ErrTTLRange)
				}
				w.ttl = ttl
			case holdSession:
				w.session = sessionOf("waiter")
			case grantSet:
				if v < snapshotVersionV5 || g != nil {
					d.fail("unknown waiter grant kind")
					break
				}
				w.ttl = d.duration("waiter ttl", MaxTTL, ErrTTLRange)
				if d.err == nil && w.ttl < MinTTL {
					d.failLimit("waiter ttl", ErrTTLRange)
				}
				w.set = &keySet{} // put together below, once its fields are read
			default:
				d.fail("unknown waiter grant kind")
			}
			if d.err == nil && j == 0 && hold == holdNone && w.set == nil {
				d.fail("reserved key whose head is not a multi-key waiter")
			}
			w.deadline = d.deadline("wait deadline", now, MaxWait)
			if v != snapshotVersionV1 {
				w.epoch = d.uvarint()
				if d.err == nil && w.epoch > epoch {
					d.fail("waiter epoch after the machine's")
				}
				if w.epoch != epoch {
					unclaimed++
				}
			}
			if v >= snapshotVersionV3 {
				w.meta = d.meta()
			}
			if g != nil && g.kind == KindRW {
				w.shared = d.flag("shared")
			}
			if d.err == nil && (w.owner == e.owner || e.waiters.find(w.owner) != nil || (g != nil && g.holders.find(w.owner) != nil)) {
				d.fail("owner queued twice or queued for a key it holds")
			}
			if d.err == nil && j == 0 && g != nil && g.fits(w.shared) {
				d.fail("head waiter fits its key but was not granted")
			}
			if w.set != nil && d.err == nil {
				s := sets[w.owner]
				switch {
				case s == nil:
					s = &keySet{owner: w.owner}
					sets[w.owner] = s
				case s.waits == nil:
					d.fail("owner in two multi-key acquisitions")
				case s.waits[0].ttl != w.ttl || s.waits[0].deadline != w.deadline || s.waits[0].epoch != w.epoch || s.waits[0].meta != w.meta:
					d.fail("keys of one multi-key waiter disagree")
				}
				w.set = s
				s.entries = append(s.entries, e)
				s.waits = append(s.waits, w)
			}
			if d.err != nil {
				return d.err
			}
			e.waiters.pushBack(w)
			w.session.ref(e.key)
			nWaiters++
			heap = append(heap, deadline{at: w.deadline, e: e, w: w})
		}
		keys[e.key] = e
		sorted = append(sorted, e)
	}
	d.end()
	if d.err != nil {
		return d.err
	}
	for id := range released.byID {
		e := keys[id.key]
		if id.key != "" && e != nil && (e.owner == id.owner || e.waiters.find(id.owner) != nil || e.group() != nil && e.group().holders.find(id.owner) != nil) {
			return fmt.Errorf("%w: a release remembered for an owner that holds or waits for the key again", ErrBadEncoding)
		}
	}
	slices.Sort(tokens)
	for i := 1; i < len(tokens); i++ {
		if tokens[i] == tokens[i-1] {
			return fmt.Errorf("%w: token %d granted twice", ErrBadEncoding, tokens[i])
		}
	}

	heap.init() // sets the entries' indices, which tell a lock-delay from a vacant key
	for _, s := range sets {
		if len(s.entries) > MaxKeys {
			return fmt.Errorf("%w: a multi-key acquisition of more than %d keys", ErrBadEncoding, MaxKeys)
		}
		if s.waits != nil && s.ready() {
			return fmt.Errorf("%w: a multi-key waiter could have been granted", ErrBadEncoding)
		}
	}
	if m.freezer != nil {
		m.freezer.err = errFreezeRestored
		m.freezer.Stop()
	}
	m.now, m.lastToken, m.keys, m.order, m.deadlines = now, lastToken, keys, buildKeyOrder(sorted), heap
	m.epoch, m.unclaimed, m.nWaiters, m.sessions, m.sets = epoch, unclaimed, nWaiters, sessions, sets
	m.extraHolds = extraHolds(sorted)
	m.released = released
	return nil
}

// releases reads the remembered releases: in the order applied, each
// within ReleaseMemory before now, none twice, and no destroy of a
// session that is live (its create would have forgotten it).
func (d *decoder) releases(now time.Duration, sessions map[Owner]*session) releases {
	var r releases
	n := d.uvarint()
	if d.err == nil && (n > MaxRememberedReleases || n > uint64(len(d.b)-d.off)/minReleaseRecord) {
		d.fail("release count out of range")
	}
	prev := time.Duration(0)
	for i := uint64(0); i < n && d.err == nil; i++ {
		var id releaseID
		id.key = d.text("released key", MaxKeyLen, ErrKeyTooLong)
		id.owner = d.owner()
		at := d.duration("release time", now, ErrStampRange)
		switch {
		case d.err != nil:
		case at < prev || at+ReleaseMemory <= now:
			d.fail("release times out of order or forgotten by now")
		case r.recalls(id):
			d.fail("a release remembered twice")
		case id.key == "" && sessions[id.owner] != nil:
			d.fail("a destroy remembered for a live session")
		default:
			r.remember(id, at)
		}
		prev = at
	}
	return r
}

// group reads a semaphore or read/write key's holders (after its holder
// kind) into e.
func (d *decoder) group(e *entry, now time.Duration, lastToken uint64, sessionOf func(string) *session) *group {
	g := &group{kind: Kind(d.byte())}
	limit := d.uvarint()
	g.exclusive = d.flag("exclusive")
	n := d.uvarint()
	if d.err != nil {
		return g
	}
	most := uint64(MaxHolders)
	switch {
	case g.kind == KindSemaphore && limit >= 1 && limit <= MaxHolders && !g.exclusive:
		g.limit, most = int(limit), limit
	case g.kind == KindRW && limit == 0:
		if g.exclusive {
			most = 1
		}
	default:
		d.fail("bad kind, limit or mode")
		return g
	}
	if n == 0 || n > most || n > uint64(len(d.b)-d.off)/(ownerLen+3) {
		d.fail("holder count out of range")
		return g
	}
	e.extra = &holderExtra{group: g}
	g.holders.byOwner = make(map[Owner]*waiter, n)
	var prev uint64
	for i := uint64(0); i < n && d.err == nil; i++ {
		h := &waiter{owner: d.owner(), held: true, index: -1, shared: g.kind == KindRW && !g.exclusive}
		h.token = d.uvarint()
		if d.err == nil && (h.token <= prev || h.token > lastToken) {
			d.fail("holder tokens not ascending within 1..last token")
		}
		prev = h.token
		switch d.byte() {
		case holdLease:
			h.deadline = d.deadline("lease end", now, MaxTTL)
			h.meta = d.meta()
		case holdSession:
			h.session = sessionOf("holder")
			h.meta = d.meta()
		case holdDelayed:
			h.delayed = true
			h.deadline = d.deadline("lock delay end", now, MaxLockDelay)
			if h.owner != delayedSlotOwner(h.token) {
				// A delayed slot is nobody's: kept under its token's owner
				// (see endGroupSession), which this version always writes.
				d.fail("lock-delay slot not under its token's owner")
			}
		default:
			d.fail("unknown holder kind")
		}
		if d.err == nil && g.holders.find(h.owner) != nil {
			d.fail("owner holds a key twice")
		}
		if d.err == nil {
			g.holders.pushBack(h)
		}
	}
	return g
}

// flag reads a byte that must be 0 or 1.
func (d *decoder) flag(field string) bool {
	v := d.byte()
	if d.err == nil && v > 1 {
		d.fail(field + " flag not 0 or 1")
	}
	return v == 1
}

// meta reads a holder's metadata.
func (d *decoder) meta() string { return d.text("meta", MaxMetaLen, ErrMetaTooLong) }

// deadline reads a moment that must still be pending at now and no further
// than limit beyond it: a machine never keeps a lease or wait that is over,
// nor one longer than the limits allow.
func (d *decoder) deadline(field string, now, limit time.Duration) time.Duration {
	v := d.uvarint()
	if d.err == nil && (v <= uint64(now) || v > uint64(now+limit)) {
		d.fail(field + " not within the limit after now")
		return 0
	}
	return time.Duration(v)
}
