package cluster

import (
	"context"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// A queued caller on a follower would learn of its grant only when its own
// state machine applies the hand-off, which waits for the leader to pass on
// the new commit index (on the next append, up to CommitTimeout later when
// the log is idle), and then ask the leader how much of the lease is left,
// a read that costs a round of heartbeats. So, once queued, a follower's
// waiter also asks the leader directly (kindAwait): the leader parks the
// request and answers it when its own state machine applies the grant.
// Applying means committed, so nobody is told of an uncommitted grant. The
// answer carries the lease left at the leader's log clock; the local wake-up
// stays the fallback (an old leader, a leader change, a lost answer).
//
// Why no VerifyLeader is needed for these answers, unlike a read: the grant
// is known committed (applied), and the owner cannot have lost the key since
// except by expiry (only it could release or extend, and it has not been
// told yet). For expiry, any leader's log clock, even a deposed one's, is at
// least every later leader's: a new leader starts from the last committed
// stamp, which no earlier leader's clock was behind, and all advance at the
// rate of real time. So the lease left by this node's clock never overstates.

// awaitLeaseLeft is what the leader answers a waiter granted the lock, as a
// kindAwait or a local waiter: the lease left by the term's log clock, counted
// from received (the node's monotonic time when the question arrived, or
// any earlier time) rather than from now. Drift margin: a clock that ran
// 0.1% fast while the request was parked is still not overstated.
// ok is false when the lease has already run out.
func (t *leaderTerm) awaitLeaseLeft(expiresAt, received time.Duration) (left time.Duration, ok bool) {
	parked := max(t.n.clock.Monotonic()-received, 0)
	left = expiresAt - t.clock.now() // read after parked: later, so smaller
	if left <= 0 {
		return 0, false
	}
	return left + parked - parked/1024, true
}

// awaitAtLeader answers a follower's kindAwait: once this node has applied
// the owner's grant (at once if it has already), the lease left, counted
// from when the request arrived. Not mine (held false) when the owner was
// dropped from the queue or its lease already ran out: the follower's own
// state machine tells it the rest.
func (n *Node) awaitAtLeader(ctx context.Context, t *leaderTerm, req request) (readResult, error) {
	received := n.clock.Monotonic()
	select {
	case <-t.ready:
	case <-t.stop:
		return readResult{}, errNotLeader
	case <-ctx.Done():
		return readResult{}, ctx.Err()
	case <-n.closing:
		return readResult{}, errShuttingDown
	}
	// Register before looking, so a grant applied in between is not missed.
	w := n.awaits.register(req.key, req.owner)
	defer n.awaits.unregister(req.key, req.owner, w)
	var token uint64
	var expiresAt time.Duration
	if st, _ := n.sm.lookup(req.key, 0); st.Held && st.Owner == req.owner {
		token, expiresAt = st.Token, st.ExpiresAt
	} else {
		select {
		case ev := <-w.wake:
			if ev.Kind != fsm.EventGranted {
				return readResult{}, nil
			}
			token, expiresAt = ev.Token, ev.ExpiresAt
		case <-t.stop:
			return readResult{}, errNotLeader
		case <-ctx.Done():
			return readResult{}, ctx.Err()
		case <-n.closing:
			return readResult{}, errShuttingDown
		}
	}
	left, ok := t.awaitLeaseLeft(expiresAt, received)
	if !ok {
		return readResult{}, nil
	}
	return readResult{held: true, mine: true, token: token, remaining: left}, nil
}

// grantNotice is a leader's answer to kindAwait: the owner holds the lock
// with token, and remaining is the lease left counted from asked (this
// node's monotonic time when it sent the request).
type grantNotice struct {
	token     uint64
	remaining time.Duration
	asked     time.Duration
}

// awaitFromLeader asks the current leader to tell it when owner is granted
// key, and sends the answer on out (size one). It asks again at the next
// leader when the leader changes, and gives up quietly when the leader
// answers that owner is not waiting any more, when a leader does not know
// kindAwait, when ctx ends or when the node closes: the caller waits for its
// own state machine in any case.
func (n *Node) awaitFromLeader(ctx context.Context, key string, owner fsm.Owner, out chan<- grantNotice) {
	body, err := request{kind: kindAwait, key: key, owner: owner, withOwner: true}.appendBinary(nil)
	if err != nil {
		return
	}
	for {
		changed := n.leaderChanged.wait()
		a, _ := n.raft.LeaderWithID()
		if addr := string(a); addr != "" && addr != n.Addr() && n.term.Load() == nil {
			asked := n.clock.Monotonic()
			rep, err := n.call(ctx, addr, body)
			switch {
			case ctx.Err() != nil:
				return
			case err == nil && rep.code == codeOK && rep.kind == kindAwait:
				if rep.read.mine {
					out <- grantNotice{token: rep.read.token, remaining: rep.read.remaining, asked: asked}
				}
				return
			case err == nil && rep.code == codeBadRequest:
				return
			}
		}
		// No answer from this leader: ask the next one.
		select {
		case <-changed:
		case <-ctx.Done():
			return
		case <-n.closing:
			return
		}
	}
}
