package fsm

import (
	"bytes"
	"time"
	"unsafe"
)

// deadline is one pending moment in the deadline index: the end of e's lease
// (w == nil), waiter w's wait deadline on e's key, (w.held) the end of
// holder w's lease or lock-delay on e's semaphore or read/write key, or
// (e == nil) the end of session w.session, w being the session's end
// record. Every deadline in the index is pending: the index is updated in
// place when a lease is extended or handed on and when a waiter leaves, so
// it never holds stale entries and its head is the true next deadline.
// A lease's end (w == nil) is kept in a heap of its own, two words a
// lease (leaseDeadline); the others are three words, a session's end being
// a record of the waiter type rather than a fourth pointer here.
type deadline struct {
	at time.Duration
	e  *entry
	w  *waiter
}

// session is the session whose end d is, or nil.
func (d *deadline) session() *session {
	if d.e != nil {
		return nil
	}
	return d.w.session
}

// kind orders deadlines at the same time: wait deadlines before lease ends,
// so that a lease ending at t hands the key to a waiter whose deadline is
// later than t (one whose deadline is t has already gone).
// Session ends come last, after the lease ends at the same time.
func (d *deadline) kind() EventKind {
	switch {
	case d.e == nil:
		return EventSessionExpired
	case d.w != nil && !d.w.held:
		return EventWaitExpired
	}
	return EventExpired
}

func (d *deadline) owner() *Owner {
	if d.w != nil {
		return &d.w.owner // a session's end record has the session's ID
	}
	return &d.e.owner
}

func (d *deadline) key() string {
	if d.e == nil {
		return ""
	}
	return d.e.key()
}

// setIndex mirrors d's position in others, where every deadline has a
// waiter record.
func (d *deadline) setIndex(i int) { d.w.index = i }

// before is the total processing order: time, kind, key, owner. No two
// pending deadlines compare equal (one lease per key and owner, one wait per
// owner and key, one end per session), so the order never depends on how the heap was
// built.
func (d *deadline) before(o *deadline) bool {
	if d.at != o.at {
		return d.at < o.at
	}
	if dk, ok := d.kind(), o.kind(); dk != ok {
		return dk < ok
	}
	if dk, ok := d.key(), o.key(); dk != ok {
		return dk < ok
	}
	return bytes.Compare(d.owner()[:], o.owner()[:]) < 0
}

// deadlines is the deadline index: two binary min-heaps, each element's
// position mirrored in its entry or waiter (index) so it can be moved or
// removed in O(log n). Every held mutex key has its lease's end in leases,
// 16 bytes, rather than a 24-byte deadline with a nil waiter: a lease is
// what there are millions of. Waiters' deadlines, group holders' ends and
// sessions' ends are in others. The next deadline is the earlier of the
// two heads in the one total order (before), so splitting the index
// changes no decision.
type deadlines struct {
	leases leaseHeap
	others []deadline
}

// leaseDeadline is the end of e's lease (or lock-delay): deadline{at, e,
// nil} in two words, neither a pointer (entryRef): the lease heap's chunks
// are not scanned by the collector.
type leaseDeadline struct {
	at time.Duration
	e  entryRef
}

// leaseHeap holds the lease ends, element i at chunks[i/leaseChunk][i%leaseChunk],
// rather than in one slice: a slice grown by append copied all of them
// into one a quarter larger each time it filled (160 megabytes at ten
// million leases: a command that held every member up while it copied,
// and a quarter of the memory spare on average), and never shrank when
// the locks went. Chunks are added and dropped one at a time, at most one
// empty chunk kept past the last element so that a count going back and
// forth over a chunk's edge does not allocate each time.
type leaseHeap struct {
	chunks [][]leaseDeadline
	n      int
	ready  prefaulted[[]leaseDeadline] // chunks made, and faulted in, ahead during a restore (prefaultLeaseChunks); zero: none
}

