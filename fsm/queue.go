package fsm

import "time"

// waiter is one owner queued for a key, or (held) one holder of a
// semaphore or read/write key: a grant turns the waiter into the holder in
// place. A mutex's holder lives in its entry instead, which keeps the
// common case small.
type waiter struct {
	owner      Owner
	ttl        time.Duration // the lease it asked for, granted when its turn comes
	deadline   time.Duration // when it gives up; held: when its lease (or lock-delay) ends, 0 when bound to a session
	epoch      uint64        // the machine's epoch when it queued or last claimed its place again
	session    *session      // granted bound to this session (ttl is then zero); nil for a lease
	meta       string        // the holder's metadata once granted
	prev, next *waiter
	index      int    // position in the deadline index; -1 for a session-bound holder
	token      uint64 // held: its fencing token
	held       bool   // a holder, in its key's group, not a waiter
	shared     bool   // a read/write key's reader (held or asked)
	delayed    bool   // held: its session expired with a lock-delay; the slot is nobody's until deadline
}

// queue is a key's FIFO of waiters: a doubly linked list, so a waiter whose
// deadline passes leaves from the middle in O(1), plus an index by owner so an
// acquire can tell a retry from a newcomer without walking the list. It
// exists only while someone waits, so a held key without waiters pays one
// nil pointer.
type queue struct {
	head, tail *waiter
	byOwner    map[Owner]*waiter
}

func (q *queue) len() int {
	if q == nil {
		return 0
	}
	return len(q.byOwner)
}

// first is the head waiter, nil for no queue.
func (q *queue) first() *waiter {
	if q == nil {
		return nil
	}
	return q.head
}

func (q *queue) find(o Owner) *waiter {
	if q == nil {
		return nil
	}
	return q.byOwner[o]
}

// rekey files w, which is in q, under owner o instead of its own.
func (q *queue) rekey(w *waiter, o Owner) {
	delete(q.byOwner, w.owner)
	w.owner = o
	q.byOwner[o] = w
}

func (q *queue) pushBack(w *waiter) {
	if q.byOwner == nil {
		q.byOwner = make(map[Owner]*waiter)
	}
	q.byOwner[w.owner] = w
	w.prev = q.tail
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
}

func (q *queue) unlink(w *waiter) {
	delete(q.byOwner, w.owner)
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
}

// position is w's 1-based place in the queue. It walks the list, which only
// an acquire retry by an already queued owner needs.
func (q *queue) position(w *waiter) int {
	n := 1
	for x := q.head; x != w; x = x.next {
		n++
	}
	return n
}
