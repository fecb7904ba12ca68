package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/transport"
)

// Commands, forwarding and retries.
//
// A command on the leader joins the term's proposal queue. A command on a
// follower is sent over transport.Call to the leader, which stamps, proposes
// and answers with the fsm.Result. The RPC's messages are this package's own
// compact binary encoding with a version byte (wire.go); decoding garbage
// gives an error, never a panic, and a leader answers a malformed or
// forbidden request (a tick, a stamped command) with a bad-request reply.
// A new kind of request (the list, added after the first) keeps the version:
// a leader that does not know it answers bad request, and every other kind
// keeps working, so a cluster can be upgraded one node at a time. The one
// exception is claims (see waiting.go): a node from before them cannot read
// the new-term and drop-unclaimed log entries or a version 2 snapshot, and
// would grant waiters the others skip, so across that change every member
// is stopped, upgraded and started again together.
//
// A command is retried across leader changes within the caller's context and
// Config.RequestTimeout:
//   - rejected before it could take effect (no leader known, not the leader,
//     transport.ErrNotSent, raft.ErrNotLeader): retried at once against the
//     leader a member names, or as soon as raft reports a leader change (a
//     short, growing pause of 5–100ms is the fallback);
//   - outcome unknown (raft.ErrLeadershipLost or the leader shutting down
//     after proposing, transport.ErrConnLost): retried the same way with the
//     same owner, which the state machine makes idempotent;
//   - still waiting for the leader's answer when raft here reports another
//     leader (one that froze stops sending heartbeats and is replaced): the
//     call is cancelled, so the transport drops an answer that comes later,
//     and the command goes to the new leader at once, as an unknown outcome
//     — not after RequestTimeout. The old leader cannot commit it any more:
//     a later term has begun. While raft here knows no leader at all, the
//     call goes on (a leader that comes back still answers it) for up to
//     Config.LeaderWait.
//
// While no leader is known the call waits for one at most Config.LeaderWait
// (four election timeouts by default; a waiting acquire at least its wait),
// then gets lock.ErrUnavailable saying there is no leader. When retries run
// out otherwise the caller gets lock.ErrUnavailable (no quorum), or ctx's
// error when its ctx ended (also matching ErrUnavailable if the last attempt
// found no leader) — within its context, never a hang. If
// any attempt's outcome was unknown, the error also matches
// lock.ErrUnknownOutcome: retrying with the same owner is safe.
//
// Release after an unknown outcome: if the retry finds the owner no longer
// holding the key, Release reports true — the first attempt most likely
// released it, and a release is idempotent, as an etcd or Consul unlock is.
// Whether the lease had already run out just before cannot be known then;
// the holder's own deadline (lock.Lock.Remaining) tells it.

// Retry pacing when no leader change is signalled: a leader that is known
// but does not answer (it is dying, or its term is not ready yet) is asked
// again after a short, growing pause. Normally a retry waits for raft to
// report a new leader instead.
const (
	minRetryBackoff = 5 * time.Millisecond
	maxRetryBackoff = 100 * time.Millisecond
)

// defaultLeaderWaitElections is Config.LeaderWait when it is 0, in
// ElectionTimeouts; see there.
const defaultLeaderWaitElections = 4

