package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"time"
)

// Snapshot format, version 3 (varints as in the command encoding):
//
//	snapshot := version now lastToken epoch sessions session* count key*
//	session  := id ttl expiresAt lockDelay
//	key      := length bytes holder waiters waiter*
//	holder   := 0 owner token expiresAt meta     (a lease)
//	          | 1 owner token session meta       (bound to a session)
//	          | 2 token expiresAt                (a lock-delay until expiresAt)
//	waiter   := owner grant deadline epoch meta
//	grant    := 0 ttl | 1 session
//	meta     := length bytes
//
// Sessions are in ascending ID order, keys in ascending byte order and
// waiters in queue order, so equal states give equal bytes. Version 2,
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
	snapshotVersion   = 3
	snapshotVersionV2 = 2
	snapshotVersionV1 = 1
)

// Holder and grant kinds in a version 3 snapshot.
const (
	holdLease   = 0
	holdSession = 1
	holdDelayed = 2
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
)

// Snapshot returns the machine's whole state, deterministically encoded and versioned.
func (m *Machine) Snapshot() []byte { return m.freeze().appendTo(nil) }

// frozen is keys and waiters copied out of a machine, in the order and with
// the fields the snapshot encoding needs: the whole state (freeze, for
// Snapshot) or a Freezer's chunk.
type frozen struct {
	now       time.Duration
	lastToken uint64
	epoch     uint64
	sessions  []frozenSession // whole-state copies only; a Freezer keeps its own
	keys      []frozenKey
	waiters   []frozenWaiter // every key's waiters, key after key, each in queue order
}

type frozenSession struct {
	id                        Owner
	ttl, expiresAt, lockDelay time.Duration
}

type frozenKey struct {
	key       string // strings are immutable: sharing it copies nothing
	owner     Owner  // zero: a lock-delay
	token     uint64
	expiresAt time.Duration // a lease's or lock-delay's end; unused when session is set
	session   Owner         // the session the holder is bound to, or zero
	meta      string
	nWaiters  int
}

type frozenWaiter struct {
	owner         Owner
	ttl, deadline time.Duration
	epoch         uint64
	session       Owner
	meta          string
}

