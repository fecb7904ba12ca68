package fsm

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"io"
	"slices"
	"time"
)

// Restore replaces the state with a snapshot's. It checks everything a
// machine could not have produced (limits, order, duplicates, leases and
// deadlines already past, tokens beyond the counter, holders bound to
// sessions that do not exist) and returns an error wrapping ErrBadEncoding
// or ErrBadVersion; on error the state is unchanged. The observer is kept.
func (m *Machine) Restore(b []byte) error {
	return m.restore(&snapshotReader{d: decoder{b: b}})
}

// RestoreFrom is Restore reading the snapshot from src, which holds size
// bytes: through a window of restoreWindow bytes instead of a buffer of the
// whole snapshot, so that a restore neither waits for the whole snapshot
// to be read nor touches as much fresh memory again as the snapshot's size
// (43 bytes a plain lock; at millions of locks, page faults cost as much
// as decoding). A snapshot longer or shorter than size is refused, as a
// truncated one or one with trailing bytes is (ErrBadEncoding); an error
// reading src is returned, wrapped. src is read to size bytes, and one more
// to find that it ends there.
func (m *Machine) RestoreFrom(src io.Reader, size int64) error {
	if size < 0 {
		return fmt.Errorf("%w: snapshot of %d bytes", ErrBadEncoding, size)
	}
	return m.restore(&snapshotReader{src: &window{r: src, left: size, buf: make([]byte, min(size, restoreWindow))}})
}

func (m *Machine) restore(r *snapshotReader) error {
	r.sessions = make(map[Owner]*session)
	err := r.read()
	if err == nil {
		err = r.checkWhole()
	}
	r.waitKeys()
	if err != nil {
		return err
	}
	if m.freezer != nil {
		m.freezer.err = errFreezeRestored
		m.freezer.Stop()
	}
	m.now, m.lastToken, m.keys, m.order, m.deadlines = r.now, r.lastToken, r.keys, r.order, r.heap
	m.epoch, m.unclaimed, m.nWaiters, m.sessions, m.sets = r.epoch, r.unclaimed, r.nWaiters, r.sessions, r.sets
	m.extraHolds = r.extraHolds
	m.released = r.released
	m.moreTable = r.moreTable
	return nil
}

// snapshotReader is the state a snapshot is read into, apart from any
// machine, so that a snapshot refused half-way changes nothing. Records are
// checked as they are read; checkWhole checks what needs all of them.
type snapshotReader struct {
	d         decoder
	src       *window // nil: d.b is the whole snapshot
	now       time.Duration
	lastToken uint64
	epoch     uint64
	sessions  map[Owner]*session
	released  releases
	heap      deadlines
	keys      keyIndex
	order     keyOrder          // built from the full leaves readKeys fills
	keysDone  chan struct{}     // closed once keys is complete (readKeys fills it on another goroutine)
	sets      map[Owner]*keySet // every multi-key acquisition by owner
	// Every grant's token, to find one granted twice: as bits (tokenBits,
	// when the counter is not much more than the keys: at most 8 bytes
	// of bits a key), else listed (tokens). twiceMin is the smallest
	// token the bits saw twice, 0 for none.
	moreTable  // the entries' extras and queues, the machine's once the snapshot is whole
	tokenBits  []uint64
	tokens     []uint64
	twiceMin   uint64
	extraHolds int // semaphore and read/write holds beyond each key's first
	unclaimed  int // waiters whose epoch is not the machine's
	nWaiters   int
}

// noteToken notes a grant's token, one of 1..lastToken (read checks).
func (r *snapshotReader) noteToken(t uint64) {
	if r.tokenBits == nil {
		r.tokens = append(r.tokens, t)
		return
	}
	if t > r.lastToken {
		return // never: read fails such a token first
	}
	bit := uint64(1) << (t % 64)
	if r.tokenBits[t/64]&bit != 0 && (r.twiceMin == 0 || t < r.twiceMin) {
		r.twiceMin = t // every repeat is seen at its second grant: the least seen is the least repeated
	}
	r.tokenBits[t/64] |= bit
}

