package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/cluster/internal/retry"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/lockfsm"
	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/transport"
)

// Commands, forwarding and retries.
//
// A command on the leader joins the term's proposal queue. A command on a
// follower is sent over transport.Call to the leader, which stamps, proposes
// and answers with the fsm.Result; the messages and their compatibility
// rules are in package nodewire. The one exception to upgrading one node at a time
// is claims (see package waiting): a node from before them cannot read the
// new-term and drop-unclaimed log entries or a version 2 snapshot, and
// would grant waiters the others skip, so across that change every member
// is stopped, upgraded and started again together.
//
// A command is retried across leader changes within the caller's context,
// Config.RequestTimeout, and Config.LeaderWait without a leader: see do. If
// any attempt's outcome was unknown, a final error also matches
// lock.ErrUnknownOutcome: retrying with the same owner is safe. (Release
// then reports a key no longer held as released: see Release.)

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
// owner, which makes them idempotent (force-release, which carries none, is
// not retried then: see Node.ForceRelease). A forwarded attempt still waiting for
// its answer when raft reports that the leader it went to is replaced (by
// another, or by none: it stopped answering) is abandoned — its call is
// cancelled, so a late answer is dropped by the transport — and its request
// sent again at once to the new leader: its outcome is unknown too. Once any
// attempt's outcome was unknown, a final error also matches
// lock.ErrUnknownOutcome.
//
// Errors: lock.ErrClosed once the node closes; ctx's error when ctx ends
// (also matching lock.ErrUnavailable if the last attempt found no leader);
// lock.ErrUnavailable when RequestTimeout passes or no leader is known for
// the leader wait; ErrBadRequest when the leader rejects the request itself.
//
// The answer goes into into when into is of the answer type of req's kind
// (see kindServer.serve and nodewire.DecodeReplyInto); nil: a fresh one.
func (n *Node) do(ctx context.Context, req nodewire.Request, into nodewire.Answer) (ans nodewire.Answer, err error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()

	var (
		unknown bool   // an attempt may have taken effect
		lastErr error  // why the last attempt did not answer
		hint    string // a leader address learned from a "not leader" reply
		tried   string // the address the last attempt went to
	)
	var leaderless time.Time // since when no leader has been known, in a row; zero while one is
	wait := n.leaderWait()
	// Only a command takes effect when it is proposed: for the other kinds
	// an attempt whose answer is lost leaves nothing unknown.
	mayApply := req.Kind() == nodewire.KindCommand
	p := retry.NewPacer(n, n.closing)
	defer p.Stop()
	var body []byte
	for {
		if n.closed() || n.sm.halt.Load() != nil {
			return nil, n.closedError(unknown)
		}
		if err := n.logFaultError(unknown); err != nil {
			return nil, err
		}
		changed := n.leaderChanged.Wait()

		var attemptErr error
		if g := groupSeatFor(ctx, req); g != nil {
			// The first attempt goes with the caller's group (group.go).
			o := g.attempt(ctx, req.(*nodewire.Command).Cmd)
			if o.alone {
				continue // sent alone: the next pass, without the group
			}
			ans, attemptErr, hint, tried = o.ans, o.err, o.hint, o.tried
		} else if t := n.term.Load(); t != nil {
			tried = ""
			ans, attemptErr = serve(ctx, n, t, req, into)
		} else {
			addr, raftLeader, err := n.leaderTarget(hint)
			hint = ""
			attemptErr = err
			if err == nil {
				tried = addr
				if body == nil {
					body = nodewire.EncodeRequest(req)
				}
				var rep nodewire.Reply
				rep, attemptErr = n.callLeader(ctx, addr, raftLeader, body, false, into)
				if attemptErr == nil {
					ans, attemptErr, hint = rep.Answer, rep.Err(), rep.Leader
				}
			}
		}
		if attemptErr == nil {
			return ans, nil
		}

		switch {
		case errors.Is(attemptErr, errNoLeader), errors.Is(attemptErr, errNotLeader),
			errors.Is(attemptErr, transport.ErrNotSent), errors.Is(attemptErr, transport.ErrRemote):
			// Certainly not applied: retry. (Our handler never fails, so
			// ErrRemote means the peer is still starting: no handler yet.)
		case errors.Is(attemptErr, errLostLeadership), errors.Is(attemptErr, errLeaderClosing),
			errors.Is(attemptErr, transport.ErrConnLost), errors.Is(attemptErr, errLeaderReplaced),
			errors.Is(attemptErr, errGroupAbandoned):
			unknown = unknown || mayApply
			if c, ok := req.(*nodewire.Command); ok && c.Cmd.Op == fsm.OpForceRelease {
				// Not idempotent: a retry after the first took effect
				// would end the lease of the waiter it handed the key to.
				return nil, fmt.Errorf("%w: force-release of %q: %w", lock.ErrUnknownOutcome, c.Cmd.Key, attemptErr)
			}
		case errors.Is(attemptErr, errShuttingDown), errors.Is(attemptErr, transport.ErrClosed):
			return nil, n.closedError(unknown || mayApply)
		case ctx.Err() != nil:
			// The attempt was cut short by ctx: it may have been sent.
			unknown = unknown || mayApply
			return nil, n.endedError(parent, ctx, unknown, lastErr)
		case errors.Is(attemptErr, ErrBadRequest), errors.Is(attemptErr, transport.ErrTooLarge),
			errors.Is(attemptErr, ErrMemberTooOld):
			return nil, attemptErr
		case errors.Is(attemptErr, lock.ErrQuotaExceeded):
			// Refused by the leader's quotas before it was proposed (quota.go).
			return nil, attemptErr
		case errors.Is(attemptErr, errLeaderRemovesItself):
			// Leave hands leadership over again; retrying here would not.
			return nil, attemptErr
		default:
			// nodewire.CodeUnavailable and the unexpected: retry after a pause.
		}
		lastErr = attemptErr
		if ctx.Err() != nil {
			return nil, n.endedError(parent, ctx, unknown, lastErr)
		}
		pause := retry.MaxBackoff
		if errors.Is(attemptErr, errNoLeader) {
			if leaderless.IsZero() {
				leaderless = time.Now()
			}
			left := wait - time.Since(leaderless)
			if left <= 0 {
				return nil, n.leaderlessError(wait, unknown)
			}
			pause = min(pause, left)
		} else {
			leaderless = time.Time{}
		}
		if err := p.Pause(ctx, changed, hint, tried, pause); errors.Is(err, lock.ErrClosed) {
			return nil, n.closedError(unknown)
		} else if err != nil {
			return nil, n.endedError(parent, ctx, unknown, lastErr)
		}
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
	errLeaderClosing  = nodewire.ErrLeaderClosing
	errLeaderReplaced = errors.New("cluster: leader replaced while the request was in flight")
)

// leaderWait is how long a request may go on finding no leader before do
// gives up: Config.LeaderWait (see there). (A waiting acquire, which waits
// at least its wait, does not go through do: see package waiting.)
func (n *Node) leaderWait() time.Duration {
	if n.cfg.LeaderWait == 0 {
		return defaultLeaderWaitElections * n.cfg.ElectionTimeout
	}
	return n.cfg.LeaderWait
}

// logFaultError is what a lock call fails with, at once, while this node
// is the only voter and its raft log cannot be written: nothing can commit
// until a write succeeds (the node waits for it as leader: see
// datadir.Store.StoreLogs), and no other member could lead. Nil otherwise;
// with other voters, one whose disk has room leads. unknown: an earlier
// attempt may have taken effect.
func (n *Node) logFaultError(unknown bool) error {
	fault, hint := n.store.DescribeFault()
	if fault == "" || !n.soleVoter() {
		return nil
	}
	err := fmt.Errorf("%w: %w: node %s is the only voter, so nothing commits until a write succeeds: %s; %s",
		lock.ErrUnavailable, ErrLogFault, n.cfg.NodeID, fault, hint)
	if unknown {
		err = fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, err)
	}
	return err
}

