package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/lockfsm"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/transport"
)

// Waiting.
//
// A multi-key acquire (Node.AcquireAll: fsm.OpAcquireAll, sent in the same
// kindCommand and kindWaitAcquire requests, whose fsm encoding carries it)
// waits exactly like a single key's, parked and withdrawn under the set's
// first key (waitKey): the events of its grant and of its wait's end name
// that key first, and a cancel-wait of it withdraws the whole set.
//
// An Acquire with Wait is one request to the leader (served in-process on
// the leader itself, kindWaitAcquire from a follower), not cut by
// RequestTimeout: it lasts the wait. The leader registers (key, owner) with
// its waiter registry and proposes the acquire; if queued, the request is
// parked until the leader's own state machine applies the owner's grant —
// applied means committed — or the end of its wait. A grant is answered
// with the lease left by the leader's log clock, counted from when the
// request reached it (less 0.1% of the time parked, for a clock running a
// little fast), or the TTL if that is larger (the grant was applied after
// the request arrived, so neither overstates); the caller reports it counted
// from when Acquire was called. An immediate grant (a free key, or the
// idempotent repeat of an earlier grant to the same owner) is answered with
// the lease left at its stamp, never the TTL. These answers need no leadership check: the grant is
// committed, only expiry can take the key from an owner not yet told, and
// no later leader's log clock is ahead of this one's. The end of the wait
// is answered with a *lock.HeldError describing the holder.
//
// A waiter is granted only while someone is there to receive it:
//   - the caller goes away while queued: its ctx ends, its connection
//     breaks or its node dies, and the transport ends the request's ctx at
//     the leader, which withdraws the waiter (cancel-wait, which also
//     releases a grant applied meanwhile, as it does for a grant whose
//     answer finds the ctx already ended). The withdrawal is proposed in
//     the leader's own term only, and only if no newer call by the same
//     owner has parked since: the registry queues "register and acquire"
//     and "check and cancel-wait" under one lock, and the proposer keeps
//     queue order, so a withdrawal never cancels a newer claim. A caller
//     whose ctx ends also withdraws itself, to confirm it; if that cannot
//     be confirmed within twice the election timeout, its error also
//     matches lock.ErrUnknownOutcome. The leader holds such a cancel-wait
//     back while a call by the same owner is parked: that call withdraws
//     itself when its caller goes, and the cancel-wait follows; or it is a
//     newer one, sent again through another node by a client that gave up
//     on the first, whose claim the cancel-wait must not take.
//   - the leader changes (the parked call fails: not leader, leadership
//     lost, connection lost; or this node hears of a new leader while the
//     call is parked, which cuts it): the caller sends the same acquire,
//     with the same owner and the wait left, to the new leader. The state
//     machine makes that idempotent: an owner already queued keeps its
//     place and deadline, one already granted gets its grant.
//   - claims (package fsm): the leader's first command of each term is
//     new-term, after which a waiter queued earlier is granted only once
//     its caller's acquire has claimed it again; a hand-off skips and drops
//     unclaimed waiters. Four election timeouts into its term the leader
//     drops every waiter still unclaimed. So after a leader change or a
//     restart, waiters whose callers have gone are never handed the lock.
//   - no leader answers before the wait ends (no quorum, so no tick): the
//     caller gives up on its own clock two election timeouts after the
//     wait, withdraws, and returns a *lock.HeldError (or ErrUnavailable
//     when it cannot read the holder either).
//
// Two windows remain, as in any lock service: an answer "granted" that the
// leader hands to the transport just as the caller's connection dies is
// lost with it, and the lease lives out its TTL; and a caller's node cut
// off by a partition, rather than dead, keeps its connection open until TCP
// gives up on it (keepalives), so its waiter may be granted meanwhile.

// Waiting is parked at the leader; see "Waiting" above. The caller's
// side is acquireWaiting (one request at a time to whoever leads, sent
// again after a leader change), the leader's is waitAtLeader, and a new
// term's claims are startEpoch and dropUnclaimedAfterGrace.

// unclaimedGrace is how long, in election timeouts, a new leader leaves the
// waiters of earlier terms queued for their callers to claim them again
// before it drops the rest. Callers send again as soon as they see the new
// leader's term ready; a few election timeouts cover a slow follower.
const unclaimedGrace = 4

