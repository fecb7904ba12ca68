package membership

import (
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodestatus"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// What the node's Stats and Readiness show of its membership.

// Members is the latest raft configuration (raft reads it without a round
// trip), sorted by ID, with each member's status and health as the leader
// sees them: on the leader its own, elsewhere the one its last report
// brought (see reconciler.view), none while that report is not believed.
func (mgr *Manager) Members(leaderID string) []nodestatus.Member {
	f := mgr.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil
	}
	servers := f.Configuration().Servers
	gossiped := mgr.gossipByID()
	out := make([]nodestatus.Member, 0, len(servers))
	view := mgr.reconciler.view()
	for _, srv := range servers {
		m := nodestatus.Member{
			ID:       string(srv.ID),
			Address:  string(srv.Address),
			Suffrage: suffrageName(srv.Suffrage),
			Leader:   leaderID != "" && string(srv.ID) == leaderID,
		}
		if m.ID == mgr.cfg.NodeID {
			m.APIAddr = mgr.cfg.APIAddr
		}
		if g, ok := gossiped[m.ID]; ok {
			m.Gossip = g.Status.String()
			if m.APIAddr == "" {
				m.APIAddr = g.APIAddr
			}
		}
		if m.APIAddr == "" {
			// A member without gossip told us when it asked (HeardFrom).
			m.APIAddr = mgr.peers.apiAddr(m.ID)
		}
		if j, ok := view[m.ID]; ok {
			m.Status = j.Status
			if j.Judged {
				m.Health = nodestatus.HealthUnhealthy
				if j.Healthy {
					m.Health = nodestatus.HealthHealthy
				}
			}
		}
		m.Level, m.Version = mgr.memberBuild(m.ID, gossiped)
		out = append(out, m)
	}
	markBelowLeader(out)
	slices.SortFunc(out, func(a, b nodestatus.Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// markBelowLeader sets BelowLeader on the members that read a lower
// command level than the leader, when the leader's level is known.
func markBelowLeader(members []nodestatus.Member) {
	leaderLevel := 0
	for _, m := range members {
		if m.Leader {
			leaderLevel = m.Level
		}
	}
	if leaderLevel == 0 {
		return
	}
	for i, m := range members {
		members[i].BelowLeaderLevel = max(m.Level, fsm.BaselineLevel) < leaderLevel
	}
}

// suffrageName is a member's Suffrage: a suffrage raft does not name
// counts as staging, which has no vote either.
func suffrageName(s raft.ServerSuffrage) string {
	switch s {
	case raft.Voter:
		return nodestatus.SuffrageVoter
	case raft.Nonvoter:
		return nodestatus.SuffrageNonvoter
	}
	return nodestatus.SuffrageStaging
}

// GossipCounts counts the members gossip knows by state
// (nodestatus.GossipAlive, GossipFailed, GossipLeft), raft members or not;
// nil when gossip is off.
func (mgr *Manager) GossipCounts() map[string]int {
	if mgr.gossip == nil {
		return nil
	}
	counts := map[string]int{nodestatus.GossipAlive: 0, nodestatus.GossipFailed: 0, nodestatus.GossipLeft: 0}
	for _, m := range mgr.gossip.members() {
		counts[m.Status.String()]++
	}
	return counts
}

// Health is the cluster health as this node knows it: its own judgement
// while it leads, else the current leader's last report if recent.
func (mgr *Manager) Health() nodestatus.ClusterHealth { return mgr.reconciler.health() }

// RecentActions are the reconciler's last changes to the raft
// configuration, oldest first (at most maxReconcileActions).
func (mgr *Manager) RecentActions() []nodestatus.ReconcileAction {
	return mgr.reconciler.recentActions()
}

// ActionCounts counts the reconciler's changes by Action, every action
// listed.
func (mgr *Manager) ActionCounts() map[string]uint64 { return mgr.reconciler.actionCounts() }

// WantTolerance is the failure tolerance Readiness asks for: one, or none
// in a cluster of one voter by design.
func (mgr *Manager) WantTolerance() int { return min(1, (mgr.cfg.Voters-1)/2) }

// ReadyHold is how long every report must have been good before Readiness
// says ready: long enough that a member that died just before the reports
// turned good has been seen dead by now (failure detection, then the
// leader's next check, then its next report), so that a replica started
// after a kill is not ready before the kill is known.
func (mgr *Manager) ReadyHold() time.Duration {
	return mgr.failureDetectTime() + 3*mgr.autopilotInterval()
}

// GoodFor is how long reports from the current leader have all been
// good (healthy, with WantTolerance); 0 if the last was not.
func (mgr *Manager) GoodFor() time.Duration { return mgr.reconciler.goodFor() }
