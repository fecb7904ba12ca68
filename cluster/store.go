package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/lockfsm"
	"github.com/raftlock/raftlock/lock"
)

// Reads.
//
// Inspect is linearizable: it is answered by the leader, which notes its
// commit index, confirms it still leads with a round of heartbeats
// (VerifyLeader), waits until its state machine has applied up to that
// index, and reads the key at its log clock. (Entries up to the term's ready
// barrier are known applied; every later entry is one the adapter counts.) A
// follower forwards the read. Remaining is the leader's figure and counts from
// when the question was sent. InspectStale reads the local state machine
// without asking anyone: fast and available without a quorum, but it may be
// behind, and its Remaining may overstate.
//
// List (lock.Lister) takes the same path: the leader confirms its leadership,
// waits for its state machine, and lists the held keys at its log clock, in
// byte order, never their owners; a lease that has run out by then is not
// listed even if no tick has removed it yet. On the leader a listing is one
// read. A follower forwards it, and the leader answers at most 4096 keys per
// request (a page of the longest keys stays near 2 MB, well under the
// transport's 16 MB frame); List follows the pages until it has req.Limit
// keys, or all of them when Limit is 0, as the lock.Lister contract says. A
// listing of several pages is not one snapshot, like any paged listing (etcd's
// range with a limit, Consul's blocking KV list), and each page's Remaining is
// counted from when List was called, which for later pages understates.
// ListStale is the local, possibly stale twin, like InspectStale.

// Acquire implements lock.Store. An immediate answer (Wait 0) comes from
// the leader (forwarded when this node follows). A waiting acquire is one
// request parked at the leader until the grant or the end of the wait (see
// package waiting); it is bounded by its wait and
// ctx, not by Config.RequestTimeout. After a leader change it is sent again
// with the same owner and the wait left, which keeps its place in the queue.
// A caller that goes away while queued (ctx ends, connection or node dies)
// is withdrawn by the leader, and a grant applied meanwhile and not yet
// answered is released, so no lock is handed to nobody; if that withdrawal
// cannot be confirmed, or the grant was answered already (the answer
// crossed the caller's going), the error also matches
// lock.ErrUnknownOutcome. When no leader answers before
// the wait ends, Acquire gives up two election timeouts after it,
// withdraws, and returns a *lock.HeldError (or lock.ErrUnavailable if it
// cannot read the holder either), or an error matching
// lock.ErrUnknownOutcome if the withdrawal cannot be confirmed.
func (n *Node) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	sent := n.clock.Monotonic()
	if err := req.Validate(); err != nil {
		return lock.Lease{}, err
	}
	if req.Wait > 0 {
		return n.waiters.Acquire(ctx, req, sent)
	}
	res, err := n.command(ctx, lockfsm.Acquire(req))
	if err != nil {
		return lock.Lease{}, err
	}
	if res.Status == fsm.StatusGranted {
		return lockfsm.Granted(req, res), nil
	}
	return lock.Lease{}, lockfsm.AcquireError(req, res, func(key string) fsm.KeyState {
		st, _ := n.sm.lookup(key, 0) // this node's own state: it names the key, nothing more
		return st
	})
}

// AcquireAll implements lock.MultiKeyStore: Acquire of a multi-key request
// (fsm.OpAcquireAll). It takes the same paths as a single key's acquire:
// an immediate answer from the leader, or one request parked at the
// leader, sent again with the same owner after a leader change (the
// machine keeps the set's places), and withdrawn under the set's first key
// (see package waiting) when its caller goes.
func (n *Node) AcquireAll(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if req.Keys == nil {
		req.Keys = []string{} // reported as an empty set
	}
	return n.Acquire(ctx, req)
}

// Release implements lock.Store. A release sent again after an attempt
// whose outcome was unknown (the leader changed while committing it) is
// idempotent: the state machine remembers the owner's releases, so the
// retry reports true when the first attempt ended the lease, and false
// when the lease had ended otherwise (run out, force-released) or the
// owner never held it (see "Remembered releases" in package fsm). A
// leader on a build from before that answers such a retry false.
func (n *Node) Release(ctx context.Context, key string, owner lock.Owner) (bool, error) {
	if err := lock.ValidateRelease(key, owner); err != nil {
		return false, err
	}
	return n.releasing(ctx, lockfsm.Release(key, owner))
}

// releasing runs cmd, which ends something (a release, a session's
// destroy), and reports whether it ended it (lockfsm.Ended): answered
// released, also to a retry whose first attempt ended it (the state
// machine remembers), or nothing to end.
func (n *Node) releasing(ctx context.Context, cmd fsm.Command) (bool, error) {
	res, err := n.command(ctx, cmd)
	if err != nil {
		return false, err
	}
	return lockfsm.Ended(cmd.Op, res)
}

