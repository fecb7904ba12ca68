package waiting

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/cluster/internal/retry"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/errcode"
	"github.com/raftlock/raftlock/internal/lockfsm"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/transport"
)

// Acquire runs an acquire with a wait: one request parked at the leader
// (served here when this node leads) until the grant or the end of the
// wait. When the leader changes, or the call is lost, it sends the same
// acquire (the same owner, the wait left) to the next leader, which claims
// the queued place again or finds the grant. sent is when Acquire was
// called (the node's monotonic clock).
func (w *Waiters) Acquire(ctx context.Context, req lock.AcquireRequest, sent time.Duration) (lock.Lease, error) {
	w.local.Add(1)
	defer w.local.Add(-1)
	owner := fsm.Owner(req.Owner)
	end := sent + req.Wait
	var (
		lastErr   error
		hint      string
		tried     string
		attempted bool // an attempt went to a leader: the owner may be queued
	)
	p := retry.NewPacer(w.node, w.cfg.Closing)
	defer p.Stop()
	for {
		if err := w.node.Closed(attempted); err != nil {
			// An attempt that reached a leader may have queued the owner, or
			// been granted with its answer lost: the outcome is unknown.
			return lock.Lease{}, err
		}
		if err := w.node.LogFault(attempted); err != nil {
			return lock.Lease{}, err
		}
		changed := w.node.LeaderChanged()
		left := end - w.cfg.Monotonic()
		if left <= 0 {
			if !attempted {
				// No leader all along: nothing was queued, nobody to ask.
				return lock.Lease{}, fmt.Errorf("%w: the wait of %v ran out with no leader to ask (%v)", lock.ErrUnavailable, req.Wait, lastErr)
			}
			// The wait ran out without an answer (no leader, or none that
			// answered): make sure the owner is not left queued or granted.
			// Unless that is confirmed, the outcome is unknown: an answer
			// lost on its way (a grant) or a waiter still queued may leave
			// the owner holding the lock, and a caller told "held" (or
			// "unavailable": not applied) would not release it, and would
			// get that old grant back with its next acquire.
			if err := w.withdraw(ctx, req.Key, owner); err != nil {
				if ctx.Err() != nil {
					return lock.Lease{}, err
				}
				return lock.Lease{}, fmt.Errorf("%w: the wait of %v ran out with no answer from a leader (%v), and withdrawing the acquire could not be confirmed: the owner may hold the lock or be queued; release it with the same owner to be sure",
					lock.ErrUnknownOutcome, req.Wait, lastErr)
			}
			return lock.Lease{}, w.heldError(ctx, req.Key, lastErr)
		}
		cmd := lockfsm.Acquire(req)
		cmd.Owner, cmd.Wait = owner, left
		asked := w.cfg.Monotonic()
		// The answer comes at the latest when the wait ends at the leader;
		// past that (a leader without quorum cannot tick), ask again.
		cctx, cancel := context.WithTimeout(ctx, left+2*w.cfg.ElectionTimeout)
		var (
			ans nodewire.WaitAnswer
			err error
		)
		if t := w.node.Term(); t != nil {
			tried, attempted = "", true
			ans, err = w.AtLeader(cctx, t, cmd, asked)
		} else {
			ans, tried, hint, err = w.node.CallLeader(cctx, cmd, hint)
			attempted = attempted || tried != ""
		}
		cancel()
		if err == nil {
			return w.waitOutcome(ctx, req, sent, asked, ans)
		}
		switch {
		case ctx.Err() != nil:
			// The caller gave up. The leader withdraws a parked call whose
			// caller left; this confirms it (and covers a call never parked).
			return lock.Lease{}, w.withdraw(ctx, req.Key, owner)
		case errors.Is(err, nodewire.ErrShuttingDown), errors.Is(err, transport.ErrClosed):
			if err := w.node.Closed(attempted); err != nil {
				return lock.Lease{}, err
			}
		case errors.Is(err, nodewire.ErrBadRequest), errors.Is(err, transport.ErrTooLarge),
			errors.Is(err, errcode.ErrMemberTooOld):
			return lock.Lease{}, err
		case errors.Is(err, lock.ErrQuotaExceeded):
			// Refused before anything was proposed. An earlier attempt's
			// place would have been claimed, not refused (cluster's
			// quota.go), so the owner is not queued.
			return lock.Lease{}, err
		}
		// Not leader, leadership lost, connection lost, no leader, or the
		// call outlived its wait: send it again.
		lastErr = err
		if err := p.Pause(ctx, changed, hint, tried, retry.MaxBackoff); errors.Is(err, lock.ErrClosed) {
			return lock.Lease{}, w.node.Closed(attempted)
		} else if err != nil {
			return lock.Lease{}, w.withdraw(ctx, req.Key, owner)
		}
	}
}