// window is the part of a snapshot read from a stream (RestoreFrom) that
// the decoder reads from: r is read into buf as the decoder needs more.
type window struct {
	r    io.Reader
	buf  []byte
	left int64 // bytes of the snapshot not read from r yet
}

// restoreWindow is the most of a snapshot RestoreFrom holds at once (a
// variable for the tests, which slide a smaller one); maxRecordPart bounds
// what the reader decodes between two calls of fill (a key's name, holder
// and metadata; one waiter; one group holder; one session; one release:
// each at most about 1.6 KiB), and the window must hold more.
var restoreWindow int64 = 1 << 20

const maxRecordPart = 4096

// fill makes sure that the decoder's bytes hold the next need bytes of the
// snapshot (need at most maxRecordPart), or all that is left of it: it
// moves what is left of the window to its front and reads more behind it.
// A stream that ends before its size is a truncated snapshot.
func (r *snapshotReader) fill(need int) {
	w, d := r.src, &r.d
	if w == nil || len(d.b)-d.off >= need || w.left == 0 || d.err != nil {
		return
	}
	kept := copy(w.buf, d.b[d.off:])
	d.base += int64(d.off)
	n, err := io.ReadFull(w.r, w.buf[kept:kept+int(min(int64(len(w.buf)-kept), w.left))])
	w.left -= int64(n)
	d.b, d.off = w.buf[:kept+n], 0
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		d.off = len(d.b) // past what there is: the reads that follow fail
		d.fail("truncated: the stream ended before the snapshot's size")
	case err != nil:
		d.err = fmt.Errorf("fsm: reading snapshot: %w", err)
	}
}

// remaining is how many bytes of the snapshot are left to decode: what
// bounds a count read before allocating.
func (r *snapshotReader) remaining() uint64 {
	n := uint64(len(r.d.b) - r.d.off)
	if r.src != nil {
		n += uint64(r.src.left)
	}
	return n
}

// end refuses bytes after the last record: in the window, still to be read
// from the stream by its size, or beyond its size.
func (r *snapshotReader) end() {
	d := &r.d
	if d.err != nil {
		return
	}
	if r.remaining() != 0 {
		d.fail("trailing bytes")
		return
	}
	if r.src != nil {
		var one [1]byte
		n, err := io.ReadFull(r.src.r, one[:])
		switch {
		case n > 0:
			d.fail("trailing bytes: the stream goes on past the snapshot's size")
		case err != io.EOF:
			d.err = fmt.Errorf("fsm: reading snapshot: %w", err)
		}
	}
}

// read reads what every version starts with (version, now, last token),
// then the rest as that version writes it, to the last byte.
func (r *snapshotReader) read() error {
	d := &r.d
	r.fill(maxRecordPart)
	v := d.byte()
	if d.err == nil && (v < snapshotVersionV1 || v > snapshotVersion) {
		return fmt.Errorf("%w: snapshot version %d", ErrBadVersion, v)
	}
	r.now = d.duration("now", MaxStamp, ErrStampRange)
	r.lastToken = d.uvarint()
	if d.err != nil {
		return d.err
	}
	var err error
	switch v {
	case snapshotVersionV1:
		err = r.readV1()
	case snapshotVersionV2:
		err = r.readV2()
	case snapshotVersionV3:
		err = r.readV3(&keyFormatV3)
	case snapshotVersionV4:
		err = r.readV3(&keyFormatV4)
	case snapshotVersionV5:
		err = r.readV3(&keyFormatV5)
	default: // snapshotVersion: the range is checked above
		err = r.readV6()
	}
	if err != nil {
		return err
	}
	r.end()
	return d.err
}

// Each version's layout after the version, now and last token; see the
// format at the top of snapshot.go.

// readV1: keys held by leases, and waiters without epochs (all claimed).
func (r *snapshotReader) readV1() error { return r.readKeys(&keyFormatV1) }

