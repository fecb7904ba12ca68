package cluster

import (
	"context"

	"github.com/raftlock/raftlock/cluster/nodewire"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/lockfsm"
	"github.com/raftlock/raftlock/lock"
)

// Sessions (lock.SessionStore).
//
// Create, renew and destroy are commands like release and extend: proposed
// by the leader (forwarded by a follower), stamped with its log clock, and
// answered once applied. A session's end is a deadline of the state
// machine, like a lease's, so the leader's expiry timer ends it on time and
// releases its locks, handing each key to its next waiter, in that one
// entry. Renewals of many sessions share raft entries: the proposer puts
// whatever is queued into one entry (up to 512 commands), so the renewals
// that arrive while an entry commits go out together in the next one. A
// session's Remaining is counted from the stamp of the command, as a
// lease's: the leader's log clock before it answered, so a client counting
// it from when it sent the request never counts past the session's end.

var _ lock.SessionStore = (*Node)(nil)

// CreateSession implements lock.SessionStore.
func (n *Node) CreateSession(ctx context.Context, req lock.SessionRequest) (lock.SessionLease, error) {
	if err := req.Validate(); err != nil {
		return lock.SessionLease{}, err
	}
	if n.closed() {
		return lock.SessionLease{}, lock.ErrClosed
	}
	create := lockfsm.CreateSession(req)
	res, err := n.command(ctx, create)
	if err != nil {
		return lock.SessionLease{}, err
	}
	// This node's own copy of the session tells its TTL when it is the
	// one the leader answered (see lockfsm.SessionCreated); the answer
	// does not carry it.
	return lockfsm.SessionCreated(res, n.sm.sessionState(create.Session))
}

// RenewSession implements lock.SessionStore.
func (n *Node) RenewSession(ctx context.Context, id lock.SessionID) (lock.SessionLease, error) {
	if err := lock.ValidateSessionID(id); err != nil {
		return lock.SessionLease{}, err
	}
	if n.closed() {
		return lock.SessionLease{}, lock.ErrClosed
	}
	res, err := n.command(ctx, lockfsm.RenewSession(id))
	if err != nil {
		return lock.SessionLease{}, err
	}
	return lockfsm.SessionRenewed(res)
}

// DestroySession implements lock.SessionStore. As Release, a retry after an
// attempt whose outcome was unknown reports true when the first attempt
// destroyed the session, and false when it had expired.
func (n *Node) DestroySession(ctx context.Context, id lock.SessionID) (bool, error) {
	if err := lock.ValidateSessionID(id); err != nil {
		return false, err
	}
	if n.closed() {
		return false, lock.ErrClosed
	}
	return n.releasing(ctx, lockfsm.DestroySession(id))
}

// InspectSession implements lock.SessionStore with a linearizable read at
// the leader, as Inspect: Remaining is the leader's figure when it
// answered, counted from when InspectSession was called.
func (n *Node) InspectSession(ctx context.Context, id lock.SessionID) (lock.SessionInfo, error) {
	if err := lock.ValidateSessionID(id); err != nil {
		return lock.SessionInfo{}, err
	}
	if n.closed() {
		return lock.SessionInfo{}, lock.ErrClosed
	}
	sr, err := ask[*nodewire.SessionResult](ctx, n, &nodewire.SessionRead{Session: fsm.Owner(id)}, nil)
	if err != nil {
		return lock.SessionInfo{}, err
	}
	if !sr.Live {
		return lock.SessionInfo{}, nil
	}
	return lock.SessionInfo{Live: true, TTL: sr.TTL, Remaining: max(sr.Remaining, 0), LockDelay: sr.LockDelay, Keys: sr.Keys}, nil
}
