package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// Acquire implements lock.Store. An immediate answer comes from the leader
// (forwarded when this node follows). A waiting acquire registers with this
// node's waiter registry before it is proposed, and is woken when this
// node's own state machine applies its hand-off; it then asks the leader
// how much of the lease is left, counted from when it asked, and reports
// that counted from when Acquire was called. See doc.go for what happens
// when the wait ends otherwise.
func (n *Node) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	sent := n.clock.Monotonic()
	if err := lock.ValidateAcquire(req); err != nil {
		return lock.Lease{}, err
	}
	if n.closed() {
		return lock.Lease{}, lock.ErrClosed
	}
	owner := fsm.Owner(req.Owner)
	var w *waiter
	if req.Wait > 0 {
		w = n.waiters.register(req.Key, owner)
		defer n.waiters.unregister(req.Key, owner, w)
	}
	res, _, err := n.command(ctx, fsm.Command{Op: fsm.OpAcquire, Key: req.Key, Owner: owner, TTL: req.TTL, Wait: req.Wait})
	if err != nil {
		if req.Wait > 0 && ctx.Err() != nil && errors.Is(err, lock.ErrUnknownOutcome) {
			// The caller gave up; we may have queued it. Leave the queue, as
			// a waiting acquire whose ctx ends always does.
			return lock.Lease{}, n.withdraw(ctx, req.Key, owner)
		}
		return lock.Lease{}, err
	}
	switch res.Status {
	case fsm.StatusGranted:
		return lock.Lease{Token: res.Token, Remaining: remaining(res)}, nil
	case fsm.StatusHeld:
		return lock.Lease{}, &lock.HeldError{Key: req.Key, Token: res.Token, Remaining: remaining(res)}
	case fsm.StatusQueueFull:
		return lock.Lease{}, fmt.Errorf("%w: %d callers wait for %q", lock.ErrQueueFull, res.Waiters, req.Key)
	case fsm.StatusQueued:
		return n.awaitGrant(ctx, req, w, sent, res)
	}
	return lock.Lease{}, unexpectedStatus("acquire", res)
}

// remaining is a command's lease left at its own stamp: the L of DESIGN.md
// is the stamp, so the figure counts from before the leader answered.
func remaining(res fsm.Result) time.Duration { return max(res.ExpiresAt-res.Now, 0) }

// awaitGrant blocks a queued acquire until its hand-off, its wait deadline,
// ctx or Close.
func (n *Node) awaitGrant(ctx context.Context, req lock.AcquireRequest, w *waiter, sent time.Duration, queued fsm.Result) (lock.Lease, error) {
	owner := fsm.Owner(req.Owner)
	// The state machine drops the waiter at its wait deadline and tells us
	// (EventWaitExpired). Should that never reach us — no leader to tick at
	// the time — the caller's own clock ends the wait a little later.
	timer := time.NewTimer(req.Wait - (n.clock.Monotonic() - sent) + n.cfg.ElectionTimeout)
	defer timer.Stop()
	// On a follower, also ask the leader to tell us of the grant as soon
	// as it applies it (see await.go); our own state machine is the fallback.
	told := make(chan grantNotice, 1)
	if n.term.Load() == nil && !n.noAwait {
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		go n.awaitFromLeader(actx, req.Key, owner, told)
	}
	for {
		select {
		case g := <-told:
			return lock.Lease{Token: g.token, Remaining: max(req.TTL, g.asked-sent+g.remaining)}, nil
		case ev := <-w.wake:
			if staleEvent(ev, queued) {
				// An outcome of an earlier acquisition by the same owner,
				// applied again by a restarted or lagging state machine.
				continue
			}
			if ev.Kind == fsm.EventGranted {
				return n.grantedLease(ctx, req, sent, ev)
			}
			return lock.Lease{}, n.heldError(ctx, req.Key, queued)
		case <-timer.C:
			res, _, err := n.command(ctx, fsm.Command{Op: fsm.OpCancelWait, Key: req.Key, Owner: owner})
			if err != nil {
				return lock.Lease{}, err
			}
			if res.Status == fsm.StatusReleased {
				n.log.Debug("wait ran out as the lock was handed over; released it", "key", req.Key)
			}
			return lock.Lease{}, n.heldError(ctx, req.Key, queued)
		case <-ctx.Done():
			return lock.Lease{}, n.withdraw(ctx, req.Key, owner)
		case <-n.closing:
			return lock.Lease{}, lock.ErrClosed
		}
	}
}

// staleEvent reports whether ev, delivered to a waiter whose acquire was
// queued with result queued, belongs to an earlier acquisition by the same
// owner: a node that restarts re-applies its log, and a lagging follower
// applies old entries, so their events reach a new waiter keyed by the same
// (key, owner). This waiter's grant follows the holder it queued behind on
// that key, so it has a larger token; its wait deadline lies after the log
// time it queued at.
func staleEvent(ev fsm.Event, queued fsm.Result) bool {
	switch ev.Kind {
	case fsm.EventGranted:
		return ev.Token <= queued.Token
	case fsm.EventWaitExpired:
		return ev.At <= queued.Now
	}
	return false
}