// do runs req at the leader — on this node when it leads, otherwise over the
// transport — and retries across leader changes until it has an answer, ctx
// ends, the node closes, RequestTimeout passes, or no leader has been known
// for the request's leader wait (see leaderWait).
//
// Retries: an attempt rejected before it could take effect (no leader known,
// not the leader, transport.ErrNotSent) is retried at once against the new
// leader, or when raft reports a leader change. An attempt whose outcome is
// unknown (leadership lost after proposing, transport.ErrConnLost, the
// leader shutting down) is retried the same way: commands carry the caller's
// owner, which makes them idempotent. A forwarded attempt still waiting for
// its answer when raft reports that the leader it went to is replaced (by
// another, or by none: it stopped answering) is abandoned — its call is
// cancelled, so a late answer is dropped by the transport — and its request
// sent again at once to the new leader: its outcome is unknown too. Once any
// attempt's outcome was unknown, a final error also matches
// lock.ErrUnknownOutcome, and the answer's retried flag is set (Release
// uses it).
//
// Errors: lock.ErrClosed once the node closes; ctx's error when ctx ends
// (also matching lock.ErrUnavailable if the last attempt found no leader);
// lock.ErrUnavailable when RequestTimeout passes or no leader is known for
// the leader wait; ErrBadRequest when the leader rejects the request itself.
func (n *Node) do(ctx context.Context, req request) (rep reply, retried bool, err error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()

	var (
		unknown bool   // an attempt may have taken effect
		lastErr error  // why the last attempt did not answer
		hint    string // a leader address learned from a "not leader" reply
		tried   string // the address the last attempt went to
	)
	backoff := minRetryBackoff
	hops := 0                // hints followed in a row without a pause
	var leaderless time.Time // since when no leader has been known, in a row; zero while one is
	wait := n.leaderWait(req)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var body []byte
	for {
		if n.closed() {
			return reply{}, unknown, n.closedError(unknown)
		}
		changed := n.leaderChanged.wait()

		var attemptErr error
		if t := n.term.Load(); t != nil {
			tried = ""
			rep, attemptErr = n.serve(ctx, t, req)
		} else {
			addr, raftLeader, err := n.leaderTarget(hint)
			hint = ""
			attemptErr = err
			if err == nil {
				tried = addr
				if body == nil {
					if body, err = req.appendBinary(nil); err != nil {
						return reply{}, false, err
					}
				}
				rep, attemptErr = n.callLeader(ctx, addr, raftLeader, body)
			}
		}
		if attemptErr == nil {
			switch rep.code {
			case codeOK:
				return rep, unknown, nil
			case codeBadRequest:
				return reply{}, unknown, fmt.Errorf("%w: %s", ErrBadRequest, rep.msg)
			case codeNotLeader:
				attemptErr, hint = errNotLeader, rep.leader
			case codeLostLeadership:
				attemptErr = errLostLeadership
			case codeShuttingDown:
				attemptErr = errLeaderClosing
			default: // codeUnavailable
				attemptErr = fmt.Errorf("cluster: leader: %s", rep.msg)
			}
		}

		switch {
		case errors.Is(attemptErr, errNoLeader), errors.Is(attemptErr, errNotLeader),
			errors.Is(attemptErr, transport.ErrNotSent), errors.Is(attemptErr, transport.ErrRemote):
			// Certainly not applied: retry. (Our handler never fails, so
			// ErrRemote means the peer is still starting: no handler yet.)
		case errors.Is(attemptErr, errLostLeadership), errors.Is(attemptErr, errLeaderClosing),
			errors.Is(attemptErr, transport.ErrConnLost), errors.Is(attemptErr, errLeaderReplaced):
			unknown = unknown || req.kind == kindCommand
		case errors.Is(attemptErr, errShuttingDown), errors.Is(attemptErr, transport.ErrClosed):
			return reply{}, unknown, n.closedError(unknown || req.kind == kindCommand)
		case ctx.Err() != nil:
			// The attempt was cut short by ctx: it may have been sent.
			unknown = unknown || req.kind == kindCommand
			return reply{}, unknown, n.endedError(parent, ctx, unknown, lastErr)
		case errors.Is(attemptErr, ErrBadRequest), errors.Is(attemptErr, transport.ErrTooLarge):
			return reply{}, unknown, attemptErr
		default:
			// codeUnavailable and the unexpected: retry after a pause.
		}
		lastErr = attemptErr
		if ctx.Err() != nil {
			return reply{}, unknown, n.endedError(parent, ctx, unknown, lastErr)
		}
		pause := backoff
		if errors.Is(attemptErr, errNoLeader) {
			if leaderless.IsZero() {
				leaderless = time.Now()
			}
			left := wait - time.Since(leaderless)
			if left <= 0 {
				return reply{}, unknown, n.leaderlessError(wait, unknown)
			}
			pause = min(pause, left)
		} else {
			leaderless = time.Time{}
		}
		if hint != "" && hint != tried && hint != n.Addr() && hops < 2 {
			hops++
			continue // a follower told us who leads: ask it at once
		}
		hops = 0
		timer.Reset(pause)
		select {
		case <-changed:
			backoff = minRetryBackoff
		case <-timer.C:
			backoff = min(2*backoff, maxRetryBackoff)
		case <-ctx.Done():
			return reply{}, unknown, n.endedError(parent, ctx, unknown, lastErr)
		case <-n.closing:
			return reply{}, unknown, n.closedError(unknown)
		}
		timer.Stop()
	}
}

