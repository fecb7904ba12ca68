package membership

import (
	"context"
	"time"

	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/raftlock/raftlock/cluster/nodewire"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// TestHooks reaches into a Manager for package cluster's tests, which run
// whole nodes and need to see or steer what membership keeps to itself.
// Nothing else calls it.
type TestHooks struct{ mgr *Manager }

// TestHooks returns the Manager's hooks for package cluster's tests.
func (mgr *Manager) TestHooks() TestHooks { return TestHooks{mgr} }

// FailHeartbeats makes the leader's record say that its heartbeats to id
// have failed since lastContact, as raft reports a member that stopped
// answering, while id may in fact answer.
func (h TestHooks) FailHeartbeats(id raft.ServerID, lastContact time.Time) {
	h.mgr.heartbeats.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: id, LastContact: lastContact}})
}

// SetMemberSource replaces the reconciler's member source (gossip's view).
func (h TestHooks) SetMemberSource(src MemberSource) { h.mgr.gossipView.Store(&src) }

// ReconcileMembers runs the reconciler's adds and moves once, now.
func (h TestHooks) ReconcileMembers() { h.mgr.reconciler.reconcileMembers() }

// WakeReconciler asks the reconciler for a round now.
func (h TestHooks) WakeReconciler() { h.mgr.reconciler.wake() }

// AutopilotState is the leader's latest autopilot state; nil while it
// does not lead.
func (h TestHooks) AutopilotState() *autopilot.State {
	r := h.mgr.reconciler
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// KnownMembers is what the reconciler acts on (members.go).
func (h TestHooks) KnownMembers() []KnownMember { return h.mgr.knownMembers() }

// GossipMembers lists the members gossip knows, sorted by ID; nil when
// gossip is off.
func (h TestHooks) GossipMembers() []GossipMember { return h.mgr.gossipMembers() }

// GossipByID is what gossip knows of each member, by ID; nil when gossip
// is off.
func (h TestHooks) GossipByID() map[string]GossipMember { return h.mgr.gossipByID() }

// MemberBuild and MemberLevel are what this node knows of member id's
// build (levels.go).
func (h TestHooks) MemberBuild(id string, gossiped map[string]GossipMember) (level int, version string) {
	return h.mgr.memberBuild(id, gossiped)
}

func (h TestHooks) MemberLevel(id string, gossiped map[string]GossipMember) (level int, version string) {
	return h.mgr.memberLevel(id, gossiped)
}

// SetLevelTag sets this node's gossip tag of its command level.
func (h TestHooks) SetLevelTag(value string) { h.mgr.setGossipTag(tagLevel, value) }

// AskInfo asks the node at addr who it is (peers.go).
func (h TestHooks) AskInfo(ctx context.Context, addr string) (*nodewire.Info, error) {
	return h.mgr.askInfo(ctx, addr)
}

// PeersHeard counts the members this node learned of by the info
// exchange (peers.go).
func (h TestHooks) PeersHeard() int {
	d := &h.mgr.peers
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.peers)
}

// GossipEvents is told of every gossip member event; nil when gossip is
// off.
func (h TestHooks) GossipEvents() <-chan struct{} { return h.mgr.gossipEvents() }
