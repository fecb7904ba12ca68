package fsm

import (
	"bytes"
	"time"
)

// deadline is one pending moment in the deadline index: the end of e's lease
// (w == nil), waiter w's wait deadline on e's key, (w.held) the end of
// holder w's lease or lock-delay on e's semaphore or read/write key, or
// (e == nil) the end of session w.session, w being the session's end
// record. Every deadline in the index is pending: the index is updated in
// place when a lease is extended or handed on and when a waiter leaves, so
// it never holds stale entries and its head is the true next deadline.
// Three words: one each for every held lock, so a session's end has a
// record of the waiter type rather than a fourth pointer here.
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
	return d.e.key
}

func (d *deadline) setIndex(i int) {
	if d.w != nil {
		d.w.index = i
	} else {
		d.e.index = i
	}
}

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

// deadlines is a binary min-heap of deadlines. Each element's position is
// mirrored in its entry or waiter (index) so it can be moved or removed in
// O(log n).
type deadlines []deadline

func (h deadlines) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].setIndex(i)
	h[j].setIndex(j)
}

func (h deadlines) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h deadlines) down(i int) bool {
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
		h.swap(i, c)
		i = c
	}
	return i > start
}

func (h *deadlines) push(d deadline) {
	d.setIndex(len(*h))
	*h = append(*h, d)
	h.up(len(*h) - 1)
}

// fix restores the heap after element i's time changed.
func (h deadlines) fix(i int, at time.Duration) {
	h[i].at = at
	if !h.down(i) {
		h.up(i)
	}
}

// remove takes element i out of the heap.
func (h *deadlines) remove(i int) {
	old := *h
	last := len(old) - 1
	if i != last {
		old.swap(i, last)
	}
	old[last].setIndex(-1)
	old[last] = deadline{} // drop the pointers for the collector
	*h = old[:last]
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

// init orders an arbitrary slice of deadlines into a heap.
func (h deadlines) init() {
	for i := range h {
		h[i].setIndex(i)
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}
