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
	f := &frozen{version: version, now: m.now, lastToken: m.lastToken, epoch: m.epoch, sessions: m.freezeSessions(), releases: m.freezeReleases(), keys: make([]frozenKey, 0, m.keys.len())}
	m.order.ascend("", func(e *entry) bool {
		f.appendEntry(&m.moreTable, e)
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

// appendFlag appends a bool as the byte 0 or 1 (decoder.flag reads it).
func appendFlag(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
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
		b = appendFlag(b, k.exclusive)
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
			b = appendFlag(b, w.shared)
		}
	}
	next.waiter += k.nWaiters
	return b
}
