package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"
	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
)

// Leave takes the node out of the cluster gracefully and closes it. A
// leader first hands leadership to another voter, so the cluster does not
// wait out an election timeout; then the leader removes this node from the
// configuration (a joint decision committed like any entry); then the node
// closes. The last member of a cluster just closes. If Leave fails the node
// is still open and still a member; Close it, or try again.
//
// Only a leader can remove a member, so with no leader known Leave waits
// for one briefly (leaveLeaderWait: a few election timeouts) and then fails
// with lock.ErrUnavailable rather than hold a stopping process for its whole
// ctx. A node that left and is started again on its DataDir asks to be
// added back (package membership's rejoin): to take a member away for
// good, Leave and do not start it again (or remove its DataDir).
func (n *Node) Leave(ctx context.Context) (err error) {
	if n.closed() {
		return fmt.Errorf("cluster: leave: %w", lock.ErrClosed)
	}
	servers, err := n.Servers()
	if err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	// Only the sole member of a known configuration has nobody to ask. A
	// node that has not yet received the configuration it was added in
	// (just joined) asks the leader too; removing a non-member is a no-op.
	_, member := servers[n.cfg.NodeID]
	if alone := member && len(servers) == 1; !alone {
		// Once removed, this node is not in its configuration, which
		// gossip would answer by asking to be added back (SetLeaving says
		// how it does not).
		n.membership.SetLeaving(true)
		defer func() {
			if err != nil { // still running as a member
				n.membership.SetLeaving(false)
			}
		}()
		if err := n.awaitLeader(ctx, n.leaveLeaderWait()); err != nil {
			return fmt.Errorf("cluster: leave: %w; the node is still a member", err)
		}
		// A leader can be lost midway (the other members are stopping too):
		// give up once none has been known for leaveLeaderWait.
		lctx, stop := n.whileLeaderKnown(ctx, n.leaveLeaderWait())
		defer stop()
		// A leader never removes itself: it hands leadership over first, or
		// stays. A leader that appends its own removal and stops before a
		// follower has the entry comes back with that entry only in its own
		// log: it no longer votes for itself in its configuration, so it
		// never campaigns, and it refuses its old peers' votes because its
		// log is longer than theirs. With the other members gone too (all
		// stopping at once) no election can ever succeed.
		// raft gives a transfer one election timeout for the chosen
		// follower to win; on a busy host it may not, and the next try
		// usually succeeds. Leadership may also come back to this node
		// before its removal is asked for (it still has the longest log):
		// then it hands it over again.
		// This node may also still serve the removal as the leader it just
		// stopped being (its term ends a moment after the transfer): the
		// pause lets that pass.
		pause := 20 * time.Millisecond
		for round := 1; ; round++ {
			if err := n.handOverLeadership(lctx); err != nil {
				return err
			}
			_, err := n.do(lctx, &nodewire.Remove{ID: n.cfg.NodeID})
			if err == nil {
				break
			}
			if errors.Is(err, errLeaderRemovesItself) && round < maxLeaveRounds && lctx.Err() == nil {
				n.log.Debug("leave: this node still leads; handing leadership over again", "round", round)
				select {
				case <-time.After(pause):
				case <-lctx.Done():
				}
				pause = min(2*pause, time.Second)
				continue
			}
			if cause := context.Cause(lctx); lctx.Err() != nil && ctx.Err() == nil {
				// The removal may still commit: the node then rejoins when
				// it is started again.
				err = fmt.Errorf("%w (%w); the node may still be a member", cause, err)
			}
			return fmt.Errorf("cluster: leave: %w", err)
		}
	}
	n.membership.StopGossip(true) // the others see it left, not failed
	return n.Close()
}

// handOverLeadership transfers leadership to another voter if this node
// leads and another voter exists, trying up to maxLeaveTransfers times.
func (n *Node) handOverLeadership(ctx context.Context) error {
	for attempt := 1; n.IsLeader() && n.otherVoters() > 0; attempt++ {
		err := n.waitFuture(ctx, n.raft.LeadershipTransfer())
		if err == nil {
			return nil
		}
		if attempt == maxLeaveTransfers || ctx.Err() != nil {
			return fmt.Errorf("cluster: leave: no other voter took over leadership (%w, %d tries); the node is still a member", err, attempt)
		}
		n.log.Debug("leave: leadership transfer failed; trying again", "attempt", attempt, "error", err)
	}
	return nil
}

// otherVoters counts the voters of the latest configuration other than
// this node.
func (n *Node) otherVoters() int {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return 0
	}
	count := 0
	for _, s := range cf.Configuration().Servers {
		if s.ID != raft.ServerID(n.cfg.NodeID) && s.Suffrage == raft.Voter {
			count++
		}
	}
	return count
}

// soleVoter reports whether this node is the only voter of the latest
// configuration. raft reads the configuration without its main loop, so
// raft's own goroutines may call it (the log store does: StoreLogs).
func (n *Node) soleVoter() bool {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return false
	}
	voter := false
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		if s.ID != raft.ServerID(n.cfg.NodeID) {
			return false
		}
		voter = true
	}
	return voter
}

// whileLeaderKnown returns a context that ends with ctx, or with an error
// matching lock.ErrUnavailable once this node has known no leader for d in
// a row. stop releases it.
func (n *Node) whileLeaderKnown(ctx context.Context, d time.Duration) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for {
			if err := n.awaitLeader(ctx, d); err != nil {
				cancel(err)
				return
			}
			changed := n.leaderChanged.Wait()
			if id, _ := n.Leader(); id == "" {
				continue
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// leaveLeaderWait is how long Leave waits for a leader to be known: long
// enough for an election or two, short enough that stopping a node cut off
// from its cluster is prompt. Four timeouts cover two elections on an idle
// host; minLeaveLeaderWait covers them on a busy one (an agent's 500 ms
// timeouts gave 2 s, and a leave asked for on a loaded host just after a
// leader change failed with "no leader known").
func (n *Node) leaveLeaderWait() time.Duration {
	return max(4*max(n.cfg.ElectionTimeout, n.cfg.HeartbeatTimeout), minLeaveLeaderWait)
}

// maxLeaveTransfers is how many leadership transfers a leaving leader
// tries in a row before Leave fails; maxLeaveRounds how many times it
// hands leadership over and asks for its removal.
const (
	maxLeaveTransfers = 5
	maxLeaveRounds    = 20
)

// minLeaveLeaderWait is leaveLeaderWait's floor.
const minLeaveLeaderWait = 5 * time.Second

// awaitLeader waits until this node knows a leader, for at most d. It
// fails with lock.ErrUnavailable when d passes, ctx's error when ctx ends,
// and lock.ErrClosed when the node closes.
func (n *Node) awaitLeader(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		changed := n.leaderChanged.Wait()
		if id, _ := n.Leader(); id != "" {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return fmt.Errorf("%w: no leader known after %v", lock.ErrUnavailable, d)
		case <-ctx.Done():
			return ctx.Err()
		case <-n.closing:
			return lock.ErrClosed
		}
	}
}
