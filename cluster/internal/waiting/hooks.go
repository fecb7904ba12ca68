package waiting

import (
	"context"

	"github.com/raftlock/raftlock/fsm"
)

// TestHooks reaches into a node's Waiters for package cluster's tests,
// which run whole nodes and need to see what the leader keeps to itself.
// Nothing else calls it.
type TestHooks struct{ w *Waiters }

// TestHooks returns the Waiters' hooks for package cluster's tests.
func (w *Waiters) TestHooks() TestHooks { return TestHooks{w} }

// Parked counts the waiting acquires parked at the node.
func (h TestHooks) Parked() int { return h.w.parked.len() }

// ParkedCall is the call of (key, owner) parked at the node, nil if none;
// one call, one value, compared by identity.
func (h TestHooks) ParkedCall(key string, owner fsm.Owner) any {
	r := h.w.parked
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.waiting[waiterKey{key, owner}]; w != nil {
		return w
	}
	return nil
}

// Withdraw takes owner's acquire of key out of the queue, as a caller that
// gave up does (see withdraw).
func (h TestHooks) Withdraw(ctx context.Context, key string, owner fsm.Owner) error {
	return h.w.withdraw(ctx, key, owner)
}