// ForceRelease implements lock.AdminStore: the leader applies a
// force-release of key, which ends its lease whoever holds it and hands it
// to the next waiter in the same entry. Unlike the owner's commands it is
// not idempotent (a second one would end the next holder's lease), so it is
// never sent again once an attempt's outcome is unknown: that error matches
// lock.ErrUnknownOutcome, and Inspect tells what happened.
func (n *Node) ForceRelease(ctx context.Context, key string) (uint64, error) {
	if err := lock.ValidateKey(key); err != nil {
		return 0, err
	}
	res, err := n.command(ctx, lockfsm.ForceRelease(key))
	if err != nil {
		return 0, err
	}
	return lockfsm.ForceReleased(key, res)
}

// Extend implements lock.Store. The new lease is counted from the leader's
// stamp of the extend, so the Remaining returned is the TTL. The stamp is
// the leader's log clock when the extend was proposed, before it answered,
// so a holder that counts the figure from when it sent the request never
// counts past the lease's end in the cluster.
func (n *Node) Extend(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error) {
	if err := lock.ValidateExtend(key, owner, ttl); err != nil {
		return lock.Lease{}, err
	}
	res, err := n.command(ctx, lockfsm.Extend(key, owner, ttl))
	if err != nil {
		return lock.Lease{}, err
	}
	return lockfsm.Extended(key, res, ttl)
}

// Inspect implements lock.Store with a linearizable read at the leader:
// it sees every command that completed before it was called, and its
// Remaining is the leader's figure when it answered.
func (n *Node) Inspect(ctx context.Context, key string) (lock.KeyInfo, error) {
	if err := lock.ValidateKey(key); err != nil {
		return lock.KeyInfo{}, err
	}
	rr, err := n.read(ctx, key, nil)
	if err != nil {
		return lock.KeyInfo{}, err
	}
	return keyInfo(rr), nil
}

// InspectStale (lock.StaleReader; lock.Client.Inspect with lock.Stale)
// reads key from this node's own state machine, without asking the leader:
// fast, available without a quorum, but possibly behind. It may report a
// lock that has since been released or expired, miss a new one, and —
// because a follower's log time only advances when it applies an entry —
// its Remaining may overstate. Use it for status pages, not for decisions.
func (n *Node) InspectStale(key string) (lock.KeyInfo, error) {
	if err := lock.ValidateKey(key); err != nil {
		return lock.KeyInfo{}, err
	}
	if n.closed() || n.sm.halt.Load() != nil {
		return lock.KeyInfo{}, n.closedError(false)
	}
	st, setKeys, now := n.sm.read(key, n.leaderClock())
	return keyInfo(toReadResult(st, setKeys, now, &nodewire.Read{Key: key})), nil
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
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var out []lock.LockInfo
	after := req.After
	for {
		want := 0
		if req.Limit > 0 {
			want = req.Limit - len(out)
		}
		page, err := ask[*nodewire.ListPage](ctx, n, &nodewire.List{Prefix: req.Prefix, After: after, Limit: want}, nil)
		if err != nil {
			return nil, err
		}
		if err := checkPage(page, req.Prefix, after, want); err != nil {
			return nil, err
		}
		out = append(out, page.Locks...)
		if !page.More || req.Limit > 0 && len(out) >= req.Limit {
			return out, nil
		}
		if len(page.Locks) == 0 {
			return nil, fmt.Errorf("%w: list answered an empty page with more to come", ErrBadRequest)
		}
		after = page.Locks[len(page.Locks)-1].Key
	}
}

// checkPage makes sure a leader's page is what was asked for, so that a
// confused peer cannot make List loop or answer keys outside the request.
func checkPage(page *nodewire.ListPage, prefix, after string, limit int) error {
	if limit > 0 && len(page.Locks) > limit {
		return fmt.Errorf("%w: list answered %d keys, asked for %d", ErrBadRequest, len(page.Locks), limit)
	}
	prev := after
	for _, l := range page.Locks {
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
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if n.closed() || n.sm.halt.Load() != nil {
		return nil, n.closedError(false)
	}
	return n.sm.list(req.Prefix, req.After, req.Limit, n.leaderClock()).Locks, nil
}

// leaderClock is the log clock's reading while this node leads with its term
// ready, 0 (the machine's own log time) otherwise.
func (n *Node) leaderClock() time.Duration {
	if t := n.term.Load(); t != nil && t.isReady() {
		return t.clock.now()
	}
	return 0
}

func keyInfo(rr nodewire.ReadResult) lock.KeyInfo {
	info := lock.KeyInfo{Locked: rr.Held, Token: rr.Token, Remaining: rr.Remaining, Waiters: rr.Waiters, Metadata: rr.Meta, Delayed: rr.Delayed,
		Kind: lock.Kind(rr.Kind), Limit: rr.Limit, Holders: rr.Holders, Shared: rr.Shared,
		Holds: rr.Holds, SetKeys: rr.SetKeys, Reserved: rr.Reserved}
	if rr.Kind == fsm.KindMutex && rr.Held && !rr.Delayed {
		info.Holders = 1
	}
	return info
}
