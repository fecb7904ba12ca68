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
// closes. The last member of a cluster just closes.
//
// If Leave fails the node is still open, and the error says whether it is
// still a member or may be one (its removal was asked for, and the answer
// did not come): Close it, or Leave again. Once the removal has reached
// this node (it is no longer in its own latest configuration) Leave closes
// it whatever became of the answer: a node out of the configuration
// serves nothing, and with Peers nothing adds it back.
//
// Only a leader can remove a member, so with no leader known Leave waits
// for one (leaveLeaderWait: a few election timeouts, at least five
// seconds, also when the leader is lost midway) and then fails with
// lock.ErrUnavailable rather than hold a stopping process for its whole
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
	switch {
	case !member && n.removalAsked.Load():
		// An earlier Leave asked for this node's removal and gave up
		// before the removal reached it; it has now.
		n.log.Info("leave: this node's removal, asked for by an earlier Leave, has reached it; closing")
	case !(member && len(servers) == 1):
		// Once removed, this node is not in its configuration, which
		// gossip would answer by asking to be added back (SetLeaving says
		// how it does not).
		n.membership.SetLeaving(true)
		defer func() {
			if err != nil { // still running
				n.membership.SetLeaving(false)
			}
		}()
		if err := n.awaitLeader(ctx, n.leaveLeaderWait()); err != nil {
			if member && !n.removalAsked.Load() {
				return fmt.Errorf("cluster: leave: %w; the node is still a member: Leave again once a leader is known, or Close it", err)
			}
			// Not in its configuration yet (just joined), or an earlier
			// Leave's removal may yet commit.
			return fmt.Errorf("cluster: leave: %w; the node may still be a member: Leave again once a leader is known, or Close it", err)
		}
		if err := n.askRemoval(ctx, member); err != nil {
			if !member || !n.removedFromConfiguration() {
				return err
			}
			// The removal reached this node, but the leader's answer did
			// not: it was lost, or this node, out of the configuration,
			// hears no leader any more and gave up. The removal is
			// appended; it may not be committed yet, and this node cannot
			// learn that it is (the leader stops replicating to a member
			// as it appends its removal). Closing is the safe choice:
			//   - committed, the removal stands, and a node that stayed
			//     open outside the configuration would serve nothing and
			//     never be added back (with Peers; or gossip would add it
			//     back, undoing the Leave);
			//   - not committed, it commits without this node (a removal
			//     counts the votes of the configuration without it), or
			//     is dropped only if a leader is elected whose log lacks
			//     it, which takes a majority of the old configuration
			//     without the entry while the leader that appended it and
			//     this node both hold it: with three voters, only if that
			//     leader's disk lost it (an unsynced write). Then
			//     the cluster keeps this node as a stopped member, as
			//     after a crash, or as after the Close a caller is told to
			//     do when Leave fails; started again on its DataDir it
			//     rejoins, and Leave removes it.
			n.log.Warn("leave: the removal of this node reached it but the leader's answer did not; closing as a node that left",
				"error", err)
		}
	}
	n.membership.StopGossip(true) // the others see it left, not failed
	return n.Close()
}

// askRemoval asks the leader to remove this node, handing leadership over
// first while this node leads. member: the node was in its configuration
// when Leave began. Its errors say whether the node may still be removed.
func (n *Node) askRemoval(ctx context.Context, member bool) error {
	// A leader can be lost midway (the other members are stopping too):
	// give up once none has been known for leaveLeaderWait.
	wait := n.leaveLeaderWait()
	lctx, stop := n.whileLeaderKnown(ctx, wait)
	defer stop()
	asked := false // a removal was asked for and its outcome is not known
	defer func() {
		if asked && member {
			n.removalAsked.Store(true)
		}
	}()
	fail := func(err error) error {
		if cause := context.Cause(lctx); lctx.Err() != nil && ctx.Err() == nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		if asked {
			return fmt.Errorf("cluster: leave: %w; the node may still be a member (its removal may yet commit): Leave again, or Close it", err)
		}
		return fmt.Errorf("cluster: leave: %w; the node is still a member: Leave again, or Close it", err)
	}
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
			return fail(err)
		}
		_, err := n.do(lctx, &nodewire.Remove{ID: n.cfg.NodeID}, nil)
		if err == nil {
			return nil
		}
		if errors.Is(err, errLeaderRemovesItself) {
			if round >= maxLeaveRounds || lctx.Err() != nil {
				return fail(err)
			}
			n.log.Debug("leave: this node still leads; handing leadership over again", "round", round)
			select {
			case <-time.After(pause):
			case <-lctx.Done():
			}
			pause = min(2*pause, time.Second)
			continue
		}
		asked = true
		if member && n.removedFromConfiguration() {
			return fail(err) // Leave closes the node
		}
		var leaderless *noLeaderError
		if errors.As(err, &leaderless) && lctx.Err() == nil {
			// do gives up once no leader has been known for LeaderWait
			// (a lock call's wait), shorter than Leave's own wait: an
			// election after a leader's crash, on a loaded host, can
			// take longer. lctx ends once none has been known for
			// leaveLeaderWait.
			n.log.Debug("leave: no leader known for a while; asking again once one is", "error", err)
			if werr := n.awaitLeader(lctx, wait); werr != nil {
				return fail(err)
			}
			continue
		}
		return fail(err)
	}
}

// configuration is this node's place in its latest raft configuration
// (appended, maybe not yet committed): whether it is a member and a voter,
// and how many other voters there are; ok is false when it cannot read
// it. raft reads the configuration without its main loop, so raft's own
// goroutines may call it (the log store does, through soleVoter).
func (n *Node) configuration() (member, voter bool, otherVoters int, ok bool) {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return false, false, 0, false
	}
	for _, s := range cf.Configuration().Servers {
		switch {
		case s.ID == raft.ServerID(n.cfg.NodeID):
			member, voter = true, s.Suffrage == raft.Voter
		case s.Suffrage == raft.Voter:
			otherVoters++
		}
	}
	return member, voter, otherVoters, true
}

// removedFromConfiguration reports whether this node is missing from its
// latest raft configuration.
func (n *Node) removedFromConfiguration() bool {
	member, _, _, ok := n.configuration()
	return ok && !member
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
			return fmt.Errorf("no other voter took over leadership (%w, %d tries)", err, attempt)
		}
		n.log.Debug("leave: leadership transfer failed; trying again", "attempt", attempt, "error", err)
	}
	return nil
}

// otherVoters counts the voters of the latest configuration other than
// this node.
func (n *Node) otherVoters() int {
	_, _, others, _ := n.configuration()
	return others
}

// soleVoter reports whether this node is the only voter of the latest
// configuration.
func (n *Node) soleVoter() bool {
	_, voter, others, ok := n.configuration()
	return ok && voter && others == 0
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
