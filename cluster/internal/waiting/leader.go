package waiting

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/lockfsm"
)

// A waiting acquire is parked at the leader (AtLeader), which answers it
// when its own state machine applies the grant. Applying means
// committed, so nobody is told of an uncommitted grant. The answer carries
// the lease left at the leader's log clock.
//
// Why no VerifyLeader is needed for these answers, unlike a read: the grant
// is known committed (applied), and the owner cannot have lost the key since
// except by expiry (only it could release or extend, and it has not been
// told yet). For expiry, any leader's log clock, even a deposed one's, is at
// least every later leader's: a new leader starts from the last committed
// stamp, which no earlier leader's clock was behind, and all advance at the
// rate of real time. So the lease left by this node's clock never overstates.

// awaitLeaseLeft is what the leader answers a parked waiter granted the
// lock: the lease left by term t's log clock, counted from received (the
// node's monotonic time when the question arrived, or any earlier time)
// rather than from now. Drift margin: a clock that ran
// 0.1% fast while the request was parked is still not overstated.
// ok is false when the lease has already run out.
func (w *Waiters) awaitLeaseLeft(t Term, expiresAt, received time.Duration) (left time.Duration, ok bool) {
	parked := max(w.cfg.Monotonic()-received, 0)
	left = expiresAt - t.Now() // read after parked: later, so smaller
	if left <= 0 {
		return 0, false
	}
	return left + parked - parked/1024, true
}

// AtLeader serves a waiting acquire on this node as leader of term t:
// it proposes the acquire and, if queued, parks until its own state machine
// applies the owner's grant or the end of its wait. received is when the
// request arrived (this node's monotonic clock); a grant's lease left is
// counted from it (see awaitLeaseLeft).
//
// If ctx ends first — the caller gave up, or its connection or its node
// died — the leader withdraws the waiter (cancel-wait, which also releases
// a grant applied meanwhile), so that no lock is handed to nobody. The
// withdrawal is proposed in this term only, and only if no newer call by
// the same owner has parked since (see registry). Its errors are
// nodewire.ErrNotLeader, ErrLostLeadership, ErrShuttingDown and ctx's.
func (w *Waiters) AtLeader(ctx context.Context, t Term, cmd fsm.Command, received time.Duration) (nodewire.WaitAnswer, error) {
	if err := t.Ready(ctx); err != nil {
		return nodewire.WaitAnswer{}, err
	}
	if err := t.Admit(ctx, cmd); err != nil {
		return nodewire.WaitAnswer{}, err // see cluster's quota.go: a retry of a queued owner is never refused
	}
	var p Pending
	key := waitKey(cmd)
	wt, err := w.parked.park(key, cmd.Owner, func() (err error) {
		p, err = t.Enqueue(cmd)
		return err
	})
	if err != nil {
		return nodewire.WaitAnswer{}, err
	}
	defer w.parked.unregister(key, cmd.Owner, wt)
	res, err := p(ctx)
	if err != nil {
		if ctx.Err() != nil {
			w.withdrawAtLeader(t, cmd, wt)
		}
		return nodewire.WaitAnswer{}, err
	}
	switch res.Status {
	case fsm.StatusGranted:
		if ctx.Err() != nil {
			w.withdrawAtLeader(t, cmd, wt)
			return nodewire.WaitAnswer{}, ctx.Err()
		}
		w.parked.ack(key, cmd.Owner, res.Token)
		return nodewire.WaitAnswer{Status: fsm.StatusGranted, Token: res.Token, Remaining: lockfsm.Remaining(res), TTL: lockfsm.Remaining(res)}, nil
	case fsm.StatusHeld, fsm.StatusQueueFull, fsm.StatusNoSession, fsm.StatusKindMismatch:
		return nodewire.WaitAnswer{Status: res.Status, Token: res.Token, Remaining: lockfsm.Remaining(res), Waiters: res.Waiters, Kind: res.Kind, Limit: res.Limit}, nil
	case fsm.StatusQueued:
	default:
		return nodewire.WaitAnswer{}, fmt.Errorf("cluster: acquire answered %v", res.Status)
	}
	for {
		select {
		case ev := <-wt.wake:
			if staleEvent(ev, res) {
				continue
			}
			if ev.Kind != fsm.EventGranted {
				// The wait ran out, or its session ended (or, which a
				// parked call's claim rules out, the waiter was dropped
				// unclaimed).
				if !cmd.Session.IsZero() && !t.SessionLive(cmd.Session) {
					return nodewire.WaitAnswer{Status: fsm.StatusNoSession}, nil
				}
				st, at := t.KeyState(key)
				ans := nodewire.WaitAnswer{Status: fsm.StatusHeld, Waiters: st.Waiters}
				if st.Held {
					ans.Token, ans.Remaining = st.Token, max(st.ExpiresAt-at, 0)
				}
				return ans, nil
			}
			if ctx.Err() != nil {
				w.withdrawAtLeader(t, cmd, wt)
				return nodewire.WaitAnswer{}, ctx.Err()
			}
			left, ok := w.awaitLeaseLeft(t, ev.ExpiresAt, received)
			if !ok {
				// The lease ran out before the answer: held by nobody now.
				return nodewire.WaitAnswer{Status: fsm.StatusHeld}, nil
			}
			// This grant was applied after the acquire queued, so after the
			// request arrived: the TTL counted from arrival never overstates
			// either, and may be the larger after a long park.
			w.parked.ack(key, cmd.Owner, ev.Token)
			return nodewire.WaitAnswer{Status: fsm.StatusGranted, Token: ev.Token, Remaining: max(left, cmd.TTL), TTL: cmd.TTL}, nil
		case <-t.Done():
			// Still queued (or granted) in the log: the caller sends the
			// acquire again to the next leader, which is idempotent.
			return nodewire.WaitAnswer{}, nodewire.ErrNotLeader
		case <-ctx.Done():
			w.withdrawAtLeader(t, cmd, wt)
			return nodewire.WaitAnswer{}, ctx.Err()
		case <-w.cfg.Closing:
			return nodewire.WaitAnswer{}, nodewire.ErrShuttingDown
		}
	}
}