// grantedLease answers a waiter woken by its hand-off. The grant was stamped
// on the leader, maybe a while before this node applied it, so the lease
// left is asked of the leader (a read, not a commit) and counted from when
// the question was sent. It is then reported counted from sent, as the
// Store contract wants: asked-sent + what the leader said. TTL counted from
// sent is also a safe figure (the grant came after the request), so the
// larger of the two is returned.
func (n *Node) grantedLease(ctx context.Context, req lock.AcquireRequest, sent time.Duration, ev fsm.Event) (lock.Lease, error) {
	owner := fsm.Owner(req.Owner)
	asked := n.clock.Monotonic()
	if t := n.term.Load(); t != nil && t.isReady() {
		// Leading: the grant is applied, so committed, and our own log clock
		// tells the lease left without asking anyone (see await.go).
		if left, ok := t.awaitLeaseLeft(ev.ExpiresAt, asked); ok {
			return lock.Lease{Token: ev.Token, Remaining: max(req.TTL, asked-sent+left)}, nil
		}
	}
	rr, err := n.read(ctx, req.Key, &owner)
	switch {
	case err != nil && ctx.Err() != nil:
		return lock.Lease{}, n.withdraw(ctx, req.Key, owner)
	case err != nil:
		// We hold the lock but could not ask how long for: TTL from sent
		// is still a figure that never overstates.
		n.log.Warn("granted after waiting; leader not reachable for remaining time", "key", req.Key, "error", err)
		return lock.Lease{Token: ev.Token, Remaining: req.TTL}, nil
	case !rr.mine:
		// The lease ran out before we could tell the caller.
		return lock.Lease{}, &lock.HeldError{Key: req.Key, Token: rr.token, Remaining: rr.remaining}
	}
	return lock.Lease{Token: rr.token, Remaining: max(req.TTL, asked-sent+rr.remaining)}, nil
}

// withdraw takes a caller that gave up out of the queue (and releases the
// lock if it was handed over meanwhile), then returns ctx's error. It waits
// for the cancel-wait at most twice the election timeout past ctx's end; if
// that is not enough, the error also matches lock.ErrUnknownOutcome and the
// owner may still be queued until its wait deadline (or hold the lock until
// its TTL): Release it with the same owner to be sure.
func (n *Node) withdraw(ctx context.Context, key string, owner fsm.Owner) error {
	patience := min(n.cfg.RequestTimeout, 2*n.cfg.ElectionTimeout)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), patience)
	defer cancel()
	if _, _, err := n.command(wctx, fsm.Command{Op: fsm.OpCancelWait, Key: key, Owner: owner}); err != nil {
		n.log.Warn("could not withdraw an abandoned acquire", "key", key, "error", err)
		return fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, ctx.Err())
	}
	return ctx.Err()
}

// heldError describes the holder for a caller whose wait ran out, from a
// fresh read when possible, else from what the queued answer said.
func (n *Node) heldError(ctx context.Context, key string, queued fsm.Result) error {
	if rr, err := n.read(ctx, key, nil); err == nil {
		return &lock.HeldError{Key: key, Token: rr.token, Remaining: rr.remaining}
	}
	return &lock.HeldError{Key: key, Token: queued.Token}
}

// Release implements lock.Store. When an earlier attempt's outcome was
// unknown (the leader changed while committing it) and the retry finds the
// owner no longer holding the key, Release reports true: the likely reason
// is that the first attempt released it, and release is idempotent, as an
// etcd or Consul unlock is. (Whether the lease had expired just before is
// not knowable then; the caller's own deadline tells it.)
func (n *Node) Release(ctx context.Context, key string, owner lock.Owner) (bool, error) {
	if err := lock.ValidateRelease(key, owner); err != nil {
		return false, err
	}
	if n.closed() {
		return false, lock.ErrClosed
	}
	res, retried, err := n.command(ctx, fsm.Command{Op: fsm.OpRelease, Key: key, Owner: fsm.Owner(owner)})
	if err != nil {
		return false, err
	}
	switch res.Status {
	case fsm.StatusReleased:
		return true, nil
	case fsm.StatusNotHeld:
		return retried, nil
	}
	return false, unexpectedStatus("release", res)
}

// Extend implements lock.Store. The new lease is counted from the leader's
// stamp of the extend, so the Remaining returned is the TTL.
func (n *Node) Extend(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error) {
	if err := lock.ValidateExtend(key, owner, ttl); err != nil {
		return lock.Lease{}, err
	}
	if n.closed() {
		return lock.Lease{}, lock.ErrClosed
	}
	res, _, err := n.command(ctx, fsm.Command{Op: fsm.OpExtend, Key: key, Owner: fsm.Owner(owner), TTL: ttl})
	if err != nil {
		return lock.Lease{}, err
	}
	switch res.Status {
	case fsm.StatusExtended:
		return lock.Lease{Token: res.Token, Remaining: remaining(res)}, nil
	case fsm.StatusNotHeld:
		return lock.Lease{}, fmt.Errorf("%w: %q", lock.ErrNotHeld, key)
	}
	return lock.Lease{}, unexpectedStatus("extend", res)
}