// waitOutcome turns the leader's answer into Acquire's. A grant whose
// caller has gone meanwhile is not taken back by the withdrawal (the
// leader answered it, so it cannot tell this call from a newer one of the
// same owner: see registry): its error matches lock.ErrUnknownOutcome,
// and the owner's Release gives it back.
func (w *Waiters) waitOutcome(ctx context.Context, req lock.AcquireRequest, sent, asked time.Duration, ans nodewire.WaitAnswer) (lock.Lease, error) {
	switch ans.Status {
	case fsm.StatusGranted:
		if ctx.Err() != nil {
			return lock.Lease{}, w.withdraw(ctx, req.Key, fsm.Owner(req.Owner))
		}
		// remaining counts from when the request reached the leader, after
		// asked. (Not max'ed with the TTL here: an immediate grant may be
		// the idempotent repeat of a grant from before this call.)
		return lock.Lease{Token: ans.Token, Remaining: asked - sent + ans.Remaining, TTL: grantedTTL(req, ans)}, nil
	case fsm.StatusHeld:
		if ans.Token == 0 {
			// No holder to report: the key is reserved for a multi-key
			// waiter, or was free by the time the wait ran out. A fresh
			// read tells which (rare: a refusal names its holder).
			return lock.Lease{}, w.heldError(ctx, req.Key, nil)
		}
	}
	// The leader's answer carries what lockfsm reads of a result: its
	// holder's token and lease left (counted at the leader), its queue
	// length or the place of the key of another kind, and that key's kind.
	res := fsm.Result{Status: ans.Status, Token: ans.Token, ExpiresAt: ans.Remaining, Waiters: ans.Waiters, Kind: ans.Kind, Limit: ans.Limit}
	return lock.Lease{}, lockfsm.AcquireError(req, res, nil)
}

// grantedTTL is the lease's term the leader answered (WaitAnswer.TTL);
// req.TTL if it said none.
func grantedTTL(req lock.AcquireRequest, ans nodewire.WaitAnswer) time.Duration {
	if ans.TTL > 0 {
		return ans.TTL
	}
	return req.TTL
}

// heldError describes the holder for a caller whose wait ran out without
// an answer, from a fresh read when one is possible; the read gets as long
// as a withdrawal, not a whole RequestTimeout, since no leader answered.
func (w *Waiters) heldError(ctx context.Context, key string, why error) error {
	rctx, cancel := context.WithTimeout(ctx, w.patience())
	defer cancel()
	if rr, err := w.node.Read(rctx, key); err == nil {
		if !rr.Held {
			return &lock.HeldError{Key: key, Reserved: rr.Reserved}
		}
		return &lock.HeldError{Key: key, Token: rr.Token, Remaining: rr.Remaining}
	}
	if why != nil {
		return fmt.Errorf("%w: the wait ran out with no answer from a leader (%v)", lock.ErrUnavailable, why)
	}
	return &lock.HeldError{Key: key}
}

// withdraw takes a caller that gave up out of the queue (and releases the
// lock if it was handed over meanwhile), then returns ctx's error, which
// names key as the memory store's does (lockfsm.WaitEnded). It waits
// for the cancel-wait at most twice the election timeout past ctx's end; if
// that is not enough, the error also matches lock.ErrUnknownOutcome and the
// owner may still be queued until its wait deadline (or hold the lock until
// its TTL): Release it with the same owner to be sure.
func (w *Waiters) withdraw(ctx context.Context, key string, owner fsm.Owner) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.patience())
	defer cancel()
	res, err := w.node.Command(wctx, fsm.Command{Op: fsm.OpCancelWait, Key: key, Owner: owner})
	switch {
	case err != nil:
		w.log.Warn("could not withdraw an abandoned acquire", "key", key, "error", err)
		return unknownWithdrawal(ctx, fmt.Errorf("withdrawing the acquire of %q: %w", key, err))
	case res.Status == fsm.StatusHeld:
		// The leader answered a call of this owner with its grant (a newer
		// call, or this one with its answer lost), or cannot rule that out
		// (see mayHaveAnswered): not withdrawn, and not ended under that
		// call (see CancelWait).
		return unknownWithdrawal(ctx, fmt.Errorf("the owner may hold %q (token %d): the leader told a call of it so, or cannot rule it out; if none of your calls has it, release it with the same owner", key, res.Token))
	}
	if err := ctx.Err(); err != nil {
		return lockfsm.WaitEnded(key, err)
	}
	return nil
}

// unknownWithdrawal is withdraw's error when it could not confirm the
// withdrawal: lock.ErrUnknownOutcome, why, and ctx's error if ctx ended.
func unknownWithdrawal(ctx context.Context, why error) error {
	if ctx.Err() == nil {
		return fmt.Errorf("%w: %v", lock.ErrUnknownOutcome, why)
	}
	return fmt.Errorf("%w: %w (%v)", lock.ErrUnknownOutcome, ctx.Err(), why)
}
