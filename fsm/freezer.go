package fsm

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// A Freezer copies the machine's state as it was when StartFreeze was
// called, a chunk of keys at a time, while Apply goes on between chunks: a
// snapshot of a million keys then holds applies up for a chunk's copy at a
// time, never for the whole state. It produces exactly Snapshot's bytes as
// of the start (SnapshotIn's, for StartFreezeIn).
//
// How: the machine tells the Freezer before it changes, adds or removes a
// key the Freezer has not copied yet, and the Freezer keeps that key's
// state from before the change (a pre-image), once. Copying walks the keys
// in order from where the last chunk ended, taking a key's pre-image when
// it has one, skipping keys added since the start, and putting back, in
// order, keys removed since the start. Keys behind the cursor are copied
// already, so their changes are of no interest.
//
// StartFreeze, Next and Stop must be serialized with Apply (the machine's
// caller holds its lock for them); Flush must be called between Next calls,
// outside that lock. A Restore while a Freezer runs makes its next Next fail.
type Freezer struct {
	m        *Machine
	version  byte // the snapshot version it writes
	now      time.Duration
	token    uint64
	epoch    uint64
	sessions []frozenSession // every session at the start, copied whole
	releases []frozenRelease // likewise the remembered releases
	count    int             // keys at the start: the snapshot's key count
	cursor   string          // every key up to it is copied ("": none yet; no key is empty)
	emitted  int
	pre      map[string]preImage // keys beyond the cursor changed since the start
	gone     []string            // keys of pre, in order, that existed at the start and are absent now
	pending  frozen              // copied, not yet flushed
	wroteHdr bool
	buf      []byte // Flush's encoding buffer
	err      error
}

// preImage is a key's state at the start of the freeze; existed is false
// for a key added since.
type preImage struct {
	existed bool
	key     frozenKey
	waiters []frozenWaiter
	slots   []frozenSlot
}

var errFreezeRestored = errors.New("fsm: the state was restored while a snapshot was being copied")

// StartFreeze begins copying the state as it is now, to be written in the
// latest snapshot version (Snapshot's bytes). At most one Freezer runs at a
// time: starting one stops the previous.
func (m *Machine) StartFreeze() *Freezer { return m.startFreeze(snapshotVersion) }

// StartFreezeIn is StartFreeze writing the given snapshot version
// (SnapshotIn's bytes); a version SnapshotIn refuses is refused the same
// way, and nothing is started.
func (m *Machine) StartFreezeIn(version int) (*Freezer, error) {
	if err := checkWritable(version); err != nil {
		return nil, err
	}
	return m.startFreeze(byte(version)), nil
}

func (m *Machine) startFreeze(version byte) *Freezer {
	if m.freezer != nil {
		m.freezer.Stop()
	}
	fz := &Freezer{m: m, version: version, now: m.now, token: m.lastToken, epoch: m.epoch, sessions: m.freezeSessions(), releases: m.freezeReleases(), count: m.keys.len(), pre: make(map[string]preImage)}
	m.freezer = fz
	return fz
}

// Stop detaches the Freezer from the machine; it copies nothing more.
func (fz *Freezer) Stop() {
	if fz.m != nil && fz.m.freezer == fz {
		fz.m.freezer = nil
	}
	fz.m = nil
}

// touch records e's state before the machine changes or removes it.
func (fz *Freezer) touch(e *entry) {
	if e.key() <= fz.cursor {
		return
	}
	if _, ok := fz.pre[e.key()]; ok {
		return
	}
	var one frozen
	one.appendEntry(&fz.m.moreTable, e)
	fz.pre[e.key()] = preImage{existed: true, key: one.keys[0], waiters: one.waiters, slots: one.slots}
}

// touchNew records that key is being added: absent at the start, or
// removed since and now back (its pre-image stays).
func (fz *Freezer) touchNew(key string) {
	if key <= fz.cursor {
		return
	}
	if _, ok := fz.pre[key]; !ok {
		fz.pre[key] = preImage{}
		return
	}
	if i, found := slices.BinarySearch(fz.gone, key); found {
		fz.gone = slices.Delete(fz.gone, i, i+1)
	}
}

// removing records that key, already touched, is leaving the machine.
func (fz *Freezer) removing(key string) {
	if key <= fz.cursor || !fz.pre[key].existed {
		return
	}
	if i, found := slices.BinarySearch(fz.gone, key); !found {
		fz.gone = slices.Insert(fz.gone, i, key)
	}
}