// leaderTarget picks where a forwarded attempt goes: the leader a "not
// leader" reply hinted at, else the one raft reports (raftLeader, returned
// too: callLeader watches for a change from it). Its errors are errNoLeader
// when none is known, and errNotLeader when raft names this node, whose term
// is about to start.
func (n *Node) leaderTarget(hint string) (addr, raftLeader string, err error) {
	a, _ := n.raft.LeaderWithID()
	raftLeader = string(a)
	addr = cmp.Or(hint, raftLeader)
	switch {
	case addr == "":
		return "", raftLeader, errNoLeader
	case addr == n.Addr():
		return "", raftLeader, errNotLeader
	}
	return addr, raftLeader, nil
}

var (
	errNoLeader       = errors.New("cluster: no leader")
	errLeaderClosing  = errors.New("cluster: leader shutting down")
	errLeaderReplaced = errors.New("cluster: leader replaced while the request was in flight")
)

// leaderWait is how long req may go on finding no leader before do gives up:
// Config.LeaderWait (see there), or a waiting acquire's own wait when that
// is longer — the caller said it would wait that long for the lock.
func (n *Node) leaderWait(req request) time.Duration {
	wait := n.cfg.LeaderWait
	if wait == 0 {
		wait = defaultLeaderWaitElections * n.cfg.ElectionTimeout
	}
	if req.kind == kindCommand && req.cmd.Op == fsm.OpAcquire {
		wait = max(wait, req.cmd.Wait)
	}
	return wait
}

// leaderlessError is what do returns when no leader was known for wait.
func (n *Node) leaderlessError(wait time.Duration, unknown bool) error {
	err := fmt.Errorf("%w: no leader for %v: an election is taking long, or a majority of the voters is down or cut off from this node", lock.ErrUnavailable, wait)
	if unknown {
		err = fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, err)
	}
	return err
}

// callLeader sends one request to addr and waits for its answer — unless
// raft on this node reports, meanwhile, a leader other than raftLeader (the
// leader it reported when addr was chosen: addr, or another node when addr
// came from a member's hint) and addr, or no leader when addr was its leader
// (addr stopped sending heartbeats), or this node starts leading. Then it
// cancels the call and, unless the answer won that race, returns an error
// matching errLeaderReplaced, or transport.ErrNotSent when the request never
// left. The cancelled call is over when callLeader returns: the transport
// drops an answer that comes later, so nothing can take it for the answer of
// a retry.
func (n *Node) callLeader(ctx context.Context, addr, raftLeader string, body []byte) (reply, error) {
	type answer struct {
		rep reply
		err error
	}
	done := make(chan answer, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		rep, err := n.call(cctx, addr, body)
		done <- answer{rep, err}
	}()
	for {
		changed := n.leaderChanged.wait()
		a, _ := n.raft.LeaderWithID()
		now := string(a)
		// Raft losing its leader says nothing of addr when addr was a
		// hint: only a leader other than both counts then.
		lost := now == "" && raftLeader == addr
		moved := now != "" && now != raftLeader && now != addr
		if lost || moved || n.term.Load() != nil {
			cancel()
			ans := <-done
			if ans.err == nil || errors.Is(ans.err, transport.ErrNotSent) {
				return ans.rep, ans.err
			}
			if ctx.Err() != nil {
				return reply{}, ans.err
			}
			n.log.Debug("leader replaced while a forwarded request was in flight; sending it again",
				"old", addr, "new", now)
			return reply{}, fmt.Errorf("%w: %s (now %q): %w", errLeaderReplaced, addr, now, ans.err)
		}
		select {
		case ans := <-done:
			return ans.rep, ans.err
		case <-changed:
		}
	}
}

