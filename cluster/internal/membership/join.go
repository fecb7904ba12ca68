package membership

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"
	raft "github.com/raftlock/raftlock/internal/raft"
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

// Join asks the members at addrs, in turn, to add this node as a voter. A
// member that does not lead answers with the leader's address, which join
// then asks directly. It retries with a growing pause until ctx ends, and
// returns the address that answered yes. retrying, if not nil, is told why
// each round failed.
//
// kind is nodewire.KindJoinEmpty when New calls it for a node whose data dir held no
// raft state: if the cluster still lists its ID (its data dir was emptied),
// the leader removes that member first. (Its log is no test: the leader may
// have replicated to it already.) A restart on existing state asks with
// nodewire.KindJoin.
func (mgr *Manager) Join(ctx context.Context, kind nodewire.Kind, addrs []string, retrying func(lastErr error)) (via string, err error) {
	req := nodewire.Join{ID: mgr.cfg.NodeID, Addr: mgr.cfg.Addr, Empty: kind == nodewire.KindJoinEmpty, ClusterID: mgr.ident.ClusterID()}
	body := nodewire.EncodeRequest(&req)
	backoff := 50 * time.Millisecond
	var lastErr error
	for {
		if mgr.isLeader() {
			// Only a member leads (raft steps a leader down once it is
			// removed), and the others would point back here. A leader
			// that does not know its cluster ID asks the other servers.
			mgr.learnClusterFromServers(ctx)
			return mgr.cfg.Addr, nil
		}
		notPeers := 0 // addresses where no raftlock peer answers (see below)
		for _, addr := range addrs {
			// A member that does not lead points at the leader; follow at
			// most a few such hints, so two confused members cannot loop.
			for hops := 0; hops < 3 && addr != "" && addr != mgr.cfg.Addr; hops++ {
				them, err := mgr.checkCluster(ctx, addr)
				if errors.Is(err, nodewire.ErrWrongCluster) {
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
				rep, err := mgr.node.Call(ctx, addr, body)
				if err != nil {
					lastErr = moreTelling(lastErr, fmt.Errorf("%s: %w", addr, err))
					break
				}
				switch err := rep.Err(); {
				case err == nil:
					mgr.joinedCluster(them.ClusterID)
					return addr, nil
				case errors.Is(err, nodewire.ErrNotLeader):
					lastErr = fmt.Errorf("%s: not the leader", addr)
					addr = rep.Leader
					continue
				case errors.Is(err, nodewire.ErrWrongCluster):
					return "", fmt.Errorf("%w: %s refused: %w", ErrJoin, addr, err)
				case errors.Is(err, nodewire.ErrBadRequest):
					if req.ClusterID != "" && strings.Contains(rep.Msg, "trailing bytes") {
						// A leader from before the cluster ID in join
						// requests: checkCluster checked it on this side.
						req.ClusterID = ""
						body = nodewire.EncodeRequest(&req)
						continue
					}
					if kind == nodewire.KindJoinEmpty && strings.Contains(rep.Msg, "request kind") {
						// A leader from before nodewire.KindJoinEmpty: join as before.
						mgr.log.Warn("the leader does not know join-empty; joining without asking it to remove an old member of this ID", "leader", addr,
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
		case <-mgr.closing:
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
// leader (AddMember). It must not block New: after a full-cluster restart no
// leader exists until enough members are back.
func (mgr *Manager) rejoin() {
	member, addrs := mgr.rejoinAddrs()
	if len(addrs) == 0 {
		return // a single-node cluster: nobody to ask
	}
	if member {
		mgr.log.Debug("restarted on existing state: confirming membership", "asking", addrs)
	} else {
		mgr.log.Info("restarted on existing state, but this node is not in its last known raft configuration (it left or was removed): asking to be added back", "asking", addrs)
	}
	ctx, cancel := mgr.closingContext()
	defer cancel()
	// Say now and then that this is still going on, and why.
	lastSaid := time.Now()
	retrying := func(lastErr error) {
		if time.Since(lastSaid) >= rejoinReportEvery {
			lastSaid = time.Now()
			if member {
				mgr.log.Debug("still confirming membership", "last_error", lastErr)
			} else {
				mgr.log.Warn("still not added back to the cluster; retrying", "asking", addrs, "last_error", lastErr,
					"what_to_do", "start the members asked if they are down, or list running ones in -join")
			}
		}
	}
	via, err := mgr.Join(ctx, nodewire.KindJoin, addrs, retrying)
	switch {
	case errors.Is(err, nodewire.ErrWrongCluster):
		mgr.log.Error("this data dir belongs to another cluster than the members asked; not rejoining", "error", err,
			"what_to_do", "point -join/-peers at this node's own cluster, or empty -data-dir to join the other one as a new member")
	case err != nil && !mgr.closed():
		mgr.log.Warn("rejoining the cluster failed; this node is not serving as a member", "error", err,
			"what_to_do", "fix what the error says, then restart this node on its data dir")
	case err == nil && !member:
		mgr.log.Info("added back to the cluster", "via", via)
	case err == nil:
		mgr.log.Debug("membership confirmed", "via", via)
	}
}

// rejoinReportEvery is how often rejoin says it is still asking.
const rejoinReportEvery = 30 * time.Second

// rejoinAddrs reports whether this node is in the latest raft configuration
// it knows, and the addresses rejoin asks: the other servers of that
// configuration, then Config.Join, then Config.Peers, without duplicates or
// this node's own address.
func (mgr *Manager) rejoinAddrs() (member bool, addrs []string) {
	seen := map[string]bool{"": true, mgr.cfg.Addr: true, mgr.cfg.BindAddr: true, mgr.cfg.AdvertiseAddr: true}
	add := func(addr string) {
		if !seen[addr] {
			seen[addr] = true
			addrs = append(addrs, addr)
		}
	}
	if f := mgr.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == mgr.cfg.NodeID {
				member = true
				continue
			}
			add(string(s.Address))
		}
	}
	for _, addr := range mgr.cfg.Join {
		add(addr)
	}
	for _, p := range mgr.cfg.Peers {
		if string(p.ID) != mgr.cfg.NodeID {
			add(string(p.Address))
		}
	}
	return member, addrs
}

// AddMember runs on the leader for a joining node. Without gossip it joins
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
func (mgr *Manager) AddMember(ctx context.Context, c Candidate) error {
	cf := mgr.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return configChangeError(err)
	}
	verdict, err := mgr.admit(c, viaJoinRequest)
	if err != nil {
		return err
	}
	id, addr := string(c.ID), string(c.Addr)
	mgr.reconciler.joining(c.ID)
	if verdict.removeFirst {
		mgr.log.Info("a member rejoins with an empty data dir: removing its old entry before adding it again", "id", id, "addr", addr)
		mgr.reconciler.explain(c.ID, "rejoins with an empty data dir: removed before being added again")
		if err := mgr.waitFuture(ctx, raftRecorder{mgr.raft, mgr.reconciler}.RemoveServer(c.ID, 0, 0)); err != nil {
			return configChangeError(err)
		}
		c.Fresh = false
		return mgr.AddMember(ctx, c)
	}
	// Held while the voters are counted and the node added, so that a
	// promotion by the reconciler cannot add the same missing voter.
	mgr.reconciler.voterChange.Lock()
	defer mgr.reconciler.voterChange.Unlock()
	if cf = mgr.raft.GetConfiguration(); cf.Error() != nil {
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
	rec := raftRecorder{mgr.raft, mgr.reconciler}
	if movingVoter {
		mgr.reconciler.explain(raft.ServerID(id), "asked to join from a new address; keeps its vote")
		return configChangeError(mgr.waitFuture(ctx, rec.addJoiningVoter(raft.ServerID(id), raft.ServerAddress(addr))))
	}
	if voters < mgr.cfg.Voters && mgr.gossip == nil {
		mgr.reconciler.explain(raft.ServerID(id), fmt.Sprintf("asked to join; %d voters, %d wanted", voters, mgr.cfg.Voters))
		return configChangeError(mgr.waitFuture(ctx, rec.addJoiningVoter(raft.ServerID(id), raft.ServerAddress(addr))))
	}
	reason := fmt.Sprintf("asked to join; already %d voters", voters)
	if voters < mgr.cfg.Voters {
		reason = fmt.Sprintf("asked to join; %d voters, %d wanted: the promoter makes it a voter once it is stable", voters, mgr.cfg.Voters)
	}
	mgr.reconciler.explain(raft.ServerID(id), reason)
	err = configChangeError(mgr.waitFuture(ctx, rec.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0)))
	if err == nil {
		mgr.reconciler.wake()
	}
	return err
}

// RemoveServer runs on the leader for a leaving node. Removing a server
// that is not a member is a no-op. It holds voterChange from its read of
// the configuration until the removal has committed: a promotion decided
// from an older state (raftRecorder.AddVoter) then finds the member gone
// rather than add it back as a voter.
func (mgr *Manager) RemoveServer(ctx context.Context, id string) error {
	mgr.reconciler.voterChange.Lock()
	defer mgr.reconciler.voterChange.Unlock()
	cf := mgr.raft.GetConfiguration()
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
		mgr.log.Info("not removing the last voter; it stops as a member", "id", id)
		return nil
	}
	if id == mgr.cfg.NodeID {
		// Leadership came back to the leaving node after it handed it
		// over: see Leave for why a leader does not remove itself.
		return ErrLeaderRemovesItself
	}
	mgr.log.Info("removing server", "id", id)
	mgr.reconciler.explain(raft.ServerID(id), "the member asked to leave")
	mgr.reconciler.noteLeaving(raft.ServerID(id))
	if err := mgr.waitFuture(ctx, raftRecorder{mgr.raft, mgr.reconciler}.RemoveServer(raft.ServerID(id), 0, 0)); err != nil {
		return configChangeError(err)
	}
	// A voter that leaves is replaced at the next round.
	mgr.reconciler.wake()
	return nil
}

func configChangeError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return nodewire.ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipLost):
		return nodewire.ErrLostLeadership
	case errors.Is(err, raft.ErrRaftShutdown):
		return nodewire.ErrShuttingDown
	}
	return err
}

// Errors of a join and a leave; package cluster tells them to its callers
// as its own.
var (
	// ErrJoin: a node with a fresh data dir could not get a running member to add it.
	ErrJoin = errors.New("cluster: join failed")
	// ErrLeaderRemovesItself: a leaving node became leader again after
	// handing leadership over; it stays a member (cluster's Leave says why).
	ErrLeaderRemovesItself = errors.New("cluster: the leader does not remove itself; leave again once another member leads")
)

// StartRejoin starts rejoin in the background: New calls it on every start
// on existing state.
func (mgr *Manager) StartRejoin() {
	mgr.wg.Go(mgr.rejoin)
}

// SetLeaving says whether the node's Leave runs: while it does, the node
// does not ask to be added back once removed (gossipRaftJoiner), and its
// gossip tag tells any leader, also one elected meanwhile, not to add it
// back (the leader that removes it skips it for a while too:
// reconciler.noteLeaving).
func (mgr *Manager) SetLeaving(leaving bool) {
	mgr.leaving.Store(leaving)
	if mgr.gossip != nil {
		value := ""
		if leaving {
			value = "1"
		}
		mgr.setGossipTag(tagLeaving, value)
	}
}