// prefaultLeaseChunks makes up to want chunks of lease ends on another
// goroutine (see prefault): at ten million locks the first touch of their
// 160 MB took 0.45 s of a restore's reading. A chunk's elements past the
// heap's length are never read, and append writes each one whole.
func prefaultLeaseChunks(want uint64, stop <-chan struct{}) prefaulted[[]leaseDeadline] {
	return prefault(want, 4, stop, func() []leaseDeadline { return make([]leaseDeadline, leaseChunk) }, func(c []leaseDeadline) {
		for i := 0; i < len(c); i += pageSize / int(unsafe.Sizeof(leaseDeadline{})) {
			c[i].at = 0 // a write, never a read first (pageSize)
		}
	})
}

// newChunk is room for leaseChunk more lease ends: a chunk faulted in
// ahead if one is ready, else a fresh one.
func (h *leaseHeap) newChunk() []leaseDeadline {
	if c, ok := h.ready.take(); ok {
		return c
	}
	return make([]leaseDeadline, leaseChunk)
}

// leaseChunk is how many lease ends a chunk holds: 64 KiB, past Go's
// small size classes, so each chunk is its own span and freed whole.
const (
	leaseChunkShift = 12
	leaseChunk      = 1 << leaseChunkShift
)

func (h *leaseHeap) len() int { return h.n }

// at is element i.
func (h *leaseHeap) at(i int) *leaseDeadline {
	return &h.chunks[i>>leaseChunkShift][i&(leaseChunk-1)]
}

// append adds d as the last element, outside the heap's order.
func (h *leaseHeap) append(d leaseDeadline) {
	if h.n == len(h.chunks)*leaseChunk {
		h.chunks = append(h.chunks, h.newChunk())
	}
	*h.at(h.n) = d
	h.n++
}

// dropLast removes the last element, freeing a chunk that has been empty
// for a whole chunk's worth of removals.
func (h *leaseHeap) dropLast() {
	h.n--
	*h.at(h.n) = leaseDeadline{}
	if full := len(h.chunks) - 2; full >= 0 && h.n == full*leaseChunk {
		h.chunks[full+1] = nil
		h.chunks = h.chunks[:full+1]
	}
}

// before is deadline.before for two lease ends: same kind, and no two
// leases on one key.
func (d *leaseDeadline) before(o *leaseDeadline) bool {
	if d.at != o.at {
		return d.at < o.at
	}
	return d.e.get().key() < o.e.get().key()
}

func (h *deadlines) len() int { return h.leases.len() + len(h.others) }

// next is the earliest pending deadline, if any.
func (h *deadlines) next() (deadline, bool) {
	switch {
	case h.leases.len() == 0 && len(h.others) == 0:
		return deadline{}, false
	case h.leases.len() == 0:
		return h.others[0], true
	}
	head := h.leases.at(0)
	d := deadline{at: head.at, e: head.e.get()}
	if len(h.others) > 0 && h.others[0].before(&d) {
		return h.others[0], true
	}
	return d, true
}

// nextAt is when the next deadline is due, if any: next's time without
// comparing beyond it.
func (h *deadlines) nextAt() (time.Duration, bool) {
	switch {
	case h.leases.len() == 0 && len(h.others) == 0:
		return 0, false
	case h.leases.len() == 0:
		return h.others[0].at, true
	case len(h.others) == 0:
		return h.leases.at(0).at, true
	}
	return min(h.leases.at(0).at, h.others[0].at), true
}

// push adds d, to leases if it is a lease's end.
func (h *deadlines) push(d deadline) {
	if d.w == nil {
		h.pushLease(d.at, d.e)
		return
	}
	d.setIndex(len(h.others))
	h.others = append(h.others, d)
	heapUp(h.others, len(h.others)-1)
}

func (h *deadlines) pushLease(at time.Duration, e *entry) {
	e.index = int32(h.leases.len())
	h.leases.append(leaseDeadline{at: at, e: refTo(e)})
	leaseUp(&h.leases, h.leases.len()-1)
}

// add appends d without keeping the heaps' order: a restore's, which calls
// init once all are in.
func (h *deadlines) add(d deadline) {
	if d.w == nil {
		d.e.index = int32(h.leases.len()) // here, while the entry is in the cache, rather than in a pass of init's
		h.leases.append(leaseDeadline{at: d.at, e: refTo(d.e)})
	} else {
		h.others = append(h.others, d)
	}
}

// fix restores the order after the time of others' element i changed.
func (h *deadlines) fix(i int, at time.Duration) {
	h.others[i].at = at
	if !heapDown(h.others, i) {
		heapUp(h.others, i)
	}
}