// readV2: version 1 with the epoch, of the machine and of each waiter.
func (r *snapshotReader) readV2() error {
	r.epoch = r.d.uvarint()
	return r.readKeys(&keyFormatV2)
}

// readV3: sessions, and kinds and metadata in the key records. Versions 4
// and 5 are laid out the same, with more kinds in their key records
// (keyFormatV4: semaphores and read/write keys; keyFormatV5: multi-key
// grants and waiters).
func (r *snapshotReader) readV3(keys *keyFormat) error {
	r.epoch = r.d.uvarint()
	r.readSessions()
	return r.readKeys(keys)
}

// readV6: version 5 with the remembered releases after the sessions.
func (r *snapshotReader) readV6() error {
	r.epoch = r.d.uvarint()
	r.readSessions()
	r.readReleases()
	return r.readKeys(&keyFormatV5)
}

// keyFormat is how a version writes its key records.
type keyFormat struct {
	// The shortest key and waiter records, which bound counts read
	// before allocating.
	minKey, minWaiter uint64
	epochs            bool // each waiter's epoch follows its deadline
	// kindsOf is the version whose holder and grant kinds the records
	// have (holder and grant read them); see kinds.
	kindsOf byte
}

// kinds reports whether the records have kinds (version 3 on): a holder
// kind byte before the holder, a grant kind byte after each waiter's
// owner, and holders' and waiters' metadata.
func (f *keyFormat) kinds() bool { return f.kindsOf >= snapshotVersionV3 }

var (
	keyFormatV1 = keyFormat{minKey: minKeyRecord, minWaiter: minWaiterRecord, kindsOf: snapshotVersionV1}
	keyFormatV2 = keyFormat{minKey: minKeyRecord, minWaiter: minWaiterRecord + 1, epochs: true, kindsOf: snapshotVersionV1}
	keyFormatV3 = keyFormat{minKey: minKeyRecordV3, minWaiter: minWaiterRecordV3, epochs: true, kindsOf: snapshotVersionV3}
	keyFormatV4 = keyFormat{minKey: minKeyRecordV3, minWaiter: minWaiterRecordV3, epochs: true, kindsOf: snapshotVersionV4}
	keyFormatV5 = keyFormat{minKey: minKeyRecordV3, minWaiter: minWaiterRecordV3, epochs: true, kindsOf: snapshotVersionV5}
)

// holder reads key e's holder after its kind (a lease where there are no
// kinds); for a semaphore or read/write key it returns the group. A switch,
// not a function in keyFormat, so that the reader stays on the stack.
func (r *snapshotReader) holder(f *keyFormat, e *entry, kind byte) *group {
	switch f.kindsOf {
	case snapshotVersionV1:
		return r.holderV1(e)
	case snapshotVersionV3:
		return r.holderV3(e, kind)
	case snapshotVersionV4:
		return r.holderV4(e, kind)
	default:
		return r.holderV5(e, kind)
	}
}

// grant reads waiter w's grant after its kind (a lease's TTL where there
// are no kinds); g is its key's group, if any.
func (r *snapshotReader) grant(f *keyFormat, w *waiter, g *group, kind byte) {
	switch f.kindsOf {
	case snapshotVersionV1:
		r.grantV1(w)
	case snapshotVersionV3, snapshotVersionV4:
		r.grantV3(w, kind)
	default:
		r.grantV5(w, g, kind)
	}
}

// holderV1 reads a version 1 or 2 holder: always a lease.
func (r *snapshotReader) holderV1(e *entry) *group {
	r.lease(e)
	return nil
}

// holderV3 reads a holder of the kinds version 3 has: a lease, a holder
// bound to a session, or a lock-delay.
func (r *snapshotReader) holderV3(e *entry, kind byte) *group {
	d := &r.d
	switch kind {
	case holdLease:
		r.lease(e)
	case holdSession:
		e.owner = d.owner()
		e.token = d.uvarint()
		r.bind(e, r.sessionOf("holder"), "")
	case holdDelayed:
		e.token = d.uvarint()
		e.expiresAt = d.deadline("lock delay end", r.now, MaxLockDelay)
	default:
		d.fail("unknown holder kind")
	}
	return nil
}

