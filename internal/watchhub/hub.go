// Package watchhub is what a lock store needs to answer blocking queries
// (watches) without missing a change: a bounded ring of the recent changes,
// each an (index, key) pair fed from the state machine's apply path, and the
// registrations of the callers waiting for a change to a key or under a
// prefix after a given index.
//
// The index is the store's own count of applied steps (a cluster node's raft
// log index, a memory store's count of applied commands): it only grows, and
// a state read together with the index reflects every change recorded at or
// below it. A caller reads the state and the index, then asks Wait for a
// change in its scope after that index. Wait returns at once if the ring
// already holds one, or if the ring no longer covers that index (more than
// its size of changes ago, or before the last Reset), and otherwise
// registers the caller before it lets go of the hub's lock; Record wakes it
// under the same lock. So a change applied between the read and the wait is
// never missed; a wake may be spurious (a change that a reader cannot tell
// from no change, an index the store has not reached, the ring wrapping),
// and the caller compares what it reads.
//
// Record allocates nothing: the ring is allocated once, and keeps the key
// string the state machine passes (its own, not a copy).
package watchhub

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// Errors of Wait.
var (
	// ErrFull: the hub already has its maximum of registered watchers.
	ErrFull = errors.New("watchhub: too many watchers")
	// ErrClosed: the hub was closed.
	ErrClosed = errors.New("watchhub: closed")
)

// Hub is the ring and the registry. Its methods are safe for concurrent use.
type Hub struct {
	mu sync.Mutex
	// ring holds the last len(ring) changes in index order, oldest at head
	// when full; n is how many slots are used.
	ring []change
	head int
	n    int
	// covered: every change at an index above it is in the ring. It rises
	// as old changes are dropped and on Reset.
	covered uint64
	keys    map[string]map[*watcher]struct{} // watchers of one key
	// prefixes holds the prefix watchers by prefix. A change is matched
	// against each distinct prefix, or against each prefix of its key when
	// those are fewer: at most min(distinct prefixes, len(key)+1) lookups.
	prefixes map[string]map[*watcher]struct{}
	count    int // registered watchers
	max      int
	closed   bool
	done     chan struct{} // closed by Close
}

type change struct {
	index uint64
	key   string
}

type watcher struct {
	woken chan struct{} // closed (once, under mu) by the change that wakes it
	fired bool
}

// New returns a hub that remembers ringSize changes (at least 1) and
// registers at most maxWatchers callers at once (at least 1); changes at or
// below covered are taken as unknown (a watch from before it answers at
// once).
func New(ringSize, maxWatchers int, covered uint64) *Hub {
	return &Hub{
		ring:     make([]change, max(ringSize, 1)),
		covered:  covered,
		keys:     make(map[string]map[*watcher]struct{}),
		prefixes: make(map[string]map[*watcher]struct{}),
		max:      max(maxWatchers, 1),
		done:     make(chan struct{}),
	}
}

// Record notes that key changes at index (indexes do not decrease from one
// call to the next) and wakes the watchers of key and of every prefix of
// it. The caller calls it while applying the change, before any reader can
// see the new state.
func (h *Hub) Record(index uint64, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == len(h.ring) {
		h.covered = max(h.covered, h.ring[h.head].index)
		h.ring[h.head] = change{index, key}
		h.head = (h.head + 1) % len(h.ring)
	} else {
		h.ring[(h.head+h.n)%len(h.ring)] = change{index, key}
		h.n++
	}
	h.fireAllLocked(h.keys, key)
	if len(h.prefixes) == 0 {
		return
	}
	if len(h.prefixes) <= len(key) {
		for prefix := range h.prefixes {
			if strings.HasPrefix(key, prefix) {
				h.fireAllLocked(h.prefixes, prefix)
			}
		}
		return
	}
	for i := 0; i <= len(key); i++ {
		h.fireAllLocked(h.prefixes, key[:i])
	}
}

// fireAllLocked wakes the watchers of scope in m and forgets them.
func (h *Hub) fireAllLocked(m map[string]map[*watcher]struct{}, scope string) {
	if ws := m[scope]; ws != nil {
		for w := range ws {
			h.fireLocked(w)
		}
		delete(m, scope)
	}
}

// Reset forgets every change (the state was replaced wholesale, as by a
// snapshot restore, at index covered) and wakes every watcher.
func (h *Hub) Reset(covered uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.head, h.n = 0, 0
	clear(h.ring) // drop the keys
	h.covered = max(h.covered, covered)
	h.wakeAllLocked()
}

// Close wakes every watcher; Wait then returns ErrClosed.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
		h.wakeAllLocked()
	}
}

func (h *Hub) wakeAllLocked() {
	for _, m := range []map[string]map[*watcher]struct{}{h.keys, h.prefixes} {
		for _, ws := range m {
			for w := range ws {
				h.fireLocked(w)
			}
		}
		clear(m)
	}
}

func (h *Hub) fireLocked(w *watcher) {
	if !w.fired {
		w.fired = true
		h.count--
		close(w.woken)
	}
}

// Watchers is how many callers are registered now.
func (h *Hub) Watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// Wait blocks until a change to scope (a key, or every key starting with it
// when prefix is set) is recorded at an index above after, until the ring no
// longer covers after, or until wait has passed (then it returns nil, like
// a wake: the caller reads the state again either way). It returns at once
// when the ring already holds such a change or does not cover after. It
// returns ctx's error when ctx ends first, ErrClosed when the hub is
// closed, and ErrFull, at once, when it would register more than the hub's
// maximum. Whatever it returns, it leaves no registration behind.
func (h *Hub) Wait(ctx context.Context, scope string, prefix bool, after uint64, wait time.Duration) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	if after < h.covered || h.changedLocked(scope, prefix, after) {
		h.mu.Unlock()
		return nil
	}
	if h.count >= h.max {
		h.mu.Unlock()
		return ErrFull
	}
	w := &watcher{woken: make(chan struct{})}
	h.count++
	registry := h.keys
	if prefix {
		registry = h.prefixes
	}
	ws := registry[scope]
	if ws == nil {
		ws = make(map[*watcher]struct{})
		registry[scope] = ws
	}
	ws[w] = struct{}{}
	h.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	var err error
	select {
	case <-w.woken:
	case <-timer.C:
	case <-ctx.Done():
		err = ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !w.fired {
		w.fired = true
		h.count--
		if ws := registry[scope]; ws != nil {
			delete(ws, w)
			if len(ws) == 0 {
				delete(registry, scope)
			}
		}
	}
	if h.closed {
		return ErrClosed
	}
	return err
}

// changedLocked reports whether the ring holds a change to scope above
// after. It scans from the newest change back to the first at or below after.
func (h *Hub) changedLocked(scope string, prefix bool, after uint64) bool {
	for i := h.n - 1; i >= 0; i-- {
		c := h.ring[(h.head+i)%len(h.ring)]
		if c.index <= after {
			return false
		}
		if c.key == scope || prefix && strings.HasPrefix(c.key, scope) {
			return true
		}
	}
	return false
}
