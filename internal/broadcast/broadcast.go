// Package broadcast wakes every goroutine waiting for "something changed":
// a raftlock node's leader changes, its gossip members' events.
package broadcast

import "sync"

// Broadcast wakes every waiter at each Fire. The zero value is not ready:
// make one with New.
type Broadcast struct {
	mu sync.Mutex // protects ch
	ch chan struct{}
}

// New returns a Broadcast.
func New() *Broadcast { return &Broadcast{ch: make(chan struct{})} }

// Wait returns a channel closed at the next Fire. Take it before looking at
// the state it guards, so that a change in between is not missed.
func (b *Broadcast) Wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// Fire wakes every waiter.
func (b *Broadcast) Fire() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.mu.Unlock()
}
