// Package nodestatus defines, once, what a raftlock node reports about
// itself and its cluster: its members, the leader's judgement of their
// health, the node's readiness, its reconciler's actions, its timings and
// its quotas. Package cluster produces these values, package apiserver
// serves them as JSON (GET /v1/cluster, the console's events, /readyz),
// and package api, the HTTP client, reads them back; each of the three
// names them by aliases (cluster.Member, api.Member, ...), so that a value
// crosses from one to the other without a copy.
//
// The JSON tags are the wire of GET /v1/cluster: their names, types and
// units are part of the HTTP API. The package depends on the standard
// library only, so that the client links nothing of the server.
package nodestatus

import (
	"encoding/json"
	"time"
)

// Raft roles of a node, lowercase as raft prints them.
const (
	RoleLeader    = "leader"
	RoleFollower  = "follower"
	RoleCandidate = "candidate"
	RoleShutdown  = "shutdown"
)

// Member suffrages (Member.Suffrage): raft's, in lower case. Raft no longer
// makes staging members; a configuration written by an old version may
// still hold one.
const (
	SuffrageVoter    = "voter"
	SuffrageNonvoter = "nonvoter"
	SuffrageStaging  = "staging"
)

// Gossip states of a member (Member.Gossip, and the keys of the counts of
// members by gossip state).
const (
	GossipAlive  = "alive"
	GossipFailed = "failed"
	GossipLeft   = "left"
)

// Health of a Member, as the leader judges it.
const (
	HealthHealthy   = "healthy"
	HealthUnhealthy = "unhealthy"
)

// Member is one server of the raft configuration.
type Member struct {
	ID      string `json:"id"`
	Address string `json:"address"` // raft address
	// APIAddr is the member's HTTP API address (its cluster.Config.APIAddr,
	// the agent's -advertise-http) as it last told this node; empty until
	// it has, or when it serves no API.
	APIAddr  string `json:"api_addr,omitempty"`
	Suffrage string `json:"suffrage"` // SuffrageVoter, SuffrageNonvoter or SuffrageStaging
	Leader   bool   `json:"leader"`   // this node knows it as the leader
	// Gossip is the member's state in gossip: GossipAlive, GossipFailed,
	// GossipLeft, or "" (gossip is off, or does not know it).
	Gossip string `json:"gossip,omitempty"`
	// Status and Health are the leader's view: Status is what its member
	// source says ("alive", "failed", "left"), Health HealthHealthy or
	// HealthUnhealthy as its reconciler last judged it (alive, in contact,
	// on the leader's term, not far behind); "" before the first check.
	// A node that does not lead has no view of its own: GET /v1/cluster on
	// it shows the leader's, as the leader reports it with every health
	// check (the report ClusterHealth comes in). Both are "" there while
	// that report is not known (ClusterHealth.Known false: no leader, or
	// none heard from it for a few checks), and when the leader runs a
	// build from before the report carried them.
	Status string `json:"status,omitempty"`
	Health string `json:"health,omitempty"`
	// Version is the member's raftlock version (the module version, as
	// `raftlock version` prints it) and Level the highest command level its
	// version reads, as the member told them (members tell each other);
	// a node's own for itself. "" and 0 until it has told, or when it runs
	// a version too old to tell (it then counts as reading level 1, which
	// every version reads).
	Version string `json:"version,omitempty"`
	Level   int    `json:"level,omitempty"`
	// BelowLeaderLevel marks a member that reads a lower command level
	// than the leader (one that has not told counts as reading 1): the
	// leader refuses the commands above that level (member_too_old) until
	// the member runs the leader's version. False while the node answering
	// does not know the leader's level.
	BelowLeaderLevel bool `json:"below_leader_level,omitempty"`
}

// ClusterHealth is the leader's latest judgement of the cluster's voters.
type ClusterHealth struct {
	// Known is false until a leader has checked its members (and, on a
	// follower, told this node), or when that report is older than a few
	// checks; the other fields are then zero. The JSON carries a health
	// only when it is known, so a decoded ClusterHealth is known.
	Known bool `json:"-"`
	// FailureTolerance is how many more voters may fail with the cluster
	// keeping a quorum: healthy voters beyond a majority.
	FailureTolerance int  `json:"failure_tolerance"`
	Voters           int  `json:"voters"`         // voters in the configuration
	HealthyVoters    int  `json:"healthy_voters"` // of which healthy
	Healthy          bool `json:"healthy"`        // the node answering, as the leader judged it
	// CheckedAt is when the answering node learned it (on the leader: when
	// it checked), on that node's wall clock.
	CheckedAt time.Time `json:"checked_at"`
}

// UnmarshalJSON decodes a health from the JSON, which shows only a known one.
func (h *ClusterHealth) UnmarshalJSON(b []byte) error {
	type fields ClusterHealth // without this method
	if err := json.Unmarshal(b, (*fields)(h)); err != nil {
		return err
	}
	h.Known = true
	return nil
}

// Readiness is whether the node is ready in the sense a rollout needs: the
// cluster would survive losing one more node (GET /readyz answers from it).
type Readiness struct {
	// Ready is true when the node knows a leader, can write its raft log,
	// and the leader's reports have said for a while that it is healthy and
	// that the cluster's failure tolerance is at least one (at least zero
	// for a cluster of one voter, which tolerates no failure by design).
	Ready bool `json:"ready"`
	// Reason says why not; "" when Ready.
	Reason string `json:"reason,omitempty"`
	// Health is the leader's judgement the readiness rests on and LeaderID
	// the leader the node knows ("" while none): the node's own view, which
	// GET /v1/cluster shows in fields of their own (health, leader_id).
	Health   ClusterHealth `json:"-"`
	LeaderID string        `json:"-"`
}

// ReconcileAction is one change the leader's reconciler made to the raft
// configuration.
type ReconcileAction struct {
	At     time.Time `json:"at"`     // when it committed, on the leader's wall clock
	Action string    `json:"action"` // add-voter, add-nonvoter, promote, demote, remove, update-address
	ID     string    `json:"id"`     // the member's node ID
	Reason string    `json:"reason"` // why, for people to read
}

// Timing is a cumulative count and total duration of one kind of event, as
// a Prometheus summary without quantiles: rate(total)/rate(count) is the
// mean. The JSON gives the total in nanoseconds.
type Timing struct {
	Count uint64        `json:"count"`
	Total time.Duration `json:"total_ns"`
}

// Quotas are a node's limits on the state clients can make every member
// hold (agent flags -max-locks, -max-sessions, -max-total-waiters;
// cluster.Config's MaxLocks, MaxSessions, MaxTotalWaiters), with what its
// state machine holds of each. The leader enforces its own: past one,
// acquires and session creates that add state fail with quota_exceeded.
type Quotas struct {
	Locks    Quota `json:"locks"`    // keys with a holder or waiters, and each further hold of a semaphore or read/write key
	Sessions Quota `json:"sessions"` // sessions
	Waiters  Quota `json:"waiters"`  // callers queued, over all keys
}

// Quota is one limit of a node and its use.
type Quota struct {
	// Limit is the quota in force on the node (it applies while the node
	// leads); 0 means unlimited.
	Limit int `json:"limit"`
	// Used is what the node's state machine holds now.
	Used int `json:"used"`
	// Refused counts the requests the node refused for this quota while
	// leading, since it started.
	Refused uint64 `json:"refused"`
}