// Inspect implements lock.Store with a linearizable read at the leader:
// it sees every command that completed before it was called, and its
// Remaining is the leader's figure when it answered.
func (n *Node) Inspect(ctx context.Context, key string) (lock.KeyInfo, error) {
	if err := lock.ValidateKey(key); err != nil {
		return lock.KeyInfo{}, err
	}
	if n.closed() {
		return lock.KeyInfo{}, lock.ErrClosed
	}
	rr, err := n.read(ctx, key, nil)
	if err != nil {
		return lock.KeyInfo{}, err
	}
	return keyInfo(rr), nil
}

// InspectStale reads key from this node's own state machine, without asking
// the leader: fast, available without a quorum, but possibly behind. It may
// report a lock that has since been released or expired, miss a new one,
// and — because a follower's log time only advances when it applies an
// entry — its Remaining may overstate. Use it for status pages, not for
// decisions.
func (n *Node) InspectStale(key string) (lock.KeyInfo, error) {
	if err := lock.ValidateKey(key); err != nil {
		return lock.KeyInfo{}, err
	}
	if n.closed() {
		return lock.KeyInfo{}, lock.ErrClosed
	}
	st, now := n.sm.lookup(key, n.leaderClock())
	return keyInfo(toReadResult(st, now, request{key: key})), nil
}

// List implements lock.Lister with linearizable reads at the leader, as
// Inspect: on the leader itself the whole listing is one read; a follower
// forwards it, and the leader answers at most maxListPage keys per request
// (so that a reply fits the transport's frame), which List follows page by
// page until req.Limit keys (all, when 0) are read. Each page sees every
// command that completed before it was asked for; a listing of several pages
// is not one snapshot, as with any paged listing (etcd's, Consul's). Each
// Remaining is the leader's figure when it answered its page, counted from
// when List was called (for later pages, conservatively).
func (n *Node) List(ctx context.Context, req lock.ListRequest) ([]lock.LockInfo, error) {
	if err := lock.ValidateList(req); err != nil {
		return nil, err
	}
	if n.closed() {
		return nil, lock.ErrClosed
	}
	var out []lock.LockInfo
	after := req.After
	for {
		want := 0
		if req.Limit > 0 {
			want = req.Limit - len(out)
		}
		rep, _, err := n.do(ctx, request{kind: kindList, prefix: req.Prefix, after: after, limit: want})
		if err != nil {
			return nil, err
		}
		if rep.kind != kindList {
			return nil, fmt.Errorf("%w: %v reply to a list", ErrBadRequest, rep.kind)
		}
		page := rep.list
		if err := checkPage(page, req.Prefix, after, want); err != nil {
			return nil, err
		}
		out = append(out, page.locks...)
		if !page.more || req.Limit > 0 && len(out) >= req.Limit {
			return out, nil
		}
		if len(page.locks) == 0 {
			return nil, fmt.Errorf("%w: list answered an empty page with more to come", ErrBadRequest)
		}
		after = page.locks[len(page.locks)-1].Key
	}
}

// checkPage makes sure a leader's page is what was asked for, so that a
// confused peer cannot make List loop or answer keys outside the request.
func checkPage(page listPage, prefix, after string, limit int) error {
	if limit > 0 && len(page.locks) > limit {
		return fmt.Errorf("%w: list answered %d keys, asked for %d", ErrBadRequest, len(page.locks), limit)
	}
	prev := after
	for _, l := range page.locks {
		if l.Key <= prev || !strings.HasPrefix(l.Key, prefix) {
			return fmt.Errorf("%w: list answered key %q out of order or outside prefix %q", ErrBadRequest, l.Key, prefix)
		}
		prev = l.Key
	}
	return nil
}

// ListStale lists from this node's own state machine, without asking the
// leader, as InspectStale reads: fast and available without a quorum, one
// consistent view, but possibly behind, and its Remaining figures may
// overstate. For status pages, not for decisions.
func (n *Node) ListStale(req lock.ListRequest) ([]lock.LockInfo, error) {
	if err := lock.ValidateList(req); err != nil {
		return nil, err
	}
	if n.closed() {
		return nil, lock.ErrClosed
	}
	return n.sm.list(req.Prefix, req.After, req.Limit, n.leaderClock()).locks, nil
}

// leaderClock is the log clock's reading while this node leads with its term
// ready, 0 (the machine's own log time) otherwise.
func (n *Node) leaderClock() time.Duration {
	if t := n.term.Load(); t != nil && t.isReady() {
		return t.clock.now()
	}
	return 0
}

func keyInfo(rr readResult) lock.KeyInfo {
	return lock.KeyInfo{Locked: rr.held, Token: rr.token, Remaining: rr.remaining, Waiters: rr.waiters}
}

func unexpectedStatus(op string, res fsm.Result) error {
	return fmt.Errorf("cluster: %s answered %v", op, res.Status)
}
