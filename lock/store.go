package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// Store is the seam between the lock API and whatever keeps the locks: the
// memory store, a cluster node, or the HTTP client of a remote node. A store
// must make Acquire atomic and make Release and Extend act only when the
// owner matches (compare-and-act). Every method may be called concurrently.
// Each method validates its input first (AcquireRequest.Validate,
// ValidateRelease, ValidateExtend, ValidateKey, ListRequest.Validate; for
// the optional abilities SessionRequest.Validate, ValidateSessionID and
// WatchQuery.Validate) and changes nothing when it is invalid, so that bad
// input is reported identically by every store. Every grant carries a fencing token larger
// than any the store issued before, for any key. No answer (Inspect, List,
// a *HeldError) reveals an owner: the owner is the proof of ownership.
// locktest.TestStore checks all of this.
//
// Durations a store returns (Lease.Remaining, KeyInfo.Remaining) are counted
// from the moment the caller sent the request, on the caller's own monotonic
// clock, and must never overstate: the store's lease may end later than that
// figure, never earlier. Counting from any later moment (when the request
// arrived, or when a read was sent after a waiter was woken) only makes the
// figure more conservative, and is fine. So a lease granted after a wait may
// report more than its TTL (the wait is not charged to it), or less.
type Store interface {
	// Acquire takes req.Key for req.Owner for req.TTL. If the key is held by
	// another owner and req.Wait is zero, it returns a *HeldError at once. With
	// a positive Wait the caller queues in FIFO order and is handed the lock by
	// the holder's release, expiry or cancel, up to Wait or until ctx is done;
	// a wait that runs out returns a *HeldError, a done ctx returns an error
	// matching ctx.Err(), and in both cases the store leaves the queue (and
	// releases, if the lock was granted meanwhile). Acquire by the live holder
	// is idempotent: the same token, the lease not lengthened; acquire by an
	// owner already queued keeps its place in the queue.
	//
	// For a semaphore or read/write lock (req.Kind), "held by another
	// owner" means the acquire does not fit now (the semaphore is full, a
	// writer holds, or readers hold and a write is asked) or someone
	// already waits: the queue is strictly FIFO, and every waiter that
	// fits at its head is granted in the step that makes room. An acquire
	// of another kind or limit than the key's while anyone holds or waits
	// returns a *KindMismatchError and changes nothing.
	Acquire(ctx context.Context, req AcquireRequest) (Lease, error)

	// Release ends owner's lease on key and hands the key to the next waiter.
	// It returns false, and changes nothing, when owner does not hold key.
	// It is idempotent: a Release repeated by the owner whose own release
	// ended its lease on key (the answer to the first was lost) returns
	// true again and changes nothing; once the lease had ended otherwise
	// (run out, force-released), or the owner acquired key again since, it
	// returns false. A store may forget such a release after minutes (the
	// cluster's state machine keeps 5 minutes, at most 65,536 releases);
	// a repeat after that returns false.
	Release(ctx context.Context, key string, owner Owner) (bool, error)

	// Extend makes owner's lease on key end ttl from now (which may shorten
	// it), keeping its token. It returns
	// ErrNotHeld when owner does not hold key (the lease was lost). A lock
	// bound to a session has no lease of its own: Extend changes nothing
	// and reports what is left of the session.
	Extend(ctx context.Context, key string, owner Owner, ttl time.Duration) (Lease, error)

	// Inspect reports whether anyone holds key. It never reveals the owner.
	Inspect(ctx context.Context, key string) (KeyInfo, error)
}