// holderV4 reads version 3's holders and a semaphore's or read/write
// key's holders, whose tokens and deadlines it notes.
func (r *snapshotReader) holderV4(e *entry, kind byte) *group {
	if kind != holdGroup {
		return r.holderV3(e, kind)
	}
	g := r.readGroup(e)
	r.extraHolds += max(g.holders.len()-1, 0)
	for h := g.holders.first(); h != nil; h = h.next {
		r.noteToken(h.token)
		if h.session == nil {
			r.heap.add(deadline{at: h.deadline, e: e, w: h})
		} else {
			h.session.ref(e.key())
		}
	}
	return g
}

// holderV5 reads version 4's holders, nobody (a key reserved for the
// multi-key waiter at its head), and one key of a multi-key grant.
func (r *snapshotReader) holderV5(e *entry, kind byte) *group {
	switch kind {
	case holdNone:
	case holdSet:
		r.lease(e)
	default:
		return r.holderV4(e, kind)
	}
	return nil
}

// lease reads a lease's holder: owner, token and the lease's end.
func (r *snapshotReader) lease(e *entry) {
	e.owner = r.d.owner()
	e.token = r.d.uvarint()
	e.expiresAt = r.d.deadline("lease end", r.now, MaxTTL)
}

// grantV1 reads a version 1 or 2 waiter's grant: always a lease's TTL.
func (r *snapshotReader) grantV1(w *waiter) { w.ttl = r.d.ttl("waiter ttl") }

// grantV3 reads a lease's TTL or the session the grant binds to.
func (r *snapshotReader) grantV3(w *waiter, kind byte) {
	switch kind {
	case holdLease:
		w.ttl = r.d.ttl("waiter ttl")
	case holdSession:
		w.session = r.sessionOf("waiter")
	default:
		r.d.fail("unknown waiter grant kind")
	}
}

// grantV5 reads version 3's grants and one key of a multi-key waiter,
// whose set readWaiter puts together.
func (r *snapshotReader) grantV5(w *waiter, g *group, kind byte) {
	if kind != grantSet {
		r.grantV3(w, kind)
		return
	}
	if g != nil {
		r.d.fail("unknown waiter grant kind")
		return
	}
	w.ttl = r.d.ttl("waiter ttl")
	w.set = &keySet{}
}

// readSessions reads the sessions, in ascending ID order.
func (r *snapshotReader) readSessions() {
	d := &r.d
	r.fill(maxRecordPart)
	n := d.uvarint()
	if d.err == nil && n > r.remaining()/minSessionRecord {
		d.fail("session count exceeds its bytes")
	}
	var prev Owner
	for i := uint64(0); i < n && d.err == nil; i++ {
		r.fill(maxRecordPart)
		id := d.owner()
		if d.err == nil && i > 0 && bytes.Compare(id[:], prev[:]) <= 0 {
			d.fail("sessions not in strictly ascending order")
		}
		prev = id
		ttl := d.ttl("session ttl")
		expiresAt := d.deadline("session end", r.now, ttl)
		s := newSession(id, ttl, expiresAt, d.duration("lock delay", MaxLockDelay, ErrDelayRange))
		r.sessions[s.id] = s
		r.heap.add(s.deadline())
	}
}

// sessionOf reads the session a holder or waiter (what) is bound to,
// which must exist.
func (r *snapshotReader) sessionOf(what string) *session {
	id := r.d.owner()
	s := r.sessions[id]
	if r.d.err == nil && s == nil {
		r.d.fail(what + " bound to a session that does not exist")
	}
	return s
}