// call sends one request to addr and decodes the reply.
func (n *Node) call(ctx context.Context, addr string, body []byte) (reply, error) {
	resp, err := n.tr.Call(ctx, addr, body)
	if err != nil {
		return reply{}, err
	}
	rep, err := decodeReply(resp)
	if err != nil {
		return reply{}, fmt.Errorf("reply from %s: %w", addr, err)
	}
	return rep, nil
}

// closedError is what a call on a closing node returns.
func (n *Node) closedError(unknown bool) error {
	if unknown {
		return fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, lock.ErrClosed)
	}
	return lock.ErrClosed
}

// endedError is what do returns when its context ends: the caller's own
// error when the caller's ctx ended, lock.ErrUnavailable when
// RequestTimeout did; in both cases also lock.ErrUnavailable when the last
// attempt found no usable leader.
func (n *Node) endedError(parent, ctx context.Context, unknown bool, lastErr error) error {
	var err error
	switch {
	case parent.Err() != nil && lastErr != nil:
		err = fmt.Errorf("%w (%v): %w", lock.ErrUnavailable, lastErr, parent.Err())
	case parent.Err() != nil:
		err = parent.Err()
	case lastErr != nil:
		err = fmt.Errorf("%w: no answer within %v (%v)", lock.ErrUnavailable, n.cfg.RequestTimeout, lastErr)
	default:
		err = fmt.Errorf("%w: no answer within %v", lock.ErrUnavailable, n.cfg.RequestTimeout)
	}
	if unknown {
		err = fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, err)
	}
	return err
}

// command runs one lock command at the leader; see do.
func (n *Node) command(ctx context.Context, cmd fsm.Command) (fsm.Result, bool, error) {
	rep, retried, err := n.do(ctx, request{kind: kindCommand, cmd: cmd})
	if err != nil {
		return fsm.Result{}, retried, err
	}
	if rep.kind != kindCommand {
		return fsm.Result{}, retried, fmt.Errorf("%w: %v reply to a command", ErrBadRequest, rep.kind)
	}
	return rep.result, retried, nil
}

// read asks the leader about key at its log time (a linearizable read);
// with owner, also whether owner holds it.
func (n *Node) read(ctx context.Context, key string, owner *fsm.Owner) (readResult, error) {
	req := request{kind: kindRead, key: key}
	if owner != nil {
		req.owner, req.withOwner = *owner, true
	}
	rep, _, err := n.do(ctx, req)
	if err != nil {
		return readResult{}, err
	}
	if rep.kind != kindRead {
		return readResult{}, fmt.Errorf("%w: %v reply to a read", ErrBadRequest, rep.kind)
	}
	return rep.read, nil
}

// serve runs req on this node as leader of term t. Its errors are
// errNotLeader, errLostLeadership, errShuttingDown, ctx's, or a message for
// codeUnavailable.
func (n *Node) serve(ctx context.Context, t *leaderTerm, req request) (reply, error) {
	switch req.kind {
	case kindCommand:
		if req.cmd.Op == fsm.OpCancelWait {
			return n.cancelWaitAtLeader(ctx, t, req.cmd) // see waiting.go
		}
		res, err := t.propose(ctx, req.cmd)
		if err != nil {
			return reply{}, err
		}
		return reply{code: codeOK, kind: kindCommand, result: res}, nil
	case kindRead:
		rr, err := n.readAtLeader(ctx, t, req)
		if err != nil {
			return reply{}, err
		}
		return reply{code: codeOK, kind: kindRead, read: rr}, nil
	case kindWaitAcquire:
		ans, err := n.waitAtLeader(ctx, t, req.cmd, n.clock.Monotonic())
		if err != nil {
			return reply{}, err
		}
		return reply{code: codeOK, kind: kindWaitAcquire, wait: ans}, nil
	case kindList:
		page, err := n.listAtLeader(ctx, t, req)
		if err != nil {
			return reply{}, err
		}
		return reply{code: codeOK, kind: kindList, list: page}, nil
	case kindJoin, kindJoinEmpty:
		if err := n.addMember(ctx, req.id, req.addr, req.kind == kindJoinEmpty); err != nil {
			return reply{}, err
		}
		return reply{code: codeOK, kind: req.kind}, nil
	case kindRemove:
		if err := n.removeServer(ctx, req.id); err != nil {
			return reply{}, err
		}
		return reply{code: codeOK, kind: kindRemove}, nil
	}
	return reply{}, fmt.Errorf("%w: unknown request kind %v", ErrBadRequest, req.kind)
}