// startEpoch proposes the term's first command, OpNewTerm, and waits until
// it is applied: from then on a waiter queued in an earlier term is granted
// only once its caller has claimed it again. It retries as becomeReady's
// barrier does, and returns false when the term ends first.
func (t *leaderTerm) startEpoch() bool {
	n := t.n
	for {
		// Stamped by the term's clock, already running, like every command
		// after it: stamps stay non-decreasing in log order.
		body, err := fsm.AppendBatch(nil, []fsm.Command{{Op: fsm.OpNewTerm, Stamp: t.clock.now()}})
		if err != nil {
			n.log.Error("encoding new-term", "error", err, "what_to_do", "a bug: report it")
			return false
		}
		f := n.raft.Apply(body, 0)
		errc := make(chan error, 1)
		go func() { errc <- f.Error() }()
		select {
		case err = <-errc:
		case <-t.stop:
			return false
		}
		if err == nil {
			return true
		}
		n.log.Debug("new-term entry failed", "error", err)
		select {
		case <-t.stop:
			return false
		case <-time.After(n.cfg.CommitTimeout):
		}
	}
}

// dropUnclaimedAfterGrace drops, once the grace has passed, the waiters of
// earlier terms that nobody claimed again: their callers are gone, and
// they should not count in queues until their wait deadlines.
func (t *leaderTerm) dropUnclaimedAfterGrace() {
	n := t.n
	timer := time.NewTimer(unclaimedGrace * n.cfg.ElectionTimeout)
	defer timer.Stop()
	select {
	case <-t.stop:
		return
	case <-timer.C:
	}
	if n.sm.unclaimed() == 0 {
		return
	}
	ctx, cancel := t.context()
	defer cancel()
	res, err := t.propose(ctx, fsm.Command{Op: fsm.OpDropUnclaimed})
	if err != nil {
		n.log.Debug("drop-unclaimed", "error", err)
		return
	}
	n.log.Info("dropped waiters that nobody claimed after the leader change", "waiters", res.Waiters)
}

// acquireWaiting runs an acquire with a wait: one request parked at the
// leader (served here when this node leads) until the grant or the end of
// the wait. When the leader changes, or the call is lost, it sends the same
// acquire (the same owner, the wait left) to the next leader, which claims
// the queued place again or finds the grant. sent is when Acquire was
// called (the node's monotonic clock).
func (n *Node) acquireWaiting(ctx context.Context, req lock.AcquireRequest, sent time.Duration) (lock.Lease, error) {
	n.localWaiting.Add(1)
	defer n.localWaiting.Add(-1)
	owner := fsm.Owner(req.Owner)
	end := sent + req.Wait
	var (
		lastErr   error
		hint      string
		tried     string
		attempted bool // an attempt went to a leader: the owner may be queued
	)
	p := newPacer()
	defer p.stop()
	for {
		if n.closed() {
			return lock.Lease{}, lock.ErrClosed
		}
		if err := n.logFaultError(attempted); err != nil {
			return lock.Lease{}, err
		}
		changed := n.leaderChanged.Wait()
		left := end - n.clock.Monotonic()
		if left <= 0 {
			if !attempted {
				// No leader all along: nothing was queued, nobody to ask.
				return lock.Lease{}, fmt.Errorf("%w: the wait of %v ran out with no leader to ask (%v)", lock.ErrUnavailable, req.Wait, lastErr)
			}
			// The wait ran out without an answer (no leader, or none that
			// answered): make sure the owner is not left queued or granted.
			if err := n.withdraw(ctx, req.Key, owner); err != nil && ctx.Err() != nil {
				return lock.Lease{}, err
			}
			return lock.Lease{}, n.heldError(ctx, req.Key, lastErr)
		}
		cmd := lockfsm.Acquire(req)
		cmd.Owner, cmd.Wait = owner, left
		asked := n.clock.Monotonic()
		// The answer comes at the latest when the wait ends at the leader;
		// past that (a leader without quorum cannot tick), ask again.
		cctx, cancel := context.WithTimeout(ctx, left+2*n.cfg.ElectionTimeout)
		var (
			ans nodewire.WaitAnswer
			err error
		)
		if t := n.term.Load(); t != nil {
			tried, attempted = "", true
			ans, err = n.waitAtLeader(cctx, t, cmd, asked)
		} else {
			var addr, raftLeader string
			addr, raftLeader, err = n.leaderTarget(hint)
			hint = ""
			if err == nil {
				tried, attempted = addr, true
				ans, hint, err = n.callWaiting(cctx, addr, raftLeader, cmd)
			}
		}
		cancel()
		if err == nil {
			return n.waitOutcome(ctx, req, sent, asked, ans)
		}
		switch {
		case ctx.Err() != nil:
			// The caller gave up. The leader withdraws a parked call whose
			// caller left; this confirms it (and covers a call never parked).
			return lock.Lease{}, n.withdraw(ctx, req.Key, owner)
		case errors.Is(err, errShuttingDown), errors.Is(err, transport.ErrClosed):
			if n.closed() {
				return lock.Lease{}, lock.ErrClosed
			}
		case errors.Is(err, ErrBadRequest), errors.Is(err, transport.ErrTooLarge),
			errors.Is(err, ErrMemberTooOld):
			return lock.Lease{}, err
		case errors.Is(err, lock.ErrQuotaExceeded):
			// Refused before anything was proposed. An earlier attempt's
			// place would have been claimed, not refused (quota.go), so
			// the owner is not queued.
			return lock.Lease{}, err
		}
		// Not leader, leadership lost, connection lost, no leader, or the
		// call outlived its wait: send it again.
		lastErr = err
		if err := p.pause(ctx, n, changed, hint, tried, maxRetryBackoff); errors.Is(err, lock.ErrClosed) {
			return lock.Lease{}, lock.ErrClosed
		} else if err != nil {
			return lock.Lease{}, n.withdraw(ctx, req.Key, owner)
		}
	}
}

