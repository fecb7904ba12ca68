package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// MaxKeys bounds the keys of one multi-key lock (Client.LockAll): a set is
// taken in one step of the store, and its size bounds that step's work.
const MaxKeys = 64

// MultiKeyStore is an optional Store ability, found by type assertion: taking
// a set of keys all or nothing (Client.LockAll). A LockAll handle on a store
// without it fails with an error matching errors.ErrUnsupported.
type MultiKeyStore interface {
	// AcquireAll takes every key of req.Keys (1..MaxKeys distinct mutex
	// keys in ascending byte order; req.Key is the first) for req.Owner,
	// all or nothing, with one lease of req.TTL and one fencing token for
	// the whole set, larger than any the store issued before. Without a
	// wait it fails with a *HeldError (about the first key not free, which
	// its Key names when the store can tell) unless
	// every key is free; with one, the owner queues on every key at once
	// and is granted the whole set when its last key is handed to it.
	// Strict FIFO per key: a key whose queue a waiting set heads is kept for
	// it (reserved) while another of its keys is held, and nobody behind is
	// granted it; an acquire of it without a wait fails with a *HeldError.
	// So a set is never starved, and sets never deadlock, whatever order
	// their keys were listed in.
	//
	// Release(key, owner) or Extend(key, owner, ttl) of any key of a granted
	// set acts on the whole set: a release hands each key to its next waiter
	// in one step. A set is never bound to a session (ErrInvalidSession). A
	// key of the set that is a semaphore or read/write lock fails with a
	// *KindMismatchError. The retry by the same owner with the same keys is
	// idempotent (the same grant, or the same places in the queues); with
	// another set, or a single-key acquire by that owner of one of its keys,
	// it fails with a *HeldError and changes nothing. Otherwise as
	// Store.Acquire: a wait that runs out, or ctx done, leaves every queue
	// (and releases the set, if it was granted meanwhile).
	AcquireAll(ctx context.Context, req AcquireRequest) (Lease, error)
}

// LockAll returns a handle that takes every key of keys at once, all or
// nothing: one holder, one lease (TTL) and one fencing token (Token) for the
// whole set. Its Acquire, TryAcquire, Run, TryRun, Extend, KeepAlive and
// Release act on every key together; each key reads (Client.Inspect) as a
// mutex held with that token. While it waits, it waits on every key at once
// and is served in FIFO order on each: a key it waits for at the head of
// the queue is kept for it, never given to someone who came later, so two
// LockAll handles never deadlock whatever order their keys are listed in,
// and neither is starved by single-key locks. The order of keys does not
// matter (the handle sorts them); a key twice, no key or more than MaxKeys
// keys fail the first acquire with an error matching ErrInvalidKey, and so
// does the store with ErrKindMismatch when a key is a semaphore or
// read/write lock. A LockAll handle cannot be bound to a session (its
// acquire fails with ErrInvalidSession on a client made with
// Session.Client): give it a lease. The store must implement
// MultiKeyStore. Like Client.Lock, it does not touch the store.
//
// Key is the set's first key in byte order: Release(key, owner) of any key
// of the set releases the whole set. Serialize keeps the whole set, so a
// handle rebuilt by Client.Restore has the same Keys and extends, releases
// and acquires the same set.
func (c *Client) LockAll(keys []string, opts ...LockOption) *Lock {
	sorted := slices.Clone(keys)
	if sorted == nil {
		sorted = []string{} // an empty set is still a set: the acquire says it is empty
	}
	slices.Sort(sorted)
	first := ""
	if len(sorted) > 0 {
		first = sorted[0]
	}
	l := c.Lock(first, opts...)
	l.keys = sorted
	return l
}

// Keys is the set a LockAll handle takes, in byte order; nil for any other
// handle. The slice is the caller's.
func (l *Lock) Keys() []string { return slices.Clone(l.keys) }

// acquireAll sends a multi-key request to the store, which must take it.
func (c *Client) acquireAll(ctx context.Context, req AcquireRequest) (Lease, error) {
	ms, ok := c.store.(MultiKeyStore)
	if !ok {
		return Lease{}, fmt.Errorf("lock: multi-key lock of %q: the store (%T) does not take multi-key locks: %w", req.Keys, c.store, errors.ErrUnsupported)
	}
	return ms.AcquireAll(ctx, req)
}

// validateSet is Validate for a multi-key acquire.
func (r AcquireRequest) validateSet() error {
	switch {
	case r.Kind != KindMutex || r.Limit != 0 || r.Shared:
		return fmt.Errorf("%w: a multi-key lock takes mutex keys only (kind is %v)", ErrInvalidKind, r.Kind)
	case !r.Session.IsZero():
		return fmt.Errorf("%w: a multi-key lock cannot be bound to a session: give it a TTL (use a client not bound to a session)", ErrInvalidSession)
	case len(r.Keys) == 0 || len(r.Keys) > MaxKeys:
		return fmt.Errorf("%w: a multi-key lock takes 1 to %d keys (got %d)", ErrInvalidKey, MaxKeys, len(r.Keys))
	}
	for i, k := range r.Keys {
		if err := ValidateKey(k); err != nil {
			return fmt.Errorf("key set: %w", err)
		}
		if i > 0 && k == r.Keys[i-1] {
			return fmt.Errorf("%w: key %q appears twice in the key set", ErrInvalidKey, k)
		}
		if i > 0 && k < r.Keys[i-1] {
			return fmt.Errorf("%w: the keys of a multi-key acquire must be in ascending byte order (Client.LockAll sorts them)", ErrInvalidKey)
		}
	}
	if r.Owner.IsZero() {
		return ownerError()
	}
	if err := validateMetadata(r.Metadata); err != nil {
		return err
	}
	if err := validateTTL(r.TTL); err != nil {
		return err
	}
	return validateWait(r.Wait)
}
