package cluster

import (
	"slices"
	"sync"
)

// proposalSizeBounds are the upper bounds (inclusive) of the buckets of
// Node.ProposalSizes: commands per raft entry. The last is the proposer's
// most per entry (maxBatch).
var proposalSizeBounds = [...]uint64{1, 2, 4, 8, 16, 32, 64, 128, 256, maxBatch}

// SizeHistogram counts the raft entries this node proposed as leader by
// how many commands each carried (the proposer batches concurrent commands
// into one entry): a Prometheus histogram's parts.
type SizeHistogram struct {
	// Buckets[i] counts the entries of at most Bounds[i] commands
	// (cumulative, as Prometheus counts); Count counts every entry.
	Bounds  []uint64
	Buckets []uint64
	Count   uint64 // entries
	Sum     uint64 // commands, over all entries
}

// sizeHistogram accumulates a SizeHistogram; safe for concurrent use.
type sizeHistogram struct {
	mu     sync.Mutex                          // protects the rest
	counts [len(proposalSizeBounds) + 1]uint64 // per bucket, not cumulative; the last: above every bound
	count  uint64
	sum    uint64
}

func (h *sizeHistogram) observe(commands int) {
	i := 0
	for i < len(proposalSizeBounds) && uint64(commands) > proposalSizeBounds[i] {
		i++
	}
	h.mu.Lock()
	h.counts[i]++
	h.count++
	h.sum += uint64(commands)
	h.mu.Unlock()
}

func (h *sizeHistogram) read() SizeHistogram {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := SizeHistogram{Bounds: slices.Clone(proposalSizeBounds[:]), Buckets: make([]uint64, len(proposalSizeBounds)), Count: h.count, Sum: h.sum}
	var below uint64
	for i := range out.Buckets {
		below += h.counts[i]
		out.Buckets[i] = below
	}
	return out
}

// ProposalSizes is a histogram of the raft entries this node proposed
// while leading since New, by commands per entry.
func (n *Node) ProposalSizes() SizeHistogram { return n.proposalSizes.read() }

// Sessions is how many sessions are live in this node's state machine
// (as far as it has applied the log).
func (n *Node) Sessions() int {
	n.sm.mu.Lock()
	defer n.sm.mu.Unlock()
	return n.sm.m.Sessions()
}

// Watchers is how many watches (lock.Watcher calls: blocking queries of
// the HTTP API, election observers) wait on this node now.
func (n *Node) Watchers() int { return n.sm.hub.Watchers() }