// freeze copies the whole state.
func (m *Machine) freeze() *frozen {
	f := &frozen{now: m.now, lastToken: m.lastToken, epoch: m.epoch, sessions: m.freezeSessions(), keys: make([]frozenKey, 0, len(m.keys))}
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

// Size is the length of the encoding, exactly.
func (f *frozen) size() int {
	size := len(appendSnapshotHeader(nil, f.now, f.lastToken, f.epoch, f.sessions, len(f.keys)))
	for i := range f.keys {
		k := &f.keys[i]
		size += uvarintLen(uint64(len(k.key))) + len(k.key) + 1 + uvarintLen(k.token) + uvarintLen(uint64(k.nWaiters))
		switch {
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
	return size
}

// appendTo appends the snapshot encoding to b. Keys are already in byte
// order, so equal states give equal bytes with no sort.
func (f *frozen) appendTo(b []byte) []byte {
	b = slices.Grow(b, f.size())
	b = f.appendHeader(b)
	next := 0
	for i := range f.keys {
		b, next = f.appendKey(b, i, next)
	}
	return b
}

func (f *frozen) appendHeader(b []byte) []byte {
	return appendSnapshotHeader(b, f.now, f.lastToken, f.epoch, f.sessions, len(f.keys))
}

// appendSnapshotHeader appends everything before the keys: the sessions
// too, which a Freezer copies whole when it starts.
func appendSnapshotHeader(b []byte, now time.Duration, lastToken, epoch uint64, sessions []frozenSession, count int) []byte {
	b = append(b, snapshotVersion)
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
	return appendUvarint(b, uint64(count))
}

func appendMeta(b []byte, meta string) []byte {
	b = appendUvarint(b, uint64(len(meta)))
	return append(b, meta...)
}

// appendKey appends key i's record; its waiters start at f.waiters[next].
// It returns where the next key's waiters start.
func (f *frozen) appendKey(b []byte, i, next int) ([]byte, int) {
	k := &f.keys[i]
	b = appendUvarint(b, uint64(len(k.key)))
	b = append(b, k.key...)
	switch {
	case k.owner.IsZero():
		b = append(b, holdDelayed)
		b = appendUvarint(b, k.token)
		b = appendUvarint(b, uint64(k.expiresAt))
	case k.session.IsZero():
		b = append(b, holdLease)
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
	for _, w := range f.waiters[next : next+k.nWaiters] {
		b = append(b, w.owner[:]...)
		if w.session.IsZero() {
			b = append(b, holdLease)
			b = appendUvarint(b, uint64(w.ttl))
		} else {
			b = append(b, holdSession)
			b = append(b, w.session[:]...)
		}
		b = appendUvarint(b, uint64(w.deadline))
		b = appendUvarint(b, w.epoch)
		b = appendMeta(b, w.meta)
	}
	return b, next + k.nWaiters
}

// Restore replaces the state with a snapshot's. It checks everything a
// machine could not have produced (limits, order, duplicates, leases and
// deadlines already past, tokens beyond the counter, holders bound to
// sessions that do not exist) and returns an error wrapping ErrBadEncoding
// or ErrBadVersion; on error the state is unchanged. The observer is kept.
func (m *Machine) Restore(b []byte) error {
	d := decoder{b: b}
	v := d.byte()
	if d.err == nil && v != snapshotVersion && v != snapshotVersionV2 && v != snapshotVersionV1 {
		return fmt.Errorf("%w: snapshot version %d", ErrBadVersion, v)
	}
	now := d.duration("now", MaxStamp, ErrStampRange)
	lastToken := d.uvarint()
	var epoch uint64
	minWaiter, minKey := uint64(minWaiterRecord), uint64(minKeyRecord)
	switch v {
	case snapshotVersion:
		epoch = d.uvarint()
		minWaiter, minKey = minWaiterRecordV3, minKeyRecordV3
	case snapshotVersionV2:
		epoch = d.uvarint()
		minWaiter++
	}
	sessions := make(map[Owner]*session)
	var heap deadlines
	if v == snapshotVersion {
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
	sorted := make([]*entry, 0, n) // the key order's input, already in order
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
		if v == snapshotVersion {
			hold = d.byte()
		}
		switch hold {
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
		default:
			d.fail("unknown holder kind")
		}
		if d.err == nil && (e.token == 0 || e.token > lastToken) {
			d.fail("token outside 1..last token")
		}
		if v == snapshotVersion && hold != holdDelayed {
			if meta := d.meta(); meta != "" {
				e.bind(e.sess(), meta)
			}
		}
		waiters := d.uvarint()
		if d.err == nil && (waiters > MaxWaiters || waiters > uint64(len(b)-d.off)/minWaiter) {
			d.fail("waiter count out of range")
		}
		if d.err != nil {
			return d.err
		}
		tokens = append(tokens, e.token)
		if s := e.sess(); s == nil {
			heap = append(heap, deadline{at: e.expiresAt, e: e})
		} else {
			s.ref(e.key)
		}
		if waiters > 0 {
			e.waiters = &queue{byOwner: make(map[Owner]*waiter, waiters)}
		}
		for j := uint64(0); j < waiters; j++ {
			w := &waiter{owner: d.owner()}
			grant := byte(holdLease)
			if v == snapshotVersion {
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
			default:
				d.fail("unknown waiter grant kind")
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
			if v == snapshotVersion {
				w.meta = d.meta()
			}
			if d.err == nil && (w.owner == e.owner || e.waiters.find(w.owner) != nil) {
				d.fail("owner queued twice or queued for a key it holds")
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
	slices.Sort(tokens)
	for i := 1; i < len(tokens); i++ {
		if tokens[i] == tokens[i-1] {
			return fmt.Errorf("%w: token %d granted twice", ErrBadEncoding, tokens[i])
		}
	}

	heap.init()
	if m.freezer != nil {
		m.freezer.err = errFreezeRestored
		m.freezer.Stop()
	}
	m.now, m.lastToken, m.keys, m.order, m.deadlines = now, lastToken, keys, buildKeyOrder(sorted), heap
	m.epoch, m.unclaimed, m.nWaiters, m.sessions = epoch, unclaimed, nWaiters, sessions
	return nil
}

// meta reads a holder's metadata.
func (d *decoder) meta() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	switch {
	case n > MaxMetaLen:
		d.failLimit("meta", ErrMetaTooLong)
		return ""
	case n > uint64(len(d.b)-d.off):
		d.fail("truncated meta")
		return ""
	}
	meta := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return meta
}

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