// handleRPC serves requests forwarded by other nodes. It always answers
// with a reply (never a transport error), so the caller can tell "not the
// leader" from "bad request" from "outcome unknown".
func (n *Node) handleRPC(ctx context.Context, body []byte) ([]byte, error) {
	req, err := decodeRequest(body)
	if err == nil {
		err = checkForwarded(req)
	}
	if err != nil {
		n.log.Debug("rejecting forwarded request", "error", err)
		return reply{code: codeBadRequest, msg: err.Error()}.appendBinary(nil), nil
	}
	if req.kind == kindInfo {
		n.heardFrom(req.id, req.apiAddr)
		return reply{code: codeOK, kind: kindInfo, info: nodeInfo{id: n.cfg.NodeID, apiAddr: n.cfg.APIAddr}}.appendBinary(nil), nil
	}
	if req.kind == kindIdentity {
		return n.identityReply(req).appendBinary(nil), nil
	}
	if req.kind == kindServerStats {
		n.reconciler.heardFromLeader(req)
		return reply{code: codeOK, kind: kindServerStats, stats: n.ownServerStats()}.appendBinary(nil), nil
	}
	t := n.term.Load()
	if t == nil {
		return n.notLeaderReply(req.kind).appendBinary(nil), nil
	}
	if req.kind == kindList && (req.limit == 0 || req.limit > maxListPage) {
		// The reply must fit a frame: a longer listing is paged (more).
		req.limit = maxListPage
	}
	rep, err := n.serve(ctx, t, req)
	if err != nil {
		rep = n.errorReply(req.kind, err)
	}
	return rep.appendBinary(nil), nil
}

