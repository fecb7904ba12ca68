package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"

	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/transport"
)

// moreTelling is the error a join reports of its attempts: the latest,
// unless it only says that time ran out (the context ended mid-attempt)
// and an earlier attempt said why it failed — a peer that refuses this
// node's certificate would otherwise read, on a busy host, as a timeout.
func moreTelling(earlier, latest error) error {
	if earlier != nil && (errors.Is(latest, context.DeadlineExceeded) || errors.Is(latest, context.Canceled)) {
		return earlier
	}
	return latest
}

// join asks the members at addrs, in turn, to add this node as a voter. A
// member that does not lead answers with the leader's address, which join
// then asks directly. It retries with a growing pause until ctx ends, and
// returns the address that answered yes. retrying, if not nil, is told why
// each round failed.
//
// kind is kindJoinEmpty when New calls it for a node whose data dir held no
// raft state: if the cluster still lists its ID (its data dir was emptied),
// the leader removes that member first. (Its log is no test: the leader may
// have replicated to it already.) A restart on existing state asks with
// kindJoin.
func (n *Node) join(ctx context.Context, kind nodewire.Kind, addrs []string, retrying func(lastErr error)) (via string, err error) {
	req := nodewire.Join{ID: n.cfg.NodeID, Addr: n.Addr(), Empty: kind == nodewire.KindJoinEmpty, ClusterID: n.ident.ClusterID()}
	body := nodewire.EncodeRequest(&req)
	backoff := 50 * time.Millisecond
	var lastErr error
	for {
		if n.IsLeader() {
			// Only a member leads (raft steps a leader down once it is
			// removed), and the others would point back here. A leader
			// that does not know its cluster ID asks the other servers.
			n.learnClusterFromServers(ctx)
			return n.Addr(), nil
		}
		notPeers := 0 // addresses where no raftlock peer answers (see below)
		for _, addr := range addrs {
			// A member that does not lead points at the leader; follow at
			// most a few such hints, so two confused members cannot loop.
			for hops := 0; hops < 3 && addr != "" && addr != n.Addr(); hops++ {
				them, err := n.checkCluster(ctx, addr)
				if errors.Is(err, ErrWrongCluster) {
					return "", fmt.Errorf("%w: %w", ErrJoin, err)
				}
				if errors.Is(err, transport.ErrNotPeer) {
					notPeers++
					lastErr = err // it names addr
					break
				}
				if err != nil {
					lastErr = moreTelling(lastErr, fmt.Errorf("%s: %w", addr, err))
					break
				}
				rep, err := n.call(ctx, addr, body)
				if err != nil {
					lastErr = moreTelling(lastErr, fmt.Errorf("%s: %w", addr, err))
					break
				}
				switch err := rep.Err(); {
				case err == nil:
					n.joinedCluster(them.ClusterID)
					return addr, nil
				case errors.Is(err, errNotLeader):
					lastErr = fmt.Errorf("%s: not the leader", addr)
					addr = rep.Leader
					continue
				case errors.Is(err, ErrWrongCluster):
					return "", fmt.Errorf("%w: %s refused: %w", ErrJoin, addr, err)
				case errors.Is(err, ErrBadRequest):
					if req.ClusterID != "" && strings.Contains(rep.Msg, "trailing bytes") {
						// A leader from before the cluster ID in join
						// requests: checkCluster checked it on this side.
						req.ClusterID = ""
						body = nodewire.EncodeRequest(&req)
						continue
					}
					if kind == nodewire.KindJoinEmpty && strings.Contains(rep.Msg, "request kind") {
						// A leader from before kindJoinEmpty: join as before.
						n.log.Warn("the leader does not know join-empty; joining without asking it to remove an old member of this ID", "leader", addr,
							"what_to_do", "upgrade every member to one raftlock version")
						kind = nodewire.KindJoin
						req.Empty = false
						body = nodewire.EncodeRequest(&req)
						continue
					}
					return "", fmt.Errorf("%w: %s refused: %s", ErrJoin, addr, rep.Msg)
				default:
					lastErr = fmt.Errorf("%s: %w", addr, err)
				}
				break
			}
		}
		if notPeers == len(addrs) && retrying == nil {
			// Every address given to New's join is an HTTP server or a
			// peer that needs TLS: a mistake in the configuration that
			// waiting out RequestTimeout would only hide.
			return "", fmt.Errorf("%w: %w", ErrJoin, lastErr)
		}
		if retrying != nil {
			retrying(lastErr)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w: no member of %v added this node (last error: %v)", ErrJoin, addrs, lastErr)
		case <-n.closing:
			return "", fmt.Errorf("%w: node closed", ErrJoin)
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		}
	}
}