// readKeys reads the key count and the keys, in strictly ascending order.
func (r *snapshotReader) readKeys(f *keyFormat) error {
	d := &r.d
	r.fill(maxRecordPart)
	n := d.uvarint()
	if d.err == nil && n > r.remaining()/f.minKey {
		d.fail("key count exceeds its bytes")
	}
	if d.err != nil {
		return d.err
	}
	seed := maphash.MakeSeed()
	batches := r.indexKeys(n, seed)
	defer close(batches)
	heldSets := make(map[uint64]*keySet) // multi-key grants by token; local, so on the stack
	r.sets = make(map[Owner]*keySet)
	if r.lastToken/64 <= n {
		r.tokenBits = make([]uint64, r.lastToken/64+1)
	}
	leaves := make([]*orderNode, 0, (n+orderMax-1)/orderMax)
	leaf := newOrderLeaf()
	var batch indexBatch // sent by value: the channel's buffer is the only copy
	prev := ""
	stop := make(chan struct{})
	defer close(stop)
	entries := entrySlab{ready: prefaultBlocks(n/uint64(keyClasses[0].perBlock()), stop)}
	r.heap.leases.ready = prefaultLeaseChunks((n+leaseChunk-1)/leaseChunk, stop)
	defer func() { r.heap.leases.ready = prefaulted[[]leaseDeadline]{} }()
	for i := uint64(0); i < n; i++ {
		r.fill(maxRecordPart)
		key := d.keyBytes()
		if d.err != nil {
			return d.err
		}
		e := entries.take(key, n-i)
		if i > 0 && e.key() <= prev {
			d.fail("keys not in strictly ascending order")
			return d.err
		}
		prev = e.key()
		if err := r.readKey(f, e, heldSets); err != nil {
			return err
		}
		batch.hashes[batch.n], batch.entries[batch.n] = hashKey(seed, prev), e
		batch.n++
		leaf.entries = append(leaf.entries, refTo(e))
		if len(leaf.entries) == orderMax {
			leaves = append(leaves, leaf)
			batches <- batch
			batch.n = 0
			leaf = newOrderLeaf()
		}
	}
	if len(leaf.entries) > 0 {
		leaves = append(leaves, leaf)
		batches <- batch
	}
	r.order = buildKeyOrderOn(leaves, int(n))
	return nil
}

// indexKeys makes the index of n keys on another goroutine, from the
// batches sent on the channel it returns, each once its records are read
// (the goroutine reads only their keys' hashes, made by the reader, and
// writes their places), until the channel is closed. Filling an index of
// millions of keys costs more than reading their records, a cache miss or
// more per key; this way it runs beside the reading and the checks.
// waitKeys waits for it. The channel holds indexQueue batches: with room
// for a few, the reader filled them, stopped, and Go's scheduler ran it
// again only once the index had taken them all, so that on two cores the
// two took turns rather than ran side by side; with room for them all, the
// index fell behind the reader by millions of keys at times and read them
// from memory again.
func (r *snapshotReader) indexKeys(n uint64, seed maphash.Seed) chan<- indexBatch {
	batches := make(chan indexBatch, min(n/orderMax+1, indexQueue))
	r.keysDone = make(chan struct{})
	go func(keys *keyIndex) {
		defer close(r.keysDone)
		*keys = newKeyIndexSeeded(int(n), seed)
		keys.cur.faultIn() // here too, at once: fresh memory read by anything (the collector too) before this is faulted in twice
		for b := range batches {
			if testHookIndexBatch != nil {
				testHookIndexBatch()
			}
			keys.addBatch(b.entries[:b.n], b.hashes[:b.n])
		}
	}(&r.keys)
	return batches
}

// indexBatch is a leaf's entries and their keys' hashes, for the index.
// It holds the entries by pointer, where the leaf holds them by entryRef:
// until the index has them, this is what keeps them for the collector.
type indexBatch struct {
	entries [orderMax]*entry
	hashes  [orderMax]uint64
	n       int
}

// testHookIndexBatch, when a test sets it, runs before the index takes
// each batch: the test holds the index back while the reader goes on.
var testHookIndexBatch func()