// leaderlessError is what do returns when no leader was known for wait.
func (n *Node) leaderlessError(wait time.Duration, unknown bool) error {
	err := fmt.Errorf("%w: %w", lock.ErrUnavailable, &noLeaderError{wait})
	if unknown {
		err = fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, err)
	}
	return err
}

// noLeaderError says that do gave up because no leader was known for
// wait in a row. Leave, which waits longer for a leader than a lock call
// does (leaveLeaderWait), asks again when it meets one.
type noLeaderError struct{ wait time.Duration }

func (e *noLeaderError) Error() string {
	return fmt.Sprintf("no leader for %v: an election is taking long, or a majority of the voters is down or cut off from this node", e.wait)
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
//
// A parked call (a waiting acquire) is not cut when raft merely loses its
// leader: the leader, even one that lost its quorum for a while, still
// answers it, and the wait bounds it. The reply's answer goes into into as
// nodewire.DecodeReplyInto says.
func (n *Node) callLeader(ctx context.Context, addr, raftLeader string, body []byte, parked bool, into nodewire.Answer) (nodewire.Reply, error) {
	type answer struct {
		rep nodewire.Reply
		err error
	}
	done := make(chan answer, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		rep, err := n.call(cctx, addr, body, into)
		done <- answer{rep, err}
	}()
	for {
		changed := n.leaderChanged.Wait()
		a, _ := n.raft.LeaderWithID()
		now := string(a)
		// Raft losing its leader says nothing of addr when addr was a
		// hint: only a leader other than both counts then.
		lost := !parked && now == "" && raftLeader == addr
		moved := now != "" && now != raftLeader && now != addr
		if lost || moved || n.term.Load() != nil {
			cancel()
			ans := <-done
			if ans.err == nil || errors.Is(ans.err, transport.ErrNotSent) {
				return ans.rep, ans.err
			}
			if ctx.Err() != nil {
				return nodewire.Reply{}, ans.err
			}
			n.log.Debug("leader replaced while a forwarded request was in flight; sending it again",
				"old", addr, "new", now)
			return nodewire.Reply{}, fmt.Errorf("%w: %s (now %q): %w", errLeaderReplaced, addr, now, ans.err)
		}
		select {
		case ans := <-done:
			return ans.rep, ans.err
		case <-changed:
		}
	}
}

// call sends one request to addr and decodes the reply (its answer into
// into: see nodewire.DecodeReplyInto).
func (n *Node) call(ctx context.Context, addr string, body []byte, into nodewire.Answer) (nodewire.Reply, error) {
	resp, err := n.tr.Call(ctx, addr, body)
	if err != nil {
		return nodewire.Reply{}, err
	}
	rep, err := nodewire.DecodeReplyInto(resp, into)
	if err != nil {
		return nodewire.Reply{}, fmt.Errorf("reply from %s: %w", addr, err)
	}
	return rep, nil
}

// closedError is what a call on a closing node returns: lock.ErrClosed, or
// on a node that stopped by itself an error that also says why (ErrHalted,
// ErrLogSyncFailed).
func (n *Node) closedError(unknown bool) error {
	err := lock.ErrClosed
	if h := n.haltedError(); h != nil {
		err = h
	}
	if unknown {
		return fmt.Errorf("%w: %w", lock.ErrUnknownOutcome, err)
	}
	return err
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

// ask runs req at the leader (see do: into) and returns its answer, which
// must be an A: a peer that answers another kind is refused with
// ErrBadRequest.
func ask[A nodewire.Answer](ctx context.Context, n *Node, req nodewire.Request, into nodewire.Answer) (A, error) {
	ans, err := n.do(ctx, req, into)
	a, ok := ans.(A)
	if err == nil && !ok {
		err = fmt.Errorf("%w: %T answer to a %v request", ErrBadRequest, ans, req.Kind())
	}
	return a, err
}

// command runs one lock command at the leader; see do.
func (n *Node) command(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	// The request and the room for its answer are one allocation, where
	// two apart would make one more object of every command's garbage.
	c := &struct {
		req nodewire.Command
		ans nodewire.CommandAnswer
	}{req: nodewire.Command{Cmd: cmd}}
	ans, err := ask[*nodewire.CommandAnswer](ctx, n, &c.req, &c.ans)
	if err != nil {
		return fsm.Result{}, err
	}
	return ans.Res, nil
}

// read asks the leader about key at its log time (a linearizable read);
// with owner, also whether owner holds it.
func (n *Node) read(ctx context.Context, key string, owner *fsm.Owner) (nodewire.ReadResult, error) {
	req := &nodewire.Read{Key: key}
	if owner != nil {
		req.Owner, req.WithOwner = *owner, true
	}
	rr, err := ask[*nodewire.ReadResult](ctx, n, req, nil)
	if err != nil {
		return nodewire.ReadResult{}, err
	}
	return *rr, nil
}

// handleRPC serves requests forwarded by other nodes: it decodes and admits
// each (the one check of a request entering this node from another), and
// serves it. It always answers with a reply (never a transport error), so
// the caller can tell "not the leader" from "bad request" from "outcome
// unknown".
func (n *Node) handleRPC(ctx context.Context, body []byte) ([]byte, error) {
	req, err := nodewire.DecodeRequest(body)
	if err == nil {
		err = admit(req)
	}
	if err != nil {
		n.log.Debug("rejecting forwarded request", "error", err)
		return nodewire.Reply{Code: nodewire.CodeBadRequest, Msg: err.Error()}.AppendBinary(nil), nil
	}
	t := n.term.Load()
	if t == nil && !servers[req.Kind()].anyNode {
		return n.notLeaderReply(req.Kind()).AppendBinary(nil), nil
	}
	if err := n.logFaultError(false); err != nil {
		return n.errorReply(req.Kind(), err).AppendBinary(nil), nil
	}
	if c, ok := req.(*nodewire.Command); ok {
		// Most forwarded requests are commands: their answer is encoded
		// from here, where a Reply's Answer would make it escape.
		ans, err := serveCommand(ctx, n, t, c)
		if err != nil {
			return n.errorReply(req.Kind(), err).AppendBinary(nil), nil
		}
		return ans.AppendReply(make([]byte, 0, commandReplyRoom)), nil
	}
	ans, err := serve(ctx, n, t, req, nil)
	if err != nil {
		return n.errorReply(req.Kind(), err).AppendBinary(nil), nil
	}
	return nodewire.Reply{Code: nodewire.CodeOK, Kind: req.Kind(), Answer: ans}.AppendBinary(nil), nil
}

// commandReplyRoom holds a command's reply unless its token and log times
// are very large: appended to nothing, it would grow three times.
const commandReplyRoom = 32

func (n *Node) notLeaderReply(kind nodewire.Kind) nodewire.Reply {
	addr, _ := n.raft.LeaderWithID()
	if string(addr) == n.Addr() {
		addr = "" // raft says we lead but our term is not running yet
	}
	return nodewire.Reply{Code: nodewire.CodeNotLeader, Kind: kind, Leader: string(addr)}
}

// errorReply answers a serve's error with its code (nodewire.CodeFor).
func (n *Node) errorReply(kind nodewire.Kind, err error) nodewire.Reply {
	code := nodewire.CodeFor(err)
	if code == nodewire.CodeNotLeader {
		return n.notLeaderReply(kind)
	}
	return nodewire.Reply{Code: code, Kind: kind, Msg: err.Error()}
}

// readAtLeader answers a read at the leader's log time, once readIndex
// says it may.
func (n *Node) readAtLeader(ctx context.Context, t *leaderTerm, req *nodewire.Read) (nodewire.ReadResult, error) {
	if err := n.readIndex(ctx, t); err != nil {
		return nodewire.ReadResult{}, err
	}
	st, setKeys, at := n.sm.read(req.Key, t.clock.now())
	return toReadResult(st, setKeys, at, req), nil
}

// listAtLeader answers a listing at the leader's log time, once readIndex
// says it may: one consistent view of the whole page.
func (n *Node) listAtLeader(ctx context.Context, t *leaderTerm, req *nodewire.List) (nodewire.ListPage, error) {
	if err := n.readIndex(ctx, t); err != nil {
		return nodewire.ListPage{}, err
	}
	return n.sm.list(req.Prefix, req.After, req.Limit, t.clock.now()), nil
}

// readIndex makes sure that a read on this leader sees every write that
// committed before it began: remember the commit index, confirm leadership
// with a round of heartbeats, then wait until the state machine has applied
// up to that index. Its errors are errNotLeader (safe to retry: a read never
// takes effect), errShuttingDown and ctx's.
func (n *Node) readIndex(ctx context.Context, t *leaderTerm) error {
	if err := n.until(ctx, t, t.ready); err != nil {
		return err
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
		if err := n.until(ctx, t, changed); err != nil {
			return err
		}
	}
}

// until waits for ch to close while this node leads in term t. Its errors
// are errNotLeader once the term ends, ctx's, and errShuttingDown.
func (n *Node) until(ctx context.Context, t *leaderTerm, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-t.stop:
		return errNotLeader
	case <-ctx.Done():
		return ctx.Err()
	case <-n.closing:
		return errShuttingDown
	}
}

// toReadResult is the answer to req of a key in state st read at log time
// at: what lockfsm.KeyInfo says of it, plus whether the asker holds it.
// holders is the machine's own count (0 for a mutex), as the wire carries
// it; keyInfo makes it KeyInfo.Holders again.
func toReadResult(st fsm.KeyState, setKeys []string, at time.Duration, req *nodewire.Read) nodewire.ReadResult {
	info := lockfsm.KeyInfo(st, at, setKeys)
	if !info.Locked {
		return nodewire.ReadResult{Waiters: info.Waiters, Reserved: info.Reserved}
	}
	return nodewire.ReadResult{
		Held:      true,
		Mine:      req.WithOwner && st.Owner == req.Owner,
		Token:     info.Token,
		Remaining: info.Remaining,
		Waiters:   info.Waiters,
		Meta:      info.Metadata,
		Delayed:   info.Delayed,
		Kind:      st.Kind,
		Limit:     info.Limit,
		Holders:   st.Holders,
		Shared:    info.Shared,
		Holds:     info.Holds,
		SetKeys:   info.SetKeys,
	}
}