// AcquireRequest asks a Store for a lock.
type AcquireRequest struct {
	Key   string
	Owner Owner
	TTL   time.Duration // the lease; must be 0 with a Session
	Wait  time.Duration // how long to queue when held; 0 never queues
	// Session, when not zero, binds the lock to that session (the store
	// must implement SessionStore): it has no lease of its own and ends
	// with the session; Lease.Remaining is the session's. An acquire under
	// a session that has ended fails with an error matching ErrNoSession.
	Session SessionID
	// Metadata is kept with the holder (and with the waiter until its
	// grant) and shown by Inspect and List: at most MaxMetadataLen bytes,
	// for people and tools (who holds it, since when). Never an owner or
	// other secret: anyone who can read the lock can read it. A store may
	// drop it (then reads report none).
	Metadata string
	// Kind is what the key is to be (see Kind): the zero value is the
	// mutex. Limit is a semaphore's n (1..MaxHolders), 0 for other kinds;
	// Shared asks a read/write lock for a read (shared) hold, false for the
	// write. An acquire of another kind or limit than the key's while
	// anyone holds or waits fails with a *KindMismatchError.
	Kind   Kind
	Limit  int
	Shared bool
	// Keys, for a multi-key acquire (MultiKeyStore.AcquireAll; nil
	// otherwise): the whole set, 1..MaxKeys distinct keys in ascending
	// byte order, and Key is its first. Kind must be the mutex and Session
	// zero.
	Keys []string
}

// Lease is a granted or extended lock.
type Lease struct {
	Token     uint64        // fencing token: strictly increasing across all grants of the store
	Remaining time.Duration // lease left, counted from when the request was sent
	// TTL is the lease's term as the store set it: the TTL asked, for a
	// new grant and for an extend. An Acquire by the owner that already
	// holds the key changes nothing (see Store.Acquire), so its TTL is what
	// the existing lease had left when the store took the call, not the
	// TTL asked. Zero: the store does not say, or the lock is bound to a
	// session (it has no lease of its own); Remaining is what counts in
	// any case.
	TTL time.Duration
}

// KeyInfo is what anyone may learn about a key.
type KeyInfo struct {
	Locked    bool
	Token     uint64        // the holder's fencing token, when Locked
	Remaining time.Duration // the holder's lease (or session, or lock-delay) left, counted from when the request was sent
	Waiters   int           // callers queued for the key
	Metadata  string        // the holder's metadata, when Locked
	// Delayed: nobody holds the key, but the session that held it expired
	// with a lock-delay that has Remaining left; Locked is true (nobody can
	// take it meanwhile).
	Delayed bool
	// Kind is what the key is while Locked; Limit a semaphore's n. For a
	// semaphore or read/write lock, Holders counts its holders (a slot kept
	// by a lock-delay included), Shared says a read/write lock is held by
	// readers, Token is the newest holder's and Remaining the longest hold
	// left, and Metadata is empty (each holder's is in Holds). A
	// mutex's Holders is 1 while Locked and not Delayed.
	Kind    Kind
	Limit   int
	Holders int
	Shared  bool
	// Holds lists a semaphore's or read/write lock's holds in grant
	// (token) order, each with its own token, time left, metadata and
	// mode; a slot kept by a lock-delay is Delayed. Nil for a
	// mutex, whose one holder is KeyInfo's own fields. Never an owner. A
	// store may bound it to keep an answer small (the cluster store: the
	// oldest 4096 in Inspect, 8 per key in List); Holders counts them all.
	Holds []HoldInfo
	// SetKeys: the holder holds the key as one of a multi-key grant; these
	// are all the grant's keys, in byte order (nil otherwise).
	SetKeys []string
	// Reserved: nobody holds the key (Locked is false), but it is kept for
	// the multi-key waiter at the head of its queue, which still waits for
	// another of its keys; an acquire cannot take it.
	Reserved bool
}

// HoldInfo is one hold of a semaphore or read/write lock.
type HoldInfo struct {
	Token     uint64
	Remaining time.Duration // counted like KeyInfo.Remaining
	Metadata  string
	Shared    bool // a read/write lock's reader
	// Delayed: nobody holds this slot; the session that held it (with
	// Token) expired, and its lock-delay keeps the slot free until
	// Remaining ends (Metadata is empty). It still counts in Holders.
	Delayed bool
}

// Lister is an optional Store ability, found by type assertion (like
// database/sql/driver.Pinger): listing the held locks. Client.List uses it and
// reports errors.ErrUnsupported for a store without it.
type Lister interface {
	// List returns the held keys that start with req.Prefix and sort after
	// req.After, in byte order, at most req.Limit of them (0: no limit). Like
	// Inspect, it never reveals owners.
	List(ctx context.Context, req ListRequest) ([]LockInfo, error)
}