// withdrawAtLeader proposes, in term t, the cancel-wait of a parked call
// whose caller is gone, unless a newer call by the same owner has parked
// since, or was answered a grant (see registry). It waits for the commit
// within the patience withdraw allows; a cancel-wait that does not commit
// leaves the waiter to the next term, where it is unclaimed.
func (w *Waiters) withdrawAtLeader(t Term, cmd fsm.Command, wt *waiter) {
	var p Pending
	key := waitKey(cmd)
	queued := w.parked.withdraw(key, cmd.Owner, wt, keyStateIn(t, key), func() {
		p, _ = t.Enqueue(fsm.Command{Op: fsm.OpCancelWait, Key: key, Owner: cmd.Owner})
	})
	if !queued || p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.patience())
	defer cancel()
	res, err := p(ctx)
	switch {
	case err != nil:
		w.log.Warn("could not withdraw a waiting acquire whose caller left; it stays queued until its wait ends or a new leader drops it unclaimed, and a grant to it lasts until its caller's own withdrawal releases it or its TTL runs out",
			"key", key, "error", err)
	case res.Status == fsm.StatusReleased:
		w.log.Debug("released a lock granted to a caller that had left", "key", key)
	}
}

// CancelWait serves, at the leader of term t, a cancel-wait sent by a
// caller (one that gave up). While a waiting acquire by the same owner is
// parked here, the
// cancel-wait waits for that call to end before it is proposed: the call
// may be the giving-up caller's own, which withdraws itself as soon as its
// end reaches the leader (the cancel-wait then follows its withdrawal), or
// a newer call (a client that sent the same owner again through another
// node), whose claim or grant an older caller's cancel-wait must not take
// away (the cancel-wait then waits until its ctx ends and the caller's
// error says the outcome is unknown). Likewise it waits for the owner's
// immediate acquires being answered, and a grant to the owner that this
// leader answered to a call within answerMemory (that call may be newer
// than the one withdrawn: see registry), or may have answered, is not
// ended: the cancel-wait is not proposed, and its answer is held, with
// the grant's token, which withdraw reports as an unknown outcome. The
// check and the queuing happen under the registry's claim lock, so a call
// parking meanwhile is either seen or queued after the cancel-wait.
//
// A cancel-wait whose ctx has already ended (its sender stopped waiting
// for the answer, or its connection or node died) is still proposed, on
// purpose: its caller is gone either way, and the cancel-wait is that
// caller's withdrawal, which matters most then. Without it the owner's
// waiter keeps its place until its wait runs out, ahead of every caller
// behind it, and a grant to it stays with nobody until its TTL runs out;
// withdrawAtLeader proposes the same command for the same reason, when a
// parked call's ctx ends. Proposed late it is as safe as on time: what
// keeps it from ending a grant a newer call of the owner was answered is
// the registry's check above, which an ended ctx does not change. The
// waste is one entry, a no-op when the owner has nothing queued or held.
// Nor does an ended ctx make this loop: Until returns its error at once,
// unless the call it waits for ended meanwhile, and the next pass then
// proposes, or answers, or waits for a newer call, which Until again
// returns from at once.
func (w *Waiters) CancelWait(ctx context.Context, t Term, cmd fsm.Command) (fsm.Result, error) {
	for {
		var (
			p   Pending
			err error
		)
		busy, acked := w.parked.unlessParked(cmd.Key, cmd.Owner, keyStateIn(t, cmd.Key), func() {
			p, err = t.Enqueue(cmd)
		})
		switch {
		case err != nil:
			return fsm.Result{}, err
		case acked != 0:
			return fsm.Result{Status: fsm.StatusHeld, Token: acked}, nil
		case busy == nil:
			return p(ctx)
		}
		if err := t.Until(ctx, busy); err != nil {
			return fsm.Result{}, err
		}
	}
}

// keyStateIn reads key's state in term t's state machine, for a
// withdrawal that must tell whether a hold there may be a grant the
// leader answered (see mayHaveAnswered).
func keyStateIn(t Term, key string) func() fsm.KeyState {
	return func() fsm.KeyState {
		st, _ := t.KeyState(key)
		return st
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