// callWaiting sends a waiting acquire to the leader at addr (raftLeader:
// see callLeader) and waits for its answer. A leader change reported while
// the call is parked cuts it short (the caller sends it again to the new
// leader at once); the old leader then withdraws it, in its own term only,
// so the withdrawal can never follow the new leader's entries in the log.
// It returns a leader hint from a "not leader" reply.
func (n *Node) callWaiting(ctx context.Context, addr, raftLeader string, cmd fsm.Command) (nodewire.WaitAnswer, string, error) {
	rep, err := n.callLeader(ctx, addr, raftLeader, nodewire.EncodeRequest(&nodewire.WaitAcquire{Command: nodewire.Command{Cmd: cmd}}), true)
	if err == nil {
		err = rep.Err()
	}
	if err != nil {
		return nodewire.WaitAnswer{}, rep.Leader, err
	}
	ans, ok := rep.Answer.(*nodewire.WaitAnswer)
	if !ok {
		return nodewire.WaitAnswer{}, "", fmt.Errorf("%w: %v reply to a waiting acquire", ErrBadRequest, rep.Kind)
	}
	return *ans, "", nil
}

// waitOutcome turns the leader's answer into Acquire's. A grant whose
// caller has gone meanwhile is given back at once.
func (n *Node) waitOutcome(ctx context.Context, req lock.AcquireRequest, sent, asked time.Duration, ans nodewire.WaitAnswer) (lock.Lease, error) {
	switch ans.Status {
	case fsm.StatusGranted:
		if ctx.Err() != nil {
			return lock.Lease{}, n.withdraw(ctx, req.Key, fsm.Owner(req.Owner))
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
			return lock.Lease{}, n.heldError(ctx, req.Key, nil)
		}
	}
	// The leader's answer carries what lockfsm reads of a result: its
	// holder's token and lease left (counted at the leader), its queue
	// length or the place of the key of another kind, and that key's kind.
	res := fsm.Result{Status: ans.Status, Token: ans.Token, ExpiresAt: ans.Remaining, Waiters: ans.Waiters, Kind: ans.Kind, Limit: ans.Limit}
	return lock.Lease{}, lockfsm.AcquireError(req, res, nil)
}