// rejoin runs on every start on existing state: it asks to be added to the
// cluster again, in the background and until a member says yes or the node
// closes. The addresses it asks are the other servers of the latest raft
// configuration this node knows, then Config.Join and Config.Peers, so a
// member comes back whichever way it was first started (Bootstrap alone,
// Bootstrap with Peers, or Join).
//
// A node that left (Leave, or the agent's -leave-on-terminate) or was
// removed (a non-voter gone past DeadMemberTimeout) is no longer in the
// leader's configuration: without this it would wait forever for a leader
// that never contacts it, and after every member of a cluster left in turn
// the last one would lead alone while the others stayed orphaned. Its own
// configuration may not show the removal (the leader stops replicating to a
// removed server as soon as it appends the change), so a node that still
// finds itself a member asks too; for a member the request is a no-op on the
// leader (addMember). It must not block New: after a full-cluster restart no
// leader exists until enough members are back.
func (n *Node) rejoin() {
	defer n.wg.Done()
	member, addrs := n.rejoinAddrs()
	if len(addrs) == 0 {
		return // a single-node cluster: nobody to ask
	}
	if member {
		n.log.Debug("restarted on existing state: confirming membership", "asking", addrs)
	} else {
		n.log.Info("restarted on existing state, but this node is not in its last known raft configuration (it left or was removed): asking to be added back", "asking", addrs)
	}
	ctx, cancel := n.closingContext()
	defer cancel()
	// Say now and then that this is still going on, and why.
	lastSaid := time.Now()
	retrying := func(lastErr error) {
		if time.Since(lastSaid) >= rejoinReportEvery {
			lastSaid = time.Now()
			if member {
				n.log.Debug("still confirming membership", "last_error", lastErr)
			} else {
				n.log.Warn("still not added back to the cluster; retrying", "asking", addrs, "last_error", lastErr,
					"what_to_do", "start the members asked if they are down, or list running ones in -join")
			}
		}
	}
	via, err := n.join(ctx, nodewire.KindJoin, addrs, retrying)
	switch {
	case errors.Is(err, ErrWrongCluster):
		n.log.Error("this data dir belongs to another cluster than the members asked; not rejoining", "error", err,
			"what_to_do", "point -join/-peers at this node's own cluster, or empty -data-dir to join the other one as a new member")
	case err != nil && !n.closed():
		n.log.Warn("rejoining the cluster failed; this node is not serving as a member", "error", err,
			"what_to_do", "fix what the error says, then restart this node on its data dir")
	case err == nil && !member:
		n.log.Info("added back to the cluster", "via", via)
	case err == nil:
		n.log.Debug("membership confirmed", "via", via)
	}
}

// rejoinReportEvery is how often rejoin says it is still asking.
const rejoinReportEvery = 30 * time.Second

// rejoinAddrs reports whether this node is in the latest raft configuration
// it knows, and the addresses rejoin asks: the other servers of that
// configuration, then Config.Join, then Config.Peers, without duplicates or
// this node's own address.
func (n *Node) rejoinAddrs() (member bool, addrs []string) {
	seen := map[string]bool{"": true, n.Addr(): true, n.cfg.BindAddr: true, n.cfg.AdvertiseAddr: true}
	add := func(addr string) {
		if !seen[addr] {
			seen[addr] = true
			addrs = append(addrs, addr)
		}
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == n.cfg.NodeID {
				member = true
				continue
			}
			add(string(s.Address))
		}
	}
	for _, addr := range n.cfg.Join {
		add(addr)
	}
	for _, p := range n.cfg.Peers {
		if p.ID != n.cfg.NodeID {
			add(p.Addr)
		}
	}
	return member, addrs
}