// indexQueue is how many batches the index may fall behind the reader
// by: 64 thousand keys, a few milliseconds of reading.
const indexQueue = 1024

// waitKeys waits until the index of keys is complete, if it is being made.
func (r *snapshotReader) waitKeys() {
	if r.keysDone != nil {
		<-r.keysDone
	}
}

// Restore allocates the entries, each with its key inline, a block of
// restoreBlock bytes at a time (entrySlab) instead of one allocation per
// key: at millions of keys the allocations, and the collections they set
// off (each marking the whole heap), were most of a restore's time. A
// block stays allocated while any entry in it is still in use, so
// releasing the keys of a restored state frees their memory only block by
// block: at most a block's worth (about 8 KiB for 16-byte keys) for each
// key that stays. Blocks of megabytes in huge pages (madvise) faulted
// fresh memory in faster in a new process, but cannot reuse the free
// spans a running process already has, and each one grew the heap, which
// made Go give back as much of its free memory at once: a member
// restarted beside others in one process took longer, and so did huge
// pages for the key index and the lease ends (measured at a million and
// ten million locks, 2026-12-02); none are asked for.
const restoreBlock = 8192 // a size class of Go's allocator

// readKey reads the rest of key e's record after its name: its holder,
// then its queue. heldSets holds the multi-key grants read so far, by
// token.
func (r *snapshotReader) readKey(f *keyFormat, e *entry, heldSets map[uint64]*keySet) error {
	d := &r.d
	hold := byte(holdLease)
	if f.kinds() {
		hold = d.byte()
	}
	g := r.holder(f, e, hold)
	if d.err == nil && g == nil && hold != holdNone && (e.token == 0 || e.token > r.lastToken) {
		d.fail("token outside 1..last token")
	}
	if f.kinds() && hold != holdDelayed && hold != holdNone && g == nil {
		if meta := d.meta(); meta != "" {
			r.bind(e, r.sess(e), meta)
		}
	}
	newSet := false
	if hold == holdSet && d.err == nil {
		newSet = r.joinHeldSet(e, heldSets)
	}
	r.fill(maxRecordPart) // a group's holders may have used up what the key's fill read
	waiters := d.uvarint()
	if d.err == nil && (waiters > MaxWaiters || waiters > r.remaining()/f.minWaiter) {
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
			r.noteToken(e.token) // a multi-key grant's token once
		}
		if s := r.sess(e); s == nil {
			r.heap.add(deadline{at: e.expiresAt, e: e})
		} else {
			s.ref(e.key())
		}
	}
	return r.readQueue(f, e, g, hold == holdNone, waiters)
}

// joinHeldSet adds e, one key of a multi-key grant, to the grant its token
// names in heldSets, and reports whether e is the grant's first key.
func (r *snapshotReader) joinHeldSet(e *entry, heldSets map[uint64]*keySet) bool {
	s := heldSets[e.token]
	first := s == nil
	if first {
		s = &keySet{owner: e.owner, extra: &holderExtra{meta: r.metadata(e)}}
		s.extra.set = s
		heldSets[e.token] = s
		if r.sets[s.owner] != nil {
			r.d.fail("owner in two multi-key acquisitions")
		}
		r.sets[s.owner] = s
	} else if s.owner != e.owner || s.entries[0].expiresAt != e.expiresAt || s.extra.meta != r.metadata(e) {
		r.d.fail("keys of one multi-key grant disagree")
	}
	r.setExtras(e, s.extra)
	s.entries = append(s.entries, e)
	return first
}

// readQueue reads key e's n waiters, in queue order. g is e's group, if
// any; reserved says nobody holds e, kept for the multi-key waiter at its
// head.
func (r *snapshotReader) readQueue(f *keyFormat, e *entry, g *group, reserved bool, n uint64) error {
	if n > 0 {
		r.setWaitQueue(e, &queue{byOwner: make(map[Owner]*waiter, n)})
	}
	for j := uint64(0); j < n; j++ {
		r.fill(maxRecordPart)
		w := r.readWaiter(f, e, g, reserved && j == 0, j == 0)
		if r.d.err != nil {
			return r.d.err
		}
		r.waitQueue(e).pushBack(w)
		w.session.ref(e.key())
		r.nWaiters++
		r.heap.add(deadline{at: w.deadline, e: e, w: w})
	}
	return nil
}

