package integration

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// Sessions in the fenced-register workload (fencedConfig.Session). A
// holder's window ends at its own conservative deadline for the session:
// the time it sent the acquire (or the last renew) plus the Remaining it was
// told. The checks are the fenced workload's: no two windows overlap (so
// no session-bound lock outlived its session into another holder's time,
// and none ended before its holder's deadline), and the register never
// refused a holder inside its window.

// sessionStoreOf is s's sessions, or an error no store call gives.
func sessionStoreOf(s lock.Store) (lock.SessionStore, error) {
	ss, ok := s.(lock.SessionStore)
	if !ok {
		return nil, fmt.Errorf("%T has no sessions", s)
	}
	return ss, nil
}

func (h *holder) holdOnceInSession(budget context.Context) {
	id := lock.NewSessionID()
	ttl := h.cfg.TTL
	res := h.call(budget, func(ctx context.Context, s lock.Store) error {
		ss, err := sessionStoreOf(s)
		if err != nil {
			return err
		}
		_, err = ss.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: ttl})
		return err
	})
	if !res.known || res.err != nil {
		// A create whose outcome is unknown ends by itself within its TTL.
		time.Sleep(time.Duration(h.rng.IntN(20)) * time.Millisecond)
		return
	}
	sent := time.Now()
	var lease lock.Lease
	req := h.acquireRequest()
	req.TTL, req.Session = 0, id
	res = h.call(budget, func(ctx context.Context, s lock.Store) error {
		var err error
		lease, err = s.Acquire(ctx, req)
		return err
	})
	if !res.known || res.err != nil {
		// Held, the session gone, or unknown: ending the session gives
		// back whatever it may hold.
		h.destroySession(budget, id)
		time.Sleep(time.Duration(h.rng.IntN(20)) * time.Millisecond)
		return
	}
	start := time.Now()
	deadline := sent.Add(lease.Remaining)
	h.stats.Holds++
	for i := 0; i < 1+h.rng.IntN(h.cfg.Writes); i++ {
		late := false
		if h.cfg.Stall && h.rng.IntN(8) == 0 {
			// Stall past the session without noticing, then carry on.
			h.stats.Stalls++
			time.Sleep(ttl + between(h.rng, 0, ttl))
			late = true
		} else if time.Until(deadline) < safetyMargin {
			break
		}
		if !h.work(lease.Token, deadline, late) {
			break
		}
		if h.rng.IntN(2) == 0 {
			renewSent := time.Now()
			var sl lock.SessionLease
			res := h.call(budget, func(ctx context.Context, s lock.Store) error {
				ss, err := sessionStoreOf(s)
				if err != nil {
					return err
				}
				sl, err = ss.RenewSession(ctx, id)
				return err
			})
			if res.known && res.err == nil {
				deadline = renewSent.Add(sl.Remaining)
			} else if res.known {
				break // the session ended: the lock with it
			}
		}
	}
	end := time.Now()
	if end.After(deadline) {
		end = deadline
	}
	if end.After(start) {
		h.windows(window{Client: h.id, Token: lease.Token, Start: start.UnixNano(), End: end.UnixNano(), Sent: sent.UnixNano(), Shared: req.Shared})
	}
	switch n := h.rng.IntN(4); {
	case h.cfg.Expiry && n == 0:
		// Left to expire: the session's end hands the lock on.
	case n == 1:
		h.release(budget)
		h.destroySession(budget, id)
	default:
		h.destroySession(budget, id) // releases the lock with the session
	}
}

func (h *holder) destroySession(budget context.Context, id lock.SessionID) {
	h.call(budget, func(ctx context.Context, s lock.Store) error {
		ss, err := sessionStoreOf(s)
		if err != nil {
			return err
		}
		_, err = ss.DestroySession(ctx, id)
		return err
	})
}