// addMember runs on the leader for a joining node. Without gossip it joins
// as a voter while fewer than Config.Voters voters exist, and as a
// non-voter otherwise (the reconciler promotes it later if a voter goes:
// reconcile.go). With gossip on this leader it always joins as a
// non-voter, as the reconciler adds the members gossip shows: the promoter
// is then the one path to a new vote, and it promotes only a member that
// is healthy, and stable for the stabilization time unless the promotion
// makes the voter count odd (the quorum keeps its size, so a node that
// joins and dies at once cannot make it larger), under the voterChange
// lock. Without gossip the direct add stays: a cluster started
// by hand (one -bootstrap, the others -join) has its voters as soon as
// they join, rather than one voter for a stabilization time, which a
// single node's failure would then stop. Adding a member that is
// already in the configuration at the same address is a no-op, so a join
// retried after an unknown outcome succeeds; at a new address (a restart on
// another port) its address is updated and its suffrage kept.
//
// Before anything, the leader runs the admission check (admission.go): a
// node of another cluster, or one under the ID of a member alive at
// another address, is refused.
//
// A fresh node (its data dir held no raft state) under the ID of a voter
// has lost that voter's log and vote record (its data dir was emptied, as
// the refusal of a damaged log asks): still counted as a voter, it could
// vote for a candidate that lacks entries it had helped commit. The old
// entry is removed first (committing the removal needs the other members to
// hold the whole log), then the node is added again as a new server, as
// Consul does for a server that comes back with a new identity. A fresh
// join retried after an unknown outcome is removed and added again too:
// churn, not harm. A non-voter of that ID is kept: it counts toward no
// quorum and no election, and raft sends it the log again (a snapshot) as
// to any follower that is behind; it gets a vote only from the promoter,
// once it has caught up. With gossip this is the common case, not a
// repair: the reconciler adds a fresh node as a non-voter as soon as gossip
// shows it, usually before the node's own join request (which says fresh)
// arrives, and removing it again would be churn on every join.
func (n *Node) addMember(ctx context.Context, c candidate) error {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return configChangeError(err)
	}
	verdict, err := n.admit(c, viaJoinRequest)
	if err != nil {
		return err
	}
	id, addr := string(c.ID), string(c.Addr)
	n.reconciler.joining(c.ID)
	if verdict.removeFirst {
		n.log.Info("a member rejoins with an empty data dir: removing its old entry before adding it again", "id", id, "addr", addr)
		n.reconciler.explain(c.ID, "rejoins with an empty data dir: removed before being added again")
		if err := n.waitFuture(ctx, raftRecorder{n.raft, n.reconciler}.RemoveServer(c.ID, 0, 0)); err != nil {
			return configChangeError(err)
		}
		c.Fresh = false
		return n.addMember(ctx, c)
	}
	// Held while the voters are counted and the node added, so that a
	// promotion by the reconciler cannot add the same missing voter.
	n.reconciler.voterChange.Lock()
	defer n.reconciler.voterChange.Unlock()
	if cf = n.raft.GetConfiguration(); cf.Error() != nil {
		return configChangeError(cf.Error())
	}
	voters, movingVoter := 0, false
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == id {
			if string(s.Address) == addr {
				return nil
			}
			movingVoter = s.Suffrage == raft.Voter
		}
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	rec := raftRecorder{n.raft, n.reconciler}
	if movingVoter {
		n.reconciler.explain(raft.ServerID(id), "asked to join from a new address; keeps its vote")
		return configChangeError(n.waitFuture(ctx, rec.addJoiningVoter(raft.ServerID(id), raft.ServerAddress(addr))))
	}
	if voters < n.cfg.Voters && n.gossip == nil {
		n.reconciler.explain(raft.ServerID(id), fmt.Sprintf("asked to join; %d voters, %d wanted", voters, n.cfg.Voters))
		return configChangeError(n.waitFuture(ctx, rec.addJoiningVoter(raft.ServerID(id), raft.ServerAddress(addr))))
	}
	reason := fmt.Sprintf("asked to join; already %d voters", voters)
	if voters < n.cfg.Voters {
		reason = fmt.Sprintf("asked to join; %d voters, %d wanted: the promoter makes it a voter once it is stable", voters, n.cfg.Voters)
	}
	n.reconciler.explain(raft.ServerID(id), reason)
	err = configChangeError(n.waitFuture(ctx, rec.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0)))
	if err == nil {
		n.reconciler.wake()
	}
	return err
}

// removeServer runs on the leader for a leaving node. Removing a server
// that is not a member is a no-op.
func (n *Node) removeServer(ctx context.Context, id string) error {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return configChangeError(err)
	}
	member, otherVoters := false, 0
	for _, s := range cf.Configuration().Servers {
		member = member || string(s.ID) == id
		if string(s.ID) != id && s.Suffrage == raft.Voter {
			otherVoters++
		}
	}
	if !member {
		return nil
	}
	if otherVoters == 0 {
		// raft cannot remove the last voter. Members stopping together
		// with -leave-on-terminate get here: the last one just closes,
		// as the last member of a cluster does.
		n.log.Info("not removing the last voter; it stops as a member", "id", id)
		return nil
	}
	if id == n.cfg.NodeID {
		// Leadership came back to the leaving node after it handed it
		// over: see Leave for why a leader does not remove itself.
		return errLeaderRemovesItself
	}
	n.log.Info("removing server", "id", id)
	n.reconciler.explain(raft.ServerID(id), "the member asked to leave")
	n.reconciler.noteLeaving(raft.ServerID(id))
	if err := n.waitFuture(ctx, raftRecorder{n.raft, n.reconciler}.RemoveServer(raft.ServerID(id), 0, 0)); err != nil {
		return configChangeError(err)
	}
	// A voter that leaves is replaced at the next round.
	n.reconciler.wake()
	return nil
}

func configChangeError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return errNotLeader
	case errors.Is(err, raft.ErrLeadershipLost):
		return errLostLeadership
	case errors.Is(err, raft.ErrRaftShutdown):
		return errShuttingDown
	}
	return err
}

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
// added back (see rejoin): to take a member away for good, Leave and do not
// start it again (or remove its DataDir).
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
		// gossipRaftJoiner would answer by asking to be added back.
		// The leader that removes it skips it for a while (noteLeaving);
		// the gossip tag tells any leader, also one elected meanwhile.
		n.leaving.Store(true)
		if n.gossip != nil {
			n.setGossipTag(tagLeaving, "1")
		}
		defer func() {
			if err != nil { // still running as a member
				n.leaving.Store(false)
				if n.gossip != nil {
					n.setGossipTag(tagLeaving, "")
				}
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
	n.stopGossip(true) // the others see it left, not failed
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
			changed := n.leaderChanged.wait()
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
		changed := n.leaderChanged.wait()
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
