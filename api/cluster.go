package api

import "github.com/raftlock/raftlock/internal/nodestatus"

// Raft roles of a node (ClusterStatus.Role), lowercase as raft prints them.
const (
	RoleLeader    = nodestatus.RoleLeader
	RoleFollower  = nodestatus.RoleFollower
	RoleCandidate = nodestatus.RoleCandidate
	RoleShutdown  = nodestatus.RoleShutdown
)

// Member suffrages (Member.Suffrage).
const (
	SuffrageVoter    = nodestatus.SuffrageVoter
	SuffrageNonvoter = nodestatus.SuffrageNonvoter
	SuffrageStaging  = nodestatus.SuffrageStaging
)

// Gossip states of a member (Member.Gossip, keys of ClusterStatus.GossipMembers).
const (
	GossipAlive  = nodestatus.GossipAlive
	GossipFailed = nodestatus.GossipFailed
	GossipLeft   = nodestatus.GossipLeft
)

// Health of a member (Member.Health), as the leader judges it.
const (
	HealthHealthy   = nodestatus.HealthHealthy
	HealthUnhealthy = nodestatus.HealthUnhealthy
)

// The parts of a ClusterStatus are the very types package cluster reports
// (cluster.Member, cluster.ClusterHealth, ...): one definition, in an
// internal package, that the client shares without linking the server.
type (
	// Member is one server of the raft configuration.
	Member = nodestatus.Member
	// ClusterHealth is the leader's judgement of the cluster's voters.
	ClusterHealth = nodestatus.ClusterHealth
	// Readiness is whether the node is ready in the sense a rollout
	// needs: the cluster would survive losing one more node.
	Readiness = nodestatus.Readiness
	// ReconcileAction is one change the leader's reconciler made to the
	// raft configuration.
	ReconcileAction = nodestatus.ReconcileAction
	// Timing is a cumulative count and total duration of one kind of
	// event, as a Prometheus summary without quantiles.
	Timing = nodestatus.Timing
	// Quotas are a node's limits on the state clients can make every
	// member hold, with their use.
	Quotas = nodestatus.Quotas
	// Quota is one limit and its use.
	Quota = nodestatus.Quota
)

// ClusterStatus is one node's view of its cluster. It is served as JSON by
// GET /v1/cluster and read back by Client.Cluster. Zero fields mean "not
// known"; the JSON omits none of the identity fields so a missing leader
// shows as "".
type ClusterStatus struct {
	NodeID     string   `json:"node_id"`     // this node's raft server ID
	Role       string   `json:"role"`        // this node's raft state: RoleLeader, RoleFollower, ...
	LeaderID   string   `json:"leader_id"`   // "" while no leader is known
	LeaderAddr string   `json:"leader_addr"` // the leader's raft address; "" while no leader is known
	Members    []Member `json:"members"`     // the raft configuration, in a stable order
	// GossipMembers counts the members gossip knows by state (GossipAlive,
	// GossipFailed, GossipLeft), raft members or not; nil when gossip is off.
	GossipMembers map[string]int `json:"gossip_members,omitempty"`

	Term         uint64 `json:"term"`          // current raft term
	CommitIndex  uint64 `json:"commit_index"`  // highest log index known committed
	AppliedIndex uint64 `json:"applied_index"` // highest log index applied to this node's state machine

	// LeaderChanges counts the times this node saw the leader change (to
	// another node or to none) since it started. Monotonic.
	LeaderChanges uint64 `json:"leader_changes"`
	// Commit times proposals from submission to commit, on the leader.
	// Apply times applying committed entries to the state machine. Both are
	// cumulative since the node started.
	Commit Timing `json:"commit"`
	Apply  Timing `json:"apply"`
	// Freeze times the copy of the lock state each snapshot takes while
	// applies wait: how long lock operations on this node stall per snapshot.
	Freeze Timing `json:"snapshot_freeze"`

	// LogFault says why this node's raft log cannot be written (a full
	// disk, say) while that lasts; "" otherwise. /healthz answers 503 then.
	LogFault string `json:"log_fault,omitempty"`
	// Halted says why this node stopped by itself: its state machine met a
	// committed entry or snapshot its raftlock version cannot read (install
	// the version the other members run); "" otherwise. /healthz answers
	// 503 halted then.
	Halted string `json:"halted,omitempty"`

	// Health is the leader's latest judgement of the cluster: its own on
	// the leader, the leader's last report elsewhere; nil when this node
	// has none recent (no leader, or none reported yet).
	Health *ClusterHealth `json:"health,omitempty"`
	// Readiness says whether the cluster would survive losing one more
	// node (GET /readyz answers from it); nil when the node does not tell.
	Readiness *Readiness `json:"readiness,omitempty"`
	// ReconcileActions are the latest changes (oldest first) the node's
	// reconciler made to the raft configuration while it led, with their
	// reasons: ask the leader.
	ReconcileActions []ReconcileAction `json:"reconcile_actions,omitempty"`
	// ReconcileCounts counts every change of each kind (the Action names
	// of ReconcileAction) the node's reconciler made while it led, since the
	// node started; absent when the node does not count them.
	ReconcileCounts map[string]uint64 `json:"reconcile_counts,omitempty"`

	// Locks is the lock state machine as this node sees it; nil when the
	// adapter does not count it.
	Locks *LockStats `json:"locks,omitempty"`
	// Quotas are the node's limits on the lock state, with what its state
	// machine holds of each; nil when the node does not tell.
	Quotas *Quotas `json:"quotas,omitempty"`

	// Raft holds raft's own statistics (raft.Raft.Stats) for people to read;
	// the API shows them and does not interpret them.
	Raft map[string]string `json:"raft,omitempty"`
}

// HasLeader reports whether the node knows a leader.
func (s ClusterStatus) HasLeader() bool { return s.LeaderID != "" || s.LeaderAddr != "" }

// LockStats counts what the lock state machine holds and did.
type LockStats struct {
	Held     int    `json:"held"`     // keys with a live lease
	Waiters  int    `json:"waiters"`  // callers queued, over all keys
	Handoffs uint64 `json:"handoffs"` // grants to a queued waiter (on release, expiry or cancel), cumulative
	Expired  uint64 `json:"expired"`  // leases that ran out, cumulative
}