// grantedTTL is the lease's term the leader answered (see waitAnswer.ttl);
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
func (n *Node) heldError(ctx context.Context, key string, why error) error {
	rctx, cancel := context.WithTimeout(ctx, min(n.cfg.RequestTimeout, 2*n.cfg.ElectionTimeout))
	defer cancel()
	if rr, err := n.read(rctx, key, nil); err == nil {
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

// waitAtLeader serves a waiting acquire on this node as leader of term t:
// it proposes the acquire and, if queued, parks until its own state machine
// applies the owner's grant or the end of its wait. received is when the
// request arrived (this node's monotonic clock); a grant's lease left is
// counted from it (see awaitLeaseLeft).
//
// If ctx ends first — the caller gave up, or its connection or its node
// died — the leader withdraws the waiter (cancel-wait, which also releases
// a grant applied meanwhile), so that no lock is handed to nobody. The
// withdrawal is proposed in this term only, and only if no newer call by
// the same owner has parked since (see waiterRegistry). Its errors are
// errNotLeader, errLostLeadership, errShuttingDown and ctx's.
func (n *Node) waitAtLeader(ctx context.Context, t *leaderTerm, cmd fsm.Command, received time.Duration) (nodewire.WaitAnswer, error) {
	if err := n.until(ctx, t, t.ready); err != nil {
		return nodewire.WaitAnswer{}, err
	}
	if err := n.admitQuota(ctx, t, cmd); err != nil {
		return nodewire.WaitAnswer{}, err // see quota.go: a retry of a queued owner is never refused
	}
	var p *proposal
	key := waitKey(cmd)
	w, err := n.awaits.park(key, cmd.Owner, func() (err error) {
		p, err = t.enqueue(cmd)
		return err
	})
	if err != nil {
		return nodewire.WaitAnswer{}, err
	}
	defer n.awaits.unregister(key, cmd.Owner, w)
	res, err := t.await(ctx, p)
	if err != nil {
		if ctx.Err() != nil {
			n.withdrawAtLeader(t, cmd, w)
		}
		return nodewire.WaitAnswer{}, err
	}
	switch res.Status {
	case fsm.StatusGranted:
		if ctx.Err() != nil {
			n.withdrawAtLeader(t, cmd, w)
			return nodewire.WaitAnswer{}, ctx.Err()
		}
		return nodewire.WaitAnswer{Status: fsm.StatusGranted, Token: res.Token, Remaining: remaining(res), TTL: remaining(res)}, nil
	case fsm.StatusHeld, fsm.StatusQueueFull, fsm.StatusNoSession, fsm.StatusKindMismatch:
		return nodewire.WaitAnswer{Status: res.Status, Token: res.Token, Remaining: remaining(res), Waiters: res.Waiters, Kind: res.Kind, Limit: res.Limit}, nil
	case fsm.StatusQueued:
	default:
		return nodewire.WaitAnswer{}, unexpectedStatus("acquire", res)
	}
	for {
		select {
		case ev := <-w.wake:
			if staleEvent(ev, res) {
				continue
			}
			if ev.Kind != fsm.EventGranted {
				// The wait ran out, or its session ended (or, which a
				// parked call's claim rules out, the waiter was dropped
				// unclaimed).
				if !cmd.Session.IsZero() && !n.sm.sessionLive(cmd.Session, 0) {
					return nodewire.WaitAnswer{Status: fsm.StatusNoSession}, nil
				}
				st, at := n.sm.lookup(key, t.clock.now())
				ans := nodewire.WaitAnswer{Status: fsm.StatusHeld, Waiters: st.Waiters}
				if st.Held {
					ans.Token, ans.Remaining = st.Token, max(st.ExpiresAt-at, 0)
				}
				return ans, nil
			}
			if ctx.Err() != nil {
				n.withdrawAtLeader(t, cmd, w)
				return nodewire.WaitAnswer{}, ctx.Err()
			}
			left, ok := t.awaitLeaseLeft(ev.ExpiresAt, received)
			if !ok {
				// The lease ran out before the answer: held by nobody now.
				return nodewire.WaitAnswer{Status: fsm.StatusHeld}, nil
			}
			// This grant was applied after the acquire queued, so after the
			// request arrived: the TTL counted from arrival never overstates
			// either, and may be the larger after a long park.
			return nodewire.WaitAnswer{Status: fsm.StatusGranted, Token: ev.Token, Remaining: max(left, cmd.TTL), TTL: cmd.TTL}, nil
		case <-t.stop:
			// Still queued (or granted) in the log: the caller sends the
			// acquire again to the next leader, which is idempotent.
			return nodewire.WaitAnswer{}, errNotLeader
		case <-ctx.Done():
			n.withdrawAtLeader(t, cmd, w)
			return nodewire.WaitAnswer{}, ctx.Err()
		case <-n.closing:
			return nodewire.WaitAnswer{}, errShuttingDown
		}
	}
}

// withdrawAtLeader proposes, in term t, the cancel-wait of a parked call
// whose caller is gone, unless a newer call by the same owner has parked
// since. It waits for the commit within the patience n.withdraw allows; a
// cancel-wait that does not commit leaves the waiter to the next term,
// where it is unclaimed.
func (n *Node) withdrawAtLeader(t *leaderTerm, cmd fsm.Command, w *waiter) {
	var p *proposal
	key := waitKey(cmd)
	queued := n.awaits.withdraw(key, cmd.Owner, w, func() {
		p, _ = t.enqueue(fsm.Command{Op: fsm.OpCancelWait, Key: key, Owner: cmd.Owner})
	})
	if !queued || p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(n.cfg.RequestTimeout, 2*n.cfg.ElectionTimeout))
	defer cancel()
	res, err := t.await(ctx, p)
	switch {
	case err != nil:
		n.log.Warn("could not withdraw a waiting acquire whose caller left; it stays queued until its wait ends, and a grant to it is released",
			"key", key, "error", err)
	case res.Status == fsm.StatusReleased:
		n.log.Debug("released a lock granted to a caller that had left", "key", key)
	}
}

// cancelWaitAtLeader serves a cancel-wait sent by a caller (one that gave
// up). While a waiting acquire by the same owner is parked here, the
// cancel-wait waits for that call to end before it is proposed: the call
// may be the giving-up caller's own, which withdraws itself as soon as its
// end reaches the leader (the cancel-wait then follows its withdrawal), or
// a newer call (a client that sent the same owner again through another
// node), whose claim or grant an older caller's cancel-wait must not take
// away (the cancel-wait then waits until its ctx ends and the caller's
// error says the outcome is unknown). The check and the queuing happen
// under the registry's claim lock, so a call parking meanwhile is either
// seen or queued after the cancel-wait.
func (n *Node) cancelWaitAtLeader(ctx context.Context, t *leaderTerm, cmd fsm.Command) (fsm.Result, error) {
	for {
		var (
			p   *proposal
			err error
		)
		parked := n.awaits.unlessParked(cmd.Key, cmd.Owner, func() {
			p, err = t.enqueue(cmd)
		})
		if err != nil {
			return fsm.Result{}, err
		}
		if parked == nil {
			return t.await(ctx, p)
		}
		if err := n.until(ctx, t, parked); err != nil {
			return fsm.Result{}, err
		}
	}
}

// waitKey is the key a waiting acquire is parked, withdrawn and read
// under: its key, or a multi-key acquire's first key. The state machine
// names a set's first key first in the events of its grant and of the end
// of its wait, and a cancel-wait of any key of the set withdraws the set.
func waitKey(cmd fsm.Command) string {
	if cmd.Op == fsm.OpAcquireAll && len(cmd.Keys) > 0 {
		return cmd.Keys[0]
	}
	return cmd.Key
}

// staleEvent reports whether ev, delivered to a waiter whose acquire was
// queued with result queued, belongs to an earlier acquisition by the same
// owner (registered before the acquire was applied, the waiter may see
// events of entries applied before it). This waiter's grant follows the
// holder it queued behind on that key, so it has a larger token; its wait
// deadline, or its being dropped, lies after the log time it queued at.
func staleEvent(ev fsm.Event, queued fsm.Result) bool {
	switch ev.Kind {
	case fsm.EventGranted:
		return ev.Token <= queued.Token
	case fsm.EventWaitExpired, fsm.EventUnclaimed:
		return ev.At <= queued.Now
	}
	return false
}
