package apiserver

import (
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
)

// NodeStatus shows a cluster node to the API: its Status maps
// cluster.Node.Stats, which reads local state only, to an api.ClusterStatus. It
// returns nil for a nil node. NewHandler uses it by itself when its store is
// a *cluster.Node and Config.Cluster is nil; the agent passes it explicitly.
func NodeStatus(n *cluster.Node) Cluster {
	if n == nil {
		return nil
	}
	return nodeStatus{n}
}

type nodeStatus struct{ node *cluster.Node }

// Watchers, ProposalSizes and Sessions make nodeStatus a nodeCounts
// (metrics.go).
func (s nodeStatus) Watchers() int                        { return s.node.Watchers() }
func (s nodeStatus) ProposalSizes() cluster.SizeHistogram { return s.node.ProposalSizes() }
func (s nodeStatus) Sessions() int                        { return s.node.Sessions() }

func (s nodeStatus) Status() api.ClusterStatus {
	return clusterStatusOf(s.node.Stats(), s.node.Readiness())
}

// clusterStatusOf is what GET /v1/cluster shows of a node's Stats and
// Readiness.
func clusterStatusOf(st cluster.Stats, rd cluster.Readiness) api.ClusterStatus {
	out := api.ClusterStatus{
		NodeID:        st.ID,
		Role:          roleName(st.State),
		LeaderID:      st.LeaderID,
		LeaderAddr:    st.LeaderAddr,
		Members:       make([]api.Member, 0, len(st.Members)),
		Term:          st.Term,
		CommitIndex:   st.CommitIndex,
		AppliedIndex:  st.AppliedIndex,
		LeaderChanges: st.LeaderChanges,
		Commit:        api.Timing(st.Commit),
		Apply:         api.Timing(st.Apply),
		Freeze:        api.Timing(st.Freeze),
		Locks: &api.LockStats{
			Held:     st.Keys,
			Waiters:  st.Waiters,
			Handoffs: st.Handoffs,
			Expired:  st.Expired,
		},
		LogFault:      st.LogFault,
		Halted:        st.Halted,
		Raft:          st.Raft,
		GossipMembers: st.GossipMembers,
	}
	out.ReconcileCounts = st.ReconcileCounts
	out.Quotas = &api.Quotas{
		Locks:    api.Quota(st.Quotas.Locks),
		Sessions: api.Quota(st.Quotas.Sessions),
		Waiters:  api.Quota(st.Quotas.Waiters),
	}
	if st.Health.Known {
		out.Health = &api.ClusterHealth{
			FailureTolerance: st.Health.FailureTolerance,
			Voters:           st.Health.Voters,
			HealthyVoters:    st.Health.HealthyVoters,
			Healthy:          st.Health.Healthy,
			CheckedAt:        st.Health.CheckedAt,
		}
	}
	out.Readiness = &api.Readiness{Ready: rd.Ready, Reason: rd.Reason}
	for _, a := range st.ReconcileActions {
		out.ReconcileActions = append(out.ReconcileActions, api.ReconcileAction{At: a.At, Action: a.Action, ID: a.ID, Reason: a.Reason})
	}
	for _, m := range st.Members { // already sorted by ID
		out.Members = append(out.Members, api.Member{
			ID:               m.ID,
			Address:          m.Addr,
			Suffrage:         suffrageName(m.Suffrage),
			Leader:           m.Leader,
			APIAddr:          m.APIAddr,
			Gossip:           m.Gossip,
			Status:           m.Status,
			Health:           m.Health,
			Version:          m.Version,
			Level:            m.Level,
			BelowLeaderLevel: m.BelowLeader,
		})
	}
	return out
}

// roleName maps raft's state names to the API's roles.
func roleName(state string) string {
	switch state {
	case "Leader":
		return api.RoleLeader
	case "Follower":
		return api.RoleFollower
	case "Candidate":
		return api.RoleCandidate
	default:
		return api.RoleShutdown
	}
}

func suffrageName(s string) string {
	switch s {
	case cluster.SuffrageVoter:
		return api.SuffrageVoter
	case cluster.SuffrageNonvoter:
		return api.SuffrageNonvoter
	default:
		return api.SuffrageStaging
	}
}
