package redis

import (
	"context"
	"fmt"

	"github.com/raftlock/raftlock/lock"
)

// CreateSession implements lock.SessionStore.
func (s *Store) CreateSession(ctx context.Context, req lock.SessionRequest) (lock.SessionLease, error) {
	if err := req.Validate(); err != nil {
		return lock.SessionLease{}, err
	}
	r, err := s.runReply(ctx, s.scripts.session, "create session", "create", req.ID.String(), us(req.TTL), us(req.LockDelay))
	if err != nil {
		return lock.SessionLease{}, err
	}
	return lock.SessionLease{Remaining: r.dur(0), TTL: r.dur(1)}, nil
}

// RenewSession implements lock.SessionStore.
func (s *Store) RenewSession(ctx context.Context, id lock.SessionID) (lock.SessionLease, error) {
	if err := lock.ValidateSessionID(id); err != nil {
		return lock.SessionLease{}, err
	}
	r, err := s.runReply(ctx, s.scripts.session, "renew session", "renew", id.String())
	if err != nil {
		return lock.SessionLease{}, err
	}
	if len(r) == 0 {
		return lock.SessionLease{}, fmt.Errorf("%w: the session has ended or does not exist", lock.ErrNoSession)
	}
	return lock.SessionLease{Remaining: r.dur(0), TTL: r.dur(1), Keys: int(r.int(2))}, nil
}

// DestroySession implements lock.SessionStore.
func (s *Store) DestroySession(ctx context.Context, id lock.SessionID) (bool, error) {
	if err := lock.ValidateSessionID(id); err != nil {
		return false, err
	}
	v, err := s.run(ctx, s.scripts.session, "destroy session", "destroy", id.String())
	if err != nil {
		return false, err
	}
	n, _ := v.(int64)
	return n == 1, nil
}

// InspectSession implements lock.SessionStore.
func (s *Store) InspectSession(ctx context.Context, id lock.SessionID) (lock.SessionInfo, error) {
	if err := lock.ValidateSessionID(id); err != nil {
		return lock.SessionInfo{}, err
	}
	r, err := s.runReply(ctx, s.scripts.session, "inspect session", "inspect", id.String())
	if err != nil || len(r) == 0 {
		return lock.SessionInfo{}, err
	}
	return lock.SessionInfo{Live: true, TTL: r.dur(0), Remaining: r.dur(1), LockDelay: r.dur(2), Keys: int(r.int(3))}, nil
}