// AdminStore is an optional Store ability, found by type assertion: an
// operator's release of a key whoever holds it, for a lock whose holder is
// gone and whose lease would otherwise run for up to MaxTTL.
// Client.ForceRelease uses it and reports errors.ErrUnsupported for a store
// without it.
type AdminStore interface {
	// ForceRelease ends key's lease whoever holds it and hands the key to
	// the next waiter, exactly as the holder's Release would (in the same
	// step: nobody else can take the key in between). It returns the
	// fencing token of the lease it ended, never its owner. When nobody
	// holds key it returns an error matching ErrNotHeld and changes
	// nothing. The former holder's Release then returns false, and its
	// Extend ErrNotHeld. It validates key like Inspect (ErrInvalidKey).
	ForceRelease(ctx context.Context, key string) (token uint64, err error)
}

// StaleReader is an optional Store ability, found by type assertion: reading
// from local state that may be behind (a cluster node's own state machine)
// rather than linearizably. Client.Inspect and Client.List use it when given
// the Stale option. The answers may report a lock since released or expired,
// miss a new one, and overstate Remaining; they never reveal owners. The
// methods take no context: they do not wait for anything.
type StaleReader interface {
	InspectStale(key string) (KeyInfo, error)
	// ListStale is List's stale twin; like Lister.List, one consistent view.
	ListStale(req ListRequest) ([]LockInfo, error)
}

// ListRequest selects the held keys Lister.List returns. To page, pass the last
// key of one page as After of the next.
type ListRequest struct {
	Prefix string // only keys with this prefix; "" for all
	After  string // only keys sorting after this one; "" to start at the beginning
	Limit  int    // at most this many; 0 for no limit
}

// LockInfo is one held key, as Lister.List reports it.
type LockInfo struct {
	Key string
	KeyInfo
}

// Validate checks a list request: the prefix and After at most MaxKeyLen
// bytes, the limit not negative. The error matches ErrInvalidKey or
// ErrInvalidList.
func (req ListRequest) Validate() error {
	switch {
	case len(req.Prefix) > MaxKeyLen:
		return fmt.Errorf("%w: prefix is longer than %d bytes (got %d)", ErrInvalidKey, MaxKeyLen, len(req.Prefix))
	case len(req.After) > MaxKeyLen:
		return fmt.Errorf("%w: after is longer than %d bytes (got %d)", ErrInvalidKey, MaxKeyLen, len(req.After))
	case req.Limit < 0:
		return fmt.Errorf("%w: limit is negative (got %d)", ErrInvalidList, req.Limit)
	}
	return nil
}

// Owner identifies one holder: 128 random bits. Whoever knows a lock's owner
// can release or extend it, so treat it as a secret.
type Owner [16]byte

// NewOwner returns a fresh random owner.
func NewOwner() Owner {
	var o Owner
	if _, err := rand.Read(o[:]); err != nil {
		panic(fmt.Sprintf("lock: reading random owner: %v", err)) // crypto/rand never fails on supported platforms
	}
	return o
}

// IsZero reports whether o is the zero (invalid) owner.
func (o Owner) IsZero() bool { return o == Owner{} }

// String is the owner's 32-digit lowercase hex form.
func (o Owner) String() string { return hex.EncodeToString(o[:]) }

// ParseOwner parses the form String writes.
func ParseOwner(s string) (Owner, error) {
	id, err := parseID(s, "owner", ErrInvalidOwner)
	return Owner(id), err
}

// parseID parses 32 hex digits that are not all zero (an owner's or a
// session's form); what names the ID in errors, which match invalid.
func parseID(s, what string, invalid error) ([16]byte, error) {
	var id [16]byte
	if len(s) != 2*len(id) {
		return [16]byte{}, fmt.Errorf("%w: %s must be 32 hex digits", invalid, what)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return [16]byte{}, fmt.Errorf("%w: %s must be 32 hex digits", invalid, what)
	}
	if id == [16]byte{} {
		return [16]byte{}, fmt.Errorf("%w: %s is zero", invalid, what)
	}
	return id, nil
}