// Next copies up to max more keys into the pending chunk and reports
// whether every key is copied. An error (the state was restored meanwhile,
// or the copy does not add up) means the snapshot must be abandoned.
func (fz *Freezer) Next(max int) (done bool, err error) {
	if fz.err != nil {
		return false, fz.err
	}
	if fz.m == nil {
		return false, errors.New("fsm: Next on a stopped Freezer")
	}
	// Keys removed since the start are put back, in order, between the
	// keys the walk finds.
	copied := 0
	emit := func(key string, live *entry) {
		if p, ok := fz.pre[key]; ok {
			delete(fz.pre, key)
			if !p.existed {
				return // added since the start
			}
			fz.pending.keys = append(fz.pending.keys, p.key)
			fz.pending.waiters = append(fz.pending.waiters, p.waiters...)
			fz.pending.slots = append(fz.pending.slots, p.slots...)
		} else {
			fz.pending.appendEntry(&fz.m.moreTable, live)
		}
		fz.cursor = key
		fz.emitted++
		copied++
	}
	fz.m.order.ascend(fz.cursor, func(e *entry) bool {
		if e.key() == fz.cursor {
			return true // ascend starts at the cursor itself
		}
		for len(fz.gone) > 0 && fz.gone[0] < e.key() && copied < max {
			emit(fz.gone[0], nil)
			fz.gone = fz.gone[1:]
		}
		if copied >= max {
			return false
		}
		emit(e.key(), e)
		return copied < max
	})
	for len(fz.gone) > 0 && copied < max {
		emit(fz.gone[0], nil)
		fz.gone = fz.gone[1:]
	}
	if copied == max {
		return false, nil
	}
	// Nothing left: what remains recorded can only be keys added since the
	// start (a removed key would have been put back above).
	fz.Stop()
	if fz.emitted != fz.count {
		fz.err = fmt.Errorf("fsm: snapshot copy found %d keys, the state had %d", fz.emitted, fz.count)
		return false, fz.err
	}
	return true, nil
}

// Flush writes what Next copied since the last Flush (after the header, the
// first time) in Snapshot's encoding.
func (fz *Freezer) Flush(w io.Writer) error {
	b := fz.buf[:0]
	defer func() { fz.buf = b[:0] }() // kept for the next chunk
	if !fz.wroteHdr {
		b = appendSnapshotHeader(b, fz.version, fz.now, fz.token, fz.epoch, fz.sessions, fz.releases, fz.count)
		fz.wroteHdr = true
	}
	var c frozenCursor
	for i := range fz.pending.keys {
		b = fz.pending.appendKey(b, i, &c)
	}
	fz.pending.keys, fz.pending.waiters, fz.pending.slots = fz.pending.keys[:0], fz.pending.waiters[:0], fz.pending.slots[:0]
	if len(b) == 0 {
		return nil
	}
	_, err := w.Write(b)
	return err
}

// appendEntry copies e into f.
func (f *frozen) appendEntry(t *moreTable, e *entry) {
	k := frozenKey{key: e.key(), owner: e.owner, token: e.token, expiresAt: e.expiresAt, meta: t.metadata(e), reserved: t.vacant(e), multi: t.set(e) != nil}
	if s := t.sess(e); s != nil {
		k.session = s.id
	}
	if g := t.group(e); g != nil {
		k.kind, k.limit, k.exclusive, k.nSlots = g.kind, g.limit, g.exclusive, g.holders.len()
		for h := g.holders.head; h != nil; h = h.next {
			fh := frozenSlot{owner: h.owner, token: h.token, expiresAt: h.deadline, meta: h.meta, delayed: h.delayed}
			if h.session != nil {
				fh.session = h.session.id
			}
			f.slots = append(f.slots, fh)
		}
	}
	if t.waitQueue(e) != nil {
		for w := t.waitQueue(e).head; w != nil; w = w.next {
			fw := frozenWaiter{owner: w.owner, ttl: w.ttl, deadline: w.deadline, epoch: w.epoch, meta: w.meta, shared: w.shared, multi: w.set != nil}
			if w.session != nil {
				fw.session = w.session.id
			}
			f.waiters = append(f.waiters, fw)
			k.nWaiters++
		}
	}
	f.keys = append(f.keys, k)
}