// readWaiter reads one of key e's waiters: the head of its queue if head,
// which must be a multi-key waiter if reservedHead.
func (r *snapshotReader) readWaiter(f *keyFormat, e *entry, g *group, reservedHead, head bool) *waiter {
	d := &r.d
	w := &waiter{owner: d.owner()}
	grant := byte(holdLease)
	if f.kinds() {
		grant = d.byte()
	}
	r.grant(f, w, g, grant)
	if d.err == nil && reservedHead && w.set == nil {
		d.fail("reserved key whose head is not a multi-key waiter")
	}
	w.deadline = d.deadline("wait deadline", r.now, MaxWait)
	if f.epochs {
		w.epoch = d.uvarint()
		if d.err == nil && w.epoch > r.epoch {
			d.fail("waiter epoch after the machine's")
		}
		if w.epoch != r.epoch {
			r.unclaimed++
		}
	}
	if f.kinds() {
		w.meta = d.meta()
	}
	if g != nil && g.kind == KindRW {
		w.shared = d.flag("shared")
	}
	if d.err == nil && (w.owner == e.owner || r.waitQueue(e).find(w.owner) != nil || (g != nil && g.holders.find(w.owner) != nil)) {
		d.fail("owner queued twice or queued for a key it holds")
	}
	if d.err == nil && head && g != nil && g.fits(w.shared) {
		d.fail("head waiter fits its key but was not granted")
	}
	if w.set != nil && d.err == nil {
		r.joinWaitingSet(e, w)
	}
	return w
}

// joinWaitingSet adds w, key e's record of a multi-key waiter, to the
// acquisition of its owner, whose records must agree.
func (r *snapshotReader) joinWaitingSet(e *entry, w *waiter) {
	s := r.sets[w.owner]
	switch {
	case s == nil:
		s = &keySet{owner: w.owner}
		r.sets[w.owner] = s
	case s.waits == nil:
		r.d.fail("owner in two multi-key acquisitions")
	case s.waits[0].ttl != w.ttl || s.waits[0].deadline != w.deadline || s.waits[0].epoch != w.epoch || s.waits[0].meta != w.meta:
		r.d.fail("keys of one multi-key waiter disagree")
	}
	w.set = s
	s.entries = append(s.entries, e)
	s.waits = append(s.waits, w)
}

// checkWhole checks what only the whole snapshot shows: releases of
// owners that hold or wait again, tokens granted twice, and multi-key
// acquisitions too large or that could have been granted. It sets the
// deadline heap's order on the way.
func (r *snapshotReader) checkWhole() error {
	for id := range r.released.byID {
		e := r.order.find(id.key) // the index of keys may not be complete yet
		if id.key != "" && e != nil && (e.owner == id.owner || r.waitQueue(e).find(id.owner) != nil || r.group(e) != nil && r.group(e).holders.find(id.owner) != nil) {
			return fmt.Errorf("%w: a release remembered for an owner that holds or waits for the key again", ErrBadEncoding)
		}
	}
	if r.twiceMin != 0 {
		return fmt.Errorf("%w: token %d granted twice", ErrBadEncoding, r.twiceMin)
	}
	if t, twice := tokenTwice(r.tokens, r.lastToken); twice {
		return fmt.Errorf("%w: token %d granted twice", ErrBadEncoding, t)
	}

	r.heap.init() // sets the entries' indices, which tell a lock-delay from a vacant key
	for _, s := range r.sets {
		if len(s.entries) > MaxKeys {
			return fmt.Errorf("%w: a multi-key acquisition of more than %d keys", ErrBadEncoding, MaxKeys)
		}
		if s.waits != nil && s.ready(&r.moreTable) {
			return fmt.Errorf("%w: a multi-key waiter could have been granted", ErrBadEncoding)
		}
	}
	return nil
}

