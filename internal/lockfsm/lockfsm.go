// Package lockfsm translates between package lock, the user's API, and
// package fsm, the state machine that keeps the locks: a lock request
// becomes a command here, and a command's result or a key's state becomes
// a lease, an error or a KeyInfo here. The stores that run the machine
// (the memory store and a cluster node) both go through it, so that they
// report every outcome identically and no field is lost on the way.
package lockfsm

import (
	"fmt"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// ErrNoSession is the error of a command under a session that has ended
// (fsm.StatusNoSession).
var ErrNoSession = fmt.Errorf("%w: the session has ended or does not exist", lock.ErrNoSession)

// Acquire is the machine's command for req (its Stamp zero): an acquire,
// or an acquire-all for a request with Keys.
func Acquire(req lock.AcquireRequest) fsm.Command {
	c := fsm.Command{Op: fsm.OpAcquire, Key: req.Key, Owner: fsm.Owner(req.Owner), TTL: req.TTL, Wait: req.Wait, Session: fsm.Owner(req.Session), Meta: req.Metadata,
		Kind: fsm.Kind(req.Kind), Limit: req.Limit, Shared: req.Shared}
	if req.Keys != nil {
		c.Op, c.Key, c.Keys = fsm.OpAcquireAll, "", req.Keys
	}
	return c
}

// Release is the machine's release of key by owner.
func Release(key string, owner lock.Owner) fsm.Command {
	return fsm.Command{Op: fsm.OpRelease, Key: key, Owner: fsm.Owner(owner)}
}

// Extend is the machine's extend of owner's lease on key to ttl.
func Extend(key string, owner lock.Owner, ttl time.Duration) fsm.Command {
	return fsm.Command{Op: fsm.OpExtend, Key: key, Owner: fsm.Owner(owner), TTL: ttl}
}

// ForceRelease is the machine's force-release of key, whoever holds it.
func ForceRelease(key string) fsm.Command {
	return fsm.Command{Op: fsm.OpForceRelease, Key: key}
}

// CreateSession is the machine's session create for req.
func CreateSession(req lock.SessionRequest) fsm.Command {
	return fsm.Command{Op: fsm.OpSessionCreate, Session: fsm.Owner(req.ID), TTL: req.TTL, LockDelay: req.LockDelay}
}

// RenewSession is the machine's renew of session id.
func RenewSession(id lock.SessionID) fsm.Command {
	return fsm.Command{Op: fsm.OpSessionRenew, Session: fsm.Owner(id)}
}

// DestroySession is the machine's destroy of session id.
func DestroySession(id lock.SessionID) fsm.Command {
	return fsm.Command{Op: fsm.OpSessionDestroy, Session: fsm.Owner(id)}
}

// SessionCreated is the lease of a session create answered res (its
// SessionError when res did not grant it), given held, the session as the
// store's own state machine holds it after the create (the zero
// SessionState when it cannot read it). The machine answers a new session's deadline, and a retry's
// (a create of a live session) the deadline the session already has,
// unchanged. TTL is what the store holds, never the TTL asked: a retry
// may ask another TTL than the create that made the session, and a
// keep-alive paced by an overstated TTL would renew too late. It is the
// session's own TTL when held is that very session (the same deadline;
// a cluster node reading its own copy may not have applied the create
// yet, or may have applied a later renew), else the session's time left,
// which the session's TTL is never shorter than: for a new session, both
// are the TTL asked.
func SessionCreated(res fsm.Result, held fsm.SessionState) (lock.SessionLease, error) {
	if res.Status != fsm.StatusGranted {
		return lock.SessionLease{}, SessionError(fsm.OpSessionCreate, res)
	}
	lease := lock.SessionLease{Remaining: Remaining(res), TTL: Remaining(res)}
	if held.Live && held.ExpiresAt == res.ExpiresAt {
		lease.TTL = held.TTL
	}
	return lease, nil
}

// SessionRenewed is the lease of a session renew answered res, or
// SessionError when res did not extend it: the session now ends its TTL
// after the renew's stamp, so what is left of it is its TTL. Keys counts
// the keys it holds or waits for.
func SessionRenewed(res fsm.Result) (lock.SessionLease, error) {
	if res.Status != fsm.StatusExtended {
		return lock.SessionLease{}, SessionError(fsm.OpSessionRenew, res)
	}
	return lock.SessionLease{Remaining: Remaining(res), TTL: Remaining(res), Keys: res.Waiters}, nil
}

// SessionError is the error of a session command op answered res when res
// did not create or renew the session: ErrNoSession when the session has
// ended.
func SessionError(op fsm.Op, res fsm.Result) error {
	if res.Status == fsm.StatusNoSession {
		return ErrNoSession
	}
	return fmt.Errorf("lock: %v answered %v", op, res.Status)
}

// Ended is what a release or a session destroy (op) answered res reports:
// true when it ended the lease or the session (or is the repeat of the
// command that did: the machine remembers), false when there was nothing
// of the owner's to end, and an error for any other answer.
func Ended(op fsm.Op, res fsm.Result) (bool, error) {
	switch {
	case res.Status == fsm.StatusReleased:
		return true, nil
	case op == fsm.OpRelease && res.Status == fsm.StatusNotHeld,
		op == fsm.OpSessionDestroy && res.Status == fsm.StatusNoSession:
		return false, nil
	}
	return false, fmt.Errorf("lock: %v answered %v", op, res.Status)
}

// Granted is the lease of an acquire answered fsm.StatusGranted. The lease
// left (ExpiresAt-Now) is the TTL asked for a new grant, and what the lease
// had left for a repeat by its holder; a lock bound to a session has no
// lease of its own (TTL 0).
func Granted(req lock.AcquireRequest, res fsm.Result) lock.Lease {
	lease := lock.Lease{Token: res.Token, Remaining: Remaining(res), TTL: Remaining(res)}
	if !req.Session.IsZero() {
		lease.TTL = 0
	}
	return lease
}

// Remaining is a command's lease left at its own stamp (never negative).
func Remaining(res fsm.Result) time.Duration { return max(res.ExpiresAt-res.Now, 0) }

// AcquireError is the error of an acquire answered res when res neither
// granted nor queued: the one table of the machine's refusals of an
// acquire. lookup reads the store's own state (nil: it cannot), to name
// the key of a multi-key acquire that is not free (see Held).
func AcquireError(req lock.AcquireRequest, res fsm.Result, lookup func(key string) fsm.KeyState) error {
	switch res.Status {
	case fsm.StatusHeld:
		return Held(req, res, lookup)
	case fsm.StatusQueueFull:
		return fmt.Errorf("%w: %d callers already wait for %q", lock.ErrQueueFull, res.Waiters, req.Key)
	case fsm.StatusNoSession:
		return ErrNoSession
	case fsm.StatusKindMismatch:
		return KindMismatch(req, res)
	}
	return fmt.Errorf("lock: acquire of %q answered %v", req.Key, res.Status)
}

// Extended is the lease of an extend of key to ttl answered res, or its
// error when res did not extend: the new lease is counted from the
// extend's stamp, so what is left of it is the TTL.
func Extended(key string, res fsm.Result, ttl time.Duration) (lock.Lease, error) {
	switch res.Status {
	case fsm.StatusExtended:
		return lock.Lease{Token: res.Token, Remaining: Remaining(res), TTL: ttl}, nil
	case fsm.StatusNotHeld:
		return lock.Lease{}, fmt.Errorf("%w: %q", lock.ErrNotHeld, key)
	}
	return lock.Lease{}, fmt.Errorf("lock: extend of %q answered %v", key, res.Status)
}

// WaitEnded is the error of a waiting acquire of key given up because the
// caller's context ended with err, once its withdrawal is confirmed: the
// key and err, which it matches.
func WaitEnded(key string, err error) error {
	return fmt.Errorf("lock: waiting for %q: %w", key, err)
}

// ForceReleased is the token of the lease a force-release of key answered
// res ended, or its error when res did not release.
func ForceReleased(key string, res fsm.Result) (uint64, error) {
	switch res.Status {
	case fsm.StatusReleased:
		return res.Token, nil
	case fsm.StatusNotHeld:
		return 0, fmt.Errorf("%w: nobody holds %q", lock.ErrNotHeld, key)
	}
	return 0, fmt.Errorf("lock: force-release of %q answered %v", key, res.Status)
}

// KindMismatch is the error of an acquire answered fsm.StatusKindMismatch
// (res.Kind and res.Limit say what the key is). For a multi-key request,
// res.Waiters is the 1-based place in req.Keys of the key that is of
// another kind, which the error names.
func KindMismatch(req lock.AcquireRequest, res fsm.Result) error {
	key := req.Key
	if req.Keys != nil && res.Waiters >= 1 && res.Waiters <= len(req.Keys) {
		key = req.Keys[res.Waiters-1]
	}
	return &lock.KindMismatchError{Key: key, Kind: lock.Kind(res.Kind), Limit: res.Limit, AskedKind: req.Kind, AskedLimit: req.Limit}
}

// Held is the *HeldError of a StatusHeld answer res to req. The machine
// answers held with token 0 only for a key nobody holds, which a multi-key
// waiter at the head of its queue keeps (tokens start at 1): that is a
// Reserved error, with no token or time to report. For a multi-key
// acquire the answer is about the first of its keys that is not free,
// which lookup (a read of the store's own state, nil for none) finds by
// that token; the error names it, or req.Key when lookup cannot tell.
func Held(req lock.AcquireRequest, res fsm.Result, lookup func(key string) fsm.KeyState) *lock.HeldError {
	held := &lock.HeldError{Key: req.Key, Reserved: res.Token == 0}
	if !held.Reserved {
		held.Token, held.Remaining = res.Token, Remaining(res)
	}
	if len(req.Keys) > 1 && lookup != nil {
		for _, k := range req.Keys {
			st := lookup(k)
			if (held.Reserved && st.Reserved) || (!held.Reserved && st.Held && st.Token == res.Token) {
				held.Key = k
				break
			}
		}
	}
	return held
}

// KeyInfo is what anyone may learn of a key in state st read at log time
// now (never its owner); setKeys are the keys of its holder's multi-key
// grant (nil for none).
func KeyInfo(st fsm.KeyState, now time.Duration, setKeys []string) lock.KeyInfo {
	if !st.Held {
		return lock.KeyInfo{Waiters: st.Waiters, Reserved: st.Reserved}
	}
	return lock.KeyInfo{
		Locked:    true,
		Token:     st.Token,
		Remaining: max(st.ExpiresAt-now, 0),
		Waiters:   st.Waiters,
		Metadata:  st.Meta,
		Delayed:   st.Delayed,
		Kind:      lock.Kind(st.Kind),
		Limit:     st.Limit,
		Holders:   Holders(st),
		Shared:    st.Shared,
		Holds:     Holds(st.Holds, now),
		SetKeys:   setKeys,
	}
}

// SetKeys is KeyInfo.SetKeys of st, read from m: the keys of its holder's
// multi-key grant, nil if it holds no set. The caller serializes the read
// with m's Apply, as every read of m.
func SetKeys(m *fsm.Machine, st fsm.KeyState) []string {
	if st.SetKeys == 0 || st.Owner.IsZero() {
		return nil
	}
	return m.SetKeys(st.Owner)
}

// Holds is KeyInfo.Holds of a key's holds read at now: nil for none.
func Holds(holds []fsm.Hold, now time.Duration) []lock.HoldInfo {
	if len(holds) == 0 {
		return nil
	}
	out := make([]lock.HoldInfo, len(holds))
	for i, h := range holds {
		out[i] = lock.HoldInfo{Token: h.Token, Remaining: h.ExpiresAt - now, Metadata: h.Meta, Shared: h.Shared, Delayed: h.Delayed}
	}
	return out
}

// Holders is KeyInfo.Holders of a key's state: a mutex's one holder (none
// while free or while a lock-delay keeps it), or a group's count.
func Holders(st fsm.KeyState) int {
	if st.Kind == fsm.KindMutex {
		if st.Held && !st.Delayed {
			return 1
		}
		return 0
	}
	return st.Holders
}
