package cluster

import (
	"context"

	"github.com/raftlock/raftlock/cluster/internal/membership"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/internal/nodestatus"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// Membership (who the members are, gossip, joins, the admission check,
// the leader's reconciler) is package membership's; these are its names
// that users of this package see, and what a node gives it to run on.

// Gossip states of a Member (Member.Gossip), and keys of Stats.GossipMembers.
const (
	GossipAlive  = nodestatus.GossipAlive
	GossipFailed = nodestatus.GossipFailed
	GossipLeft   = nodestatus.GossipLeft
)

// ReconcileAction is one change the leader's reconciler made to the raft
// configuration.
type ReconcileAction = nodestatus.ReconcileAction

// Actions of a ReconcileAction.
const (
	ActionAddVoter      = membership.ActionAddVoter
	ActionAddNonvoter   = membership.ActionAddNonvoter
	ActionPromote       = membership.ActionPromote
	ActionDemote        = membership.ActionDemote
	ActionRemove        = membership.ActionRemove
	ActionUpdateAddress = membership.ActionUpdateAddress
)

// ClusterHealth is the leader's latest judgement of its members, as
// autopilot computes it.
type ClusterHealth = nodestatus.ClusterHealth

// ErrNodeIDInUse: a node asked to be added under a node ID that a live
// member has at another address. Only the leader sees it: the node that
// asked keeps asking, and reports the refusal when it gives up.
var ErrNodeIDInUse = membership.ErrNodeIDInUse

// GossipAddr is where this node gossips (ip:port), "" when gossip is off.
func (n *Node) GossipAddr() string { return n.membership.GossipAddr() }

// newMembership makes the node's membership, once raft runs.
func (n *Node) newMembership() *membership.Manager {
	cfg := n.cfg
	return membership.New(membership.Config{
		NodeID:              cfg.NodeID,
		Addr:                n.Addr(),
		BindAddr:            cfg.BindAddr,
		AdvertiseAddr:       cfg.AdvertiseAddr,
		APIAddr:             cfg.APIAddr,
		DataDir:             cfg.DataDir,
		Join:                cfg.Join,
		Peers:               peerServers(cfg.Peers),
		Voters:              cfg.Voters,
		HeartbeatTimeout:    cfg.HeartbeatTimeout,
		RequestTimeout:      cfg.RequestTimeout,
		DeadVoterTimeout:    cfg.DeadVoterTimeout,
		DeadMemberTimeout:   cfg.DeadMemberTimeout,
		GossipBindAddr:      cfg.GossipBindAddr,
		GossipAdvertiseAddr: cfg.GossipAdvertiseAddr,
		GossipKeys:          cfg.GossipKeys,
		ClusterName:         cfg.clusterName(),
		RetryJoin:           cfg.RetryJoin,
		BootstrapExpect:     cfg.BootstrapExpect,
		Level:               n.levels.max,
		Version:             n.version,
		Raft:                n.raft,
		Ident:               n.ident,
		Log:                 n.log,
		Quiet:               n.quiet,
		Monotonic:           n.clock.Monotonic,
		Closing:             n.closing,
		WG:                  &n.wg,
	}, memberHost{n})
}

// peerServers is Config.Peers as raft servers.
func peerServers(peers []Peer) []raft.Server {
	out := make([]raft.Server, len(peers))
	for i, p := range peers {
		out[i] = raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)}
	}
	return out
}

// memberHost is the node as its membership sees it (membership.Node).
type memberHost struct{ n *Node }

func (h memberHost) Call(ctx context.Context, addr string, body []byte) (nodewire.Reply, error) {
	return h.n.call(ctx, addr, body, nil)
}

func (h memberHost) LeaderChanged() <-chan struct{} { return h.n.leaderChanged.Wait() }

func (h memberHost) JudgingTerm() any {
	if t := judgingTerm(h.n.term.Load(), h.n.closed()); t != nil {
		return t
	}
	return nil // not a nil *leaderTerm: the reconciler compares with nil
}

func (h memberHost) Leading() bool { return h.n.term.Load() != nil }

// judgingTerm is the leader term autopilot may judge members in: t once it
// is ready, nil before, or when the node is closed or not leading.
//
// Autopilot judges every member, this leader included, against the last
// index and term of the leader's log, read just before the members' own.
// Raft tells a node that it leads before that node appends the first entry
// of its term, so a leader that judged at once would judge on the previous
// term's log: a member that has received the new entry (the leader itself,
// if it appends the entry between autopilot's read and its own) would be
// on "another term", unhealthy for a round. Once the term is ready its
// first entry is committed, the log's last term is the term's own until
// the term ends, and the last index only grows, so the leader is never
// behind itself and a member is judged against the term it follows.
func judgingTerm(t *leaderTerm, closed bool) *leaderTerm {
	if t == nil || closed || !t.isReady() {
		return nil
	}
	return t
}