// fixLease is fix for the end of e's lease, which is in leases.
func (h *deadlines) fixLease(e *entry, at time.Duration) {
	i := int(e.index)
	h.leases.at(i).at = at
	if !leaseDown(&h.leases, i) {
		leaseUp(&h.leases, i)
	}
}

// remove takes others' element i out.
func (h *deadlines) remove(i int) {
	old := h.others
	last := len(old) - 1
	if i != last {
		heapSwap(old, i, last)
	}
	old[last].setIndex(-1)
	old[last] = deadline{} // drop the pointers for the collector
	h.others = old[:last]
	if i != last && !heapDown(h.others, i) {
		heapUp(h.others, i)
	}
}

// removeLease takes the end of e's lease out of leases.
func (h *deadlines) removeLease(e *entry) {
	i := int(e.index)
	last := h.leases.len() - 1
	if i != last {
		leaseSwap(&h.leases, i, last)
	}
	h.leases.at(last).e.get().index = -1
	h.leases.dropLast()
	if i != last && !leaseDown(&h.leases, i) {
		leaseUp(&h.leases, i)
	}
}

// init orders what add appended into heaps.
func (h *deadlines) init() {
	for i := range h.others {
		h.others[i].setIndex(i)
	}
	for i := len(h.others)/2 - 1; i >= 0; i-- {
		heapDown(h.others, i)
	}
	h.leases.heapify()
}

// heapify orders the lease ends into a heap (Floyd's: each element sifted
// down, children before parents). At millions of leases, the last step of
// a restore that nothing runs beside, the root's two subtrees are ordered
// on two goroutines: they share no element, sifting down never leaves a
// subtree, and each is still ordered children first, so the heap is the
// one a single pass makes.
func (h *leaseHeap) heapify() {
	if h.n < parallelHeapify {
		for i := h.n/2 - 1; i >= 0; i-- {
			leaseDown(h, i)
		}
		return
	}
	done := make(chan struct{})
	go func() {
		h.heapifySubtree(2)
		close(done)
	}()
	h.heapifySubtree(1)
	<-done
	leaseDown(h, 0)
}

// parallelHeapify is the least number of lease ends heapify orders on two
// goroutines.
const parallelHeapify = 1 << 16

// heapifySubtree orders the subtree under element root, its deepest
// parents first.
func (h *leaseHeap) heapifySubtree(root int) {
	// The subtree's elements k levels below root are
	// (root+1)<<k - 1 .. (root+2)<<k - 2.
	k := 0
	for ((root+1)<<(k+1))-1 < h.n { // the level below k has elements
		k++
	}
	for ; k >= 0; k-- {
		first := (root+1)<<k - 1
		last := min((root+2)<<k-2, h.n/2-1) // parents only
		for i := last; i >= first; i-- {
			leaseDown(h, i)
		}
	}
}

// The two heaps' operations are written out twice rather than made
// generic: a type parameter's methods are called through a dictionary,
// not inlined, and these are on every apply's path.

func heapSwap(h []deadline, i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].setIndex(i)
	h[j].setIndex(j)
}

func heapUp(h []deadline, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			return
		}
		heapSwap(h, i, p)
		i = p
	}
}

func heapDown(h []deadline, i int) bool {
	start := i
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h[r].before(&h[l]) {
			c = r
		}
		if !h[c].before(&h[i]) {
			break
		}
		heapSwap(h, i, c)
		i = c
	}
	return i > start
}

func leaseSwap(h *leaseHeap, i, j int) {
	a, b := h.at(i), h.at(j)
	*a, *b = *b, *a
	a.e.get().index = int32(i)
	b.e.get().index = int32(j)
}

func leaseUp(h *leaseHeap, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.at(i).before(h.at(p)) {
			return
		}
		leaseSwap(h, i, p)
		i = p
	}
}

func leaseDown(h *leaseHeap, i int) bool {
	start := i
	n := h.len()
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.at(r).before(h.at(l)) {
			c = r
		}
		if !h.at(c).before(h.at(i)) {
			break
		}
		leaseSwap(h, i, c)
		i = c
	}
	return i > start
}
