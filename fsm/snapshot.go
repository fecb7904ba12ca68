package fsm

import (
	"fmt"
	"slices"
	"time"
)

// Snapshot format, version 2 (varints as in the command encoding):
//
//	snapshot := version now lastToken epoch count key*
//	key      := length bytes owner token expiresAt waiters waiter*
//	waiter   := owner ttl deadline epoch
//
// Keys are in ascending byte order and waiters in queue order, so equal
// states give equal bytes. Version 1, written before claims existed, has
// no epochs; Restore still reads it, as epoch 0 with every waiter claimed.
const (
	snapshotVersion   = 2
	snapshotVersionV1 = 1
)

// Shortest encodings of a key record (1-byte key, no waiters) and of a
// waiter record; they bound counts read from a snapshot before allocating.
const (
	minKeyRecord    = 1 + 1 + ownerLen + 1 + 1 + 1
	minWaiterRecord = ownerLen + 1 + 1 // version 1; version 2 adds one byte
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
	keys      []frozenKey
	waiters   []frozenWaiter // every key's waiters, key after key, each in queue order
}

type frozenKey struct {
	key       string // strings are immutable: sharing it copies nothing
	owner     Owner
	token     uint64
	expiresAt time.Duration
	nWaiters  int
}

type frozenWaiter struct {
	owner         Owner
	ttl, deadline time.Duration
	epoch         uint64
}

// freeze copies the whole state.
func (m *Machine) freeze() *frozen {
	f := &frozen{now: m.now, lastToken: m.lastToken, epoch: m.epoch, keys: make([]frozenKey, 0, len(m.keys))}
	m.order.ascend("", func(e *entry) bool {
		f.appendEntry(e)
		return true
	})
	return f
}

// Size is the length of the encoding, exactly.
func (f *frozen) size() int {
	size := 1 + uvarintLen(uint64(f.now)) + uvarintLen(f.lastToken) + uvarintLen(f.epoch) + uvarintLen(uint64(len(f.keys)))
	for i := range f.keys {
		k := &f.keys[i]
		size += uvarintLen(uint64(len(k.key))) + len(k.key) + ownerLen + uvarintLen(k.token) +
			uvarintLen(uint64(k.expiresAt)) + uvarintLen(uint64(k.nWaiters))
	}
	for i := range f.waiters {
		w := &f.waiters[i]
		size += ownerLen + uvarintLen(uint64(w.ttl)) + uvarintLen(uint64(w.deadline)) + uvarintLen(w.epoch)
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
	return appendSnapshotHeader(b, f.now, f.lastToken, f.epoch, len(f.keys))
}

func appendSnapshotHeader(b []byte, now time.Duration, lastToken, epoch uint64, count int) []byte {
	b = append(b, snapshotVersion)
	b = appendUvarint(b, uint64(now))
	b = appendUvarint(b, lastToken)
	b = appendUvarint(b, epoch)
	return appendUvarint(b, uint64(count))
}

// appendKey appends key i's record; its waiters start at f.waiters[next].
// It returns where the next key's waiters start.
func (f *frozen) appendKey(b []byte, i, next int) ([]byte, int) {
	k := &f.keys[i]
	b = appendUvarint(b, uint64(len(k.key)))
	b = append(b, k.key...)
	b = append(b, k.owner[:]...)
	b = appendUvarint(b, k.token)
	b = appendUvarint(b, uint64(k.expiresAt))
	b = appendUvarint(b, uint64(k.nWaiters))
	for _, w := range f.waiters[next : next+k.nWaiters] {
		b = append(b, w.owner[:]...)
		b = appendUvarint(b, uint64(w.ttl))
		b = appendUvarint(b, uint64(w.deadline))
		b = appendUvarint(b, w.epoch)
	}
	return b, next + k.nWaiters
}

// Restore replaces the state with a snapshot's. It checks everything a
// machine could not have produced (limits, order, duplicates, leases and
// deadlines already past, tokens beyond the counter) and returns an error
// wrapping ErrBadEncoding or ErrBadVersion; on error the state is unchanged.
// The observer is kept.
func (m *Machine) Restore(b []byte) error {
	d := decoder{b: b}
	v := d.byte()
	if d.err == nil && v != snapshotVersion && v != snapshotVersionV1 {
		return fmt.Errorf("%w: snapshot version %d", ErrBadVersion, v)
	}
	now := d.duration("now", MaxStamp, ErrStampRange)
	lastToken := d.uvarint()
	var epoch uint64
	minWaiter := uint64(minWaiterRecord)
	if v == snapshotVersion {
		epoch = d.uvarint()
		minWaiter++
	}
	unclaimed := 0
	n := d.uvarint()
	if d.err == nil && n > uint64(len(b)-d.off)/minKeyRecord {
		d.fail("key count exceeds its bytes")
	}
	if d.err != nil {
		return d.err
	}

	keys := make(map[string]*entry, n)
	sorted := make([]*entry, 0, n) // the key order's input, already in order
	heap := make(deadlines, 0, n)
	tokens := make([]uint64, 0, n)
	prev := ""
	for i := uint64(0); i < n; i++ {
		e := &entry{}
		e.key = d.key()
		if d.err == nil && i > 0 && e.key <= prev {
			d.fail("keys not in strictly ascending order")
		}
		prev = e.key
		e.owner = d.owner()
		e.token = d.uvarint()
		if d.err == nil && (e.token == 0 || e.token > lastToken) {
			d.fail("token outside 1..last token")
		}
		e.expiresAt = d.deadline("lease end", now, MaxTTL)
		waiters := d.uvarint()
		if d.err == nil && (waiters > MaxWaiters || waiters > uint64(len(b)-d.off)/minWaiter) {
			d.fail("waiter count out of range")
		}
		if d.err != nil {
			return d.err
		}
		tokens = append(tokens, e.token)
		heap = append(heap, deadline{at: e.expiresAt, e: e})
		if waiters > 0 {
			e.waiters = &queue{byOwner: make(map[Owner]*waiter, waiters)}
		}
		for j := uint64(0); j < waiters; j++ {
			w := &waiter{owner: d.owner()}
			ttl := d.duration("waiter ttl", MaxTTL, ErrTTLRange)
			if d.err == nil && ttl < MinTTL {
				d.failLimit("waiter ttl", ErrTTLRange)
			}
			w.ttl = ttl
			w.deadline = d.deadline("wait deadline", now, MaxWait)
			if v == snapshotVersion {
				w.epoch = d.uvarint()
				if d.err == nil && w.epoch > epoch {
					d.fail("waiter epoch after the machine's")
				}
				if w.epoch != epoch {
					unclaimed++
				}
			}
			if d.err == nil && (w.owner == e.owner || e.waiters.find(w.owner) != nil) {
				d.fail("owner queued twice or queued for a key it holds")
			}
			if d.err != nil {
				return d.err
			}
			e.waiters.pushBack(w)
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
	m.epoch, m.unclaimed = epoch, unclaimed
	return nil
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
