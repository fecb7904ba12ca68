package api

import "time"

// Raft roles of a node (ClusterStatus.Role), lowercase as raft prints them.
const (
	RoleLeader    = "leader"
	RoleFollower  = "follower"
	RoleCandidate = "candidate"
	RoleShutdown  = "shutdown"
)

// Member suffrages (Member.Suffrage).
const (
	SuffrageVoter    = "voter"
	SuffrageNonvoter = "nonvoter"
	SuffrageStaging  = "staging"
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

// Member is one server of the raft configuration.
type Member struct {
	ID       string `json:"id"`
	Address  string `json:"address"`            // raft address
	APIAddr  string `json:"api_addr,omitempty"` // HTTP API address, when known (members tell each other theirs)
	Suffrage string `json:"suffrage"`           // SuffrageVoter, SuffrageNonvoter or SuffrageStaging
	Leader   bool   `json:"leader"`
	Gossip   string `json:"gossip,omitempty"` // GossipAlive, GossipFailed or GossipLeft; "" when gossip is off or does not know it
	// Status and Health are the leader's view (empty on other nodes):
	// Status is what its member source says ("alive", "failed", "left"),
	// Health "healthy" or "unhealthy" as its reconciler last judged it
	// (alive, in contact, on the leader's term, not far behind).
	Status string `json:"status,omitempty"`
	Health string `json:"health,omitempty"`
	// Version is the member's raftlock version (as `raftlock version`
	// prints it) and Level the highest command level its version reads,
	// as the member told them (members tell each other); absent until it
	// has, or when it runs a version too old to tell (it then counts as
	// reading level 1, which every version reads).
	Version string `json:"version,omitempty"`
	Level   int    `json:"level,omitempty"`
	// BelowLeaderLevel marks a member that reads a lower command level
	// than the leader (one that has not told counts as reading 1): the
	// leader refuses the commands above that level (member_too_old) until
	// the member runs the leader's version. Absent (false) while the node
	// answering does not know the leader's level.
	BelowLeaderLevel bool `json:"below_leader_level,omitempty"`
}

// ClusterHealth is the leader's judgement of the cluster's voters.
type ClusterHealth struct {
	// FailureTolerance is how many more voters may fail with the cluster
	// keeping a quorum: healthy voters beyond a majority.
	FailureTolerance int       `json:"failure_tolerance"`
	Voters           int       `json:"voters"`
	HealthyVoters    int       `json:"healthy_voters"`
	Healthy          bool      `json:"healthy"`    // the node answering, as the leader judged it
	CheckedAt        time.Time `json:"checked_at"` // when the answering node learned it
}

// Readiness is whether the node is ready in the sense a rollout needs:
// the cluster would survive losing one more node.
type Readiness struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"` // why not
}

// ReconcileAction is one change the leader's reconciler made to the raft
// configuration.
type ReconcileAction struct {
	At     time.Time `json:"at"`
	Action string    `json:"action"` // add-voter, add-nonvoter, promote, demote, remove, update-address
	ID     string    `json:"id"`
	Reason string    `json:"reason"`
}

// Gossip states of a member (Member.Gossip, keys of ClusterStatus.GossipMembers).
const (
	GossipAlive  = "alive"
	GossipFailed = "failed"
	GossipLeft   = "left"
)

// Timing is a cumulative count and total duration of one kind of event, as a
// Prometheus summary without quantiles: rate(total)/rate(count) is the mean.
type Timing struct {
	Count uint64        `json:"count"`
	Total time.Duration `json:"total_ns"`
}

// LockStats counts what the lock state machine holds and did.
type LockStats struct {
	Held     int    `json:"held"`     // keys with a live lease
	Waiters  int    `json:"waiters"`  // callers queued, over all keys
	Handoffs uint64 `json:"handoffs"` // grants to a queued waiter (on release, expiry or cancel), cumulative
	Expired  uint64 `json:"expired"`  // leases that ran out, cumulative
}

// Quotas are a node's limits on the state clients can make every member
// hold (agent flags -max-locks, -max-sessions, -max-total-waiters;
// cluster.Config's MaxLocks, MaxSessions, MaxTotalWaiters). The leader
// enforces its own: past one, acquires and session creates that add state
// fail with CodeQuotaExceeded.
type Quotas struct {
	Locks    Quota `json:"locks"`    // keys with a holder or waiters, and each further hold of a semaphore or read/write key
	Sessions Quota `json:"sessions"` // sessions
	Waiters  Quota `json:"waiters"`  // callers queued, over all keys
}

// Quota is one limit and its use.
type Quota struct {
	Limit   int    `json:"limit"`   // 0: unlimited
	Used    int    `json:"used"`    // what this node's state machine holds
	Refused uint64 `json:"refused"` // requests this node refused for it while leading, cumulative
}
