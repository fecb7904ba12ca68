package fsm

import (
	"fmt"
	"testing"
	"time"
)

// The lease ends are kept in chunks: adding one never moves the others (a
// slice grown by append copied them all, 160 MB at ten million leases,
// inside the command that grew it), and the chunks go as the leases do.
func TestLeaseHeapGrowsAndShrinksAChunkAtATime(t *testing.T) {
	const n = 3*leaseChunk + leaseChunk/2
	var h deadlines
	entries := make([]*entry, n)
	var first *leaseDeadline
	for i := range entries {
		entries[i] = newEntry(fmt.Sprintf("k%07d", i))
		// Ends in an order that makes the heap move elements around.
		h.pushLease(time.Duration((i*7919)%n)*time.Millisecond, entries[i])
		if i == 0 {
			first = &h.leases.chunks[0][0]
		}
		if &h.leases.chunks[0][0] != first {
			t.Fatalf("after %d leases the first chunk moved", i+1)
		}
		if want := i/leaseChunk + 1; len(h.leases.chunks) != want {
			t.Fatalf("%d leases in %d chunks, want %d", i+1, len(h.leases.chunks), want)
		}
	}
	// Taking every lease out in the order of their ends, by removal from
	// the middle as well as the head, leaves a heap whose head is always
	// the earliest end, and the chunks shrink with it.
	prev := time.Duration(-1)
	for left := n; left > 0; left-- {
		if left%3 == 0 {
			e := entries[left-1]
			if e.index >= 0 {
				h.removeLease(e)
				continue
			}
		}
		d, ok := h.next()
		if !ok {
			t.Fatalf("no next with %d leases left", h.leases.len())
		}
		if d.at < prev {
			t.Fatalf("next end %v after %v", d.at, prev)
		}
		prev = d.at
		h.removeLease(d.e)
		if max := (h.leases.len()+leaseChunk-1)/leaseChunk + 1; len(h.leases.chunks) > max {
			t.Fatalf("%d leases kept in %d chunks, want at most %d", h.leases.len(), len(h.leases.chunks), max)
		}
	}
	for h.leases.len() > 0 {
		d, _ := h.next()
		h.removeLease(d.e)
	}
	if len(h.leases.chunks) > 1 {
		t.Fatalf("no lease left, %d chunks kept", len(h.leases.chunks))
	}
}

// A restore's lease ends go into chunks faulted in ahead, whatever those
// hold past the heap's length: the heap never reads there.
func TestLeaseHeapTakesChunksFaultedInAhead(t *testing.T) {
	stranger := newEntry("stranger")
	ready := make(chan []leaseDeadline, 2)
	var dirty [][]leaseDeadline
	for range 2 {
		c := make([]leaseDeadline, leaseChunk)
		for i := range c {
			c[i] = leaseDeadline{at: -1, e: refTo(stranger)}
		}
		dirty = append(dirty, c)
		ready <- c
	}
	close(ready)
	h := deadlines{leases: leaseHeap{ready: prefaulted[[]leaseDeadline]{ready: ready}}}
	const n = 2*leaseChunk + 10
	entries := make([]*entry, n) // the heap holds them by entryRef: a machine's index would hold them
	for i := range n {
		entries[i] = newEntry(fmt.Sprintf("k%07d", i))
		h.pushLease(time.Duration((i*7919)%n+1)*time.Millisecond, entries[i])
	}
	for i, c := range dirty {
		if &h.leases.chunks[i][0] != &c[0] {
			t.Fatalf("chunk %d is not the one faulted in ahead", i)
		}
	}
	prev := time.Duration(0)
	for h.leases.len() > 0 {
		d, _ := h.next()
		if d.e == stranger || d.at <= prev {
			t.Fatalf("next end %v (%q) after %v", d.at, d.e.key(), prev)
		}
		prev = d.at
		h.removeLease(d.e)
	}
}

// A restore's heap of lease ends, ordered on two goroutines when large,
// is the very heap one pass orders: each element in the same place, each
// entry knowing its place, every parent before its children.
func TestLeaseHeapifyOnTwoGoroutinesIsOnePass(t *testing.T) {
	for _, n := range []int{parallelHeapify - 1, parallelHeapify, parallelHeapify + 1, 1<<17 - 1, 1 << 17, 100_003} {
		entries := make([]*entry, n)
		for i := range entries {
			entries[i] = newEntry(fmt.Sprintf("k%07d", i))
		}
		fill := func() *deadlines {
			var h deadlines
			for i, e := range entries {
				// Few distinct times, so that keys break most ties.
				h.add(deadline{at: time.Duration((i*7919)%97) * time.Second, e: e})
			}
			return &h
		}
		one := fill()
		for i := one.leases.len()/2 - 1; i >= 0; i-- {
			leaseDown(&one.leases, i)
		}
		want := make([]leaseDeadline, n)
		for i := range want {
			want[i] = *one.leases.at(i)
		}
		two := fill()
		two.init()
		for i := range n {
			got := two.leases.at(i)
			if *got != want[i] {
				t.Fatalf("n=%d: element %d is %v at %v, one pass puts %v at %v there", n, i, got.e.get().key(), got.at, want[i].e.get().key(), want[i].at)
			}
			if int(got.e.get().index) != i {
				t.Fatalf("n=%d: element %d's entry says it is at %d", n, i, got.e.get().index)
			}
			if i > 0 && got.before(two.leases.at((i-1)/2)) {
				t.Fatalf("n=%d: element %d comes before its parent", n, i)
			}
		}
	}
}