// tokenTwice reports the smallest token that appears twice in tokens, all
// within 1..last. Sorting ten million tokens that arrive in key order (not
// token order) took a second; when last is not much more than the tokens
// (at most 8 bytes of bits a token), a bitmap of the tokens finds whether
// any repeats in one pass, and only then the sort says which.
func tokenTwice(tokens []uint64, last uint64) (uint64, bool) {
	if last/64 <= uint64(len(tokens)) {
		seen := make([]uint64, last/64+1)
		twice := false
		for _, t := range tokens {
			if t > last { // never: read checks; sorting copes with it
				twice = true
				break
			}
			bit := uint64(1) << (t % 64)
			twice = twice || seen[t/64]&bit != 0
			seen[t/64] |= bit
		}
		if !twice {
			return 0, false
		}
	}
	slices.Sort(tokens)
	for i := 1; i < len(tokens); i++ {
		if tokens[i] == tokens[i-1] {
			return tokens[i], true
		}
	}
	return 0, false
}

// readReleases reads the remembered releases: in the order applied, each
// within ReleaseMemory before now, none twice, and no destroy of a
// session that is live (its create would have forgotten it).
func (r *snapshotReader) readReleases() {
	d, now := &r.d, r.now
	r.fill(maxRecordPart)
	n := d.uvarint()
	if d.err == nil && (n > MaxRememberedReleases || n > r.remaining()/minReleaseRecord) {
		d.fail("release count out of range")
	}
	prev := time.Duration(0)
	for i := uint64(0); i < n && d.err == nil; i++ {
		r.fill(maxRecordPart)
		var id releaseID
		id.key = d.text("released key", MaxKeyLen, ErrKeyTooLong)
		id.owner = d.owner()
		at := d.duration("release time", now, ErrStampRange)
		switch {
		case d.err != nil:
		case at < prev || at+ReleaseMemory <= now:
			d.fail("release times out of order or forgotten by now")
		case r.released.recalls(id):
			d.fail("a release remembered twice")
		case id.key == "" && r.sessions[id.owner] != nil:
			d.fail("a destroy remembered for a live session")
		default:
			r.released.remember(id, at)
		}
		prev = at
	}
}

// readGroup reads a semaphore or read/write key's holders (after its holder
// kind) into e.
func (r *snapshotReader) readGroup(e *entry) *group {
	d := &r.d
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
	if n == 0 || n > most || n > r.remaining()/(ownerLen+3) {
		d.fail("holder count out of range")
		return g
	}
	r.setExtras(e, &holderExtra{group: g})
	g.holders.byOwner = make(map[Owner]*waiter, n)
	var prev uint64
	for i := uint64(0); i < n && d.err == nil; i++ {
		r.fill(maxRecordPart)
		h := &waiter{owner: d.owner(), held: true, index: -1, shared: g.kind == KindRW && !g.exclusive}
		h.token = d.uvarint()
		if d.err == nil && (h.token <= prev || h.token > r.lastToken) {
			d.fail("holder tokens not ascending within 1..last token")
		}
		prev = h.token
		switch d.byte() {
		case holdLease:
			h.deadline = d.deadline("lease end", r.now, MaxTTL)
			h.meta = d.meta()
		case holdSession:
			h.session = r.sessionOf("holder")
			h.meta = d.meta()
		case holdDelayed:
			h.delayed = true
			h.deadline = d.deadline("lock delay end", r.now, MaxLockDelay)
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

// ttl reads a lease's or session's TTL, which must be within
// MinTTL..MaxTTL.
func (d *decoder) ttl(field string) time.Duration {
	v := d.duration(field, MaxTTL, ErrTTLRange)
	if d.err == nil && v < MinTTL {
		d.failLimit(field, ErrTTLRange)
	}
	return v
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