// checkForwarded admits what a follower may ask of the leader: the four
// client commands and waiting acquires, valid, and unstamped (only the
// leader stamps; the term's own commands are never forwarded); reads and
// listings that the store would accept; joins and removals that name a server.
func checkForwarded(req request) error {
	switch req.kind {
	case kindCommand:
		switch req.cmd.Op {
		case fsm.OpAcquire, fsm.OpRelease, fsm.OpExtend, fsm.OpCancelWait:
		default:
			return fmt.Errorf("%w: %v may not be forwarded", ErrBadRequest, req.cmd.Op)
		}
		if req.cmd.Stamp != 0 {
			return fmt.Errorf("%w: forwarded command carries a stamp", ErrBadRequest)
		}
		if err := req.cmd.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	case kindRead:
		if err := lock.ValidateKey(req.key); err != nil {
			return fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		if req.withOwner && req.owner.IsZero() {
			return fmt.Errorf("%w: zero owner", ErrBadRequest)
		}
	case kindWaitAcquire:
		if req.cmd.Op != fsm.OpAcquire || req.cmd.Wait <= 0 {
			return fmt.Errorf("%w: a waiting acquire must be an acquire with a wait", ErrBadRequest)
		}
		if req.cmd.Stamp != 0 {
			return fmt.Errorf("%w: forwarded command carries a stamp", ErrBadRequest)
		}
		if err := req.cmd.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	case kindList:
		if err := (lock.ListRequest{Prefix: req.prefix, After: req.after, Limit: req.limit}).Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	case kindJoin, kindJoinEmpty:
		if req.id == "" || req.addr == "" {
			return fmt.Errorf("%w: join needs an id and an address", ErrBadRequest)
		}
	case kindRemove:
		if req.id == "" {
			return fmt.Errorf("%w: remove needs an id", ErrBadRequest)
		}
	case kindServerStats:
		if req.id == "" {
			return fmt.Errorf("%w: server stats needs the asking leader's id", ErrBadRequest)
		}
	}
	return nil
}

func (n *Node) notLeaderReply(kind requestKind) reply {
	addr, _ := n.raft.LeaderWithID()
	if string(addr) == n.Addr() {
		addr = "" // raft says we lead but our term is not running yet
	}
	return reply{code: codeNotLeader, kind: kind, leader: string(addr)}
}

func (n *Node) errorReply(kind requestKind, err error) reply {
	switch {
	case errors.Is(err, errNotLeader):
		return n.notLeaderReply(kind)
	case errors.Is(err, errLostLeadership):
		return reply{code: codeLostLeadership, kind: kind, msg: err.Error()}
	case errors.Is(err, errShuttingDown):
		return reply{code: codeShuttingDown, kind: kind, msg: err.Error()}
	case errors.Is(err, ErrBadRequest):
		return reply{code: codeBadRequest, kind: kind, msg: err.Error()}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller gave up; nobody reads this. Say what is true of a command.
		return reply{code: codeLostLeadership, kind: kind, msg: err.Error()}
	default:
		return reply{code: codeUnavailable, kind: kind, msg: err.Error()}
	}
}

// readAtLeader answers a read at the leader's log time, once readIndex
// says it may.
func (n *Node) readAtLeader(ctx context.Context, t *leaderTerm, req request) (readResult, error) {
	if err := n.readIndex(ctx, t); err != nil {
		return readResult{}, err
	}
	st, at := n.sm.lookup(req.key, t.clock.now())
	return toReadResult(st, at, req), nil
}

// listAtLeader answers a listing at the leader's log time, once readIndex
// says it may: one consistent view of the whole page.
func (n *Node) listAtLeader(ctx context.Context, t *leaderTerm, req request) (listPage, error) {
	if err := n.readIndex(ctx, t); err != nil {
		return listPage{}, err
	}
	return n.sm.list(req.prefix, req.after, req.limit, t.clock.now()), nil
}

// readIndex makes sure that a read on this leader sees every write that
// committed before it began: remember the commit index, confirm leadership
// with a round of heartbeats, then wait until the state machine has applied
// up to that index. Its errors are errNotLeader (safe to retry: a read never
// takes effect), errShuttingDown and ctx's.
func (n *Node) readIndex(ctx context.Context, t *leaderTerm) error {
	select {
	case <-t.ready:
	case <-t.stop:
		return errNotLeader
	case <-ctx.Done():
		return ctx.Err()
	case <-n.closing:
		return errShuttingDown
	}
	commit := n.raft.CommitIndex()
	if err := n.waitFuture(ctx, n.raft.VerifyLeader()); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return errNotLeader
		}
		if errors.Is(err, raft.ErrRaftShutdown) {
			return errShuttingDown
		}
		return err
	}
	for {
		applied, changed := n.sm.appliedIndex()
		// Entries after readyIndex are all commands or configuration
		// changes, which the state machine counts; entries up to it (the
		// term's no-op and barrier among them) were applied before ready.
		if applied >= commit || t.readyIndex >= commit {
			return nil
		}
		select {
		case <-changed:
		case <-t.stop:
			return errNotLeader
		case <-ctx.Done():
			return ctx.Err()
		case <-n.closing:
			return errShuttingDown
		}
	}
}

func toReadResult(st fsm.KeyState, at time.Duration, req request) readResult {
	if !st.Held {
		return readResult{waiters: st.Waiters}
	}
	return readResult{
		held:      true,
		mine:      req.withOwner && st.Owner == req.owner,
		token:     st.Token,
		remaining: max(st.ExpiresAt-at, 0),
		waiters:   st.Waiters,
	}
}
