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
// Readiness. The members, health, readiness, timings, quotas and
// reconciler actions are the node's own values (one type serves both);
// only the role, the lock counts and the optional parts take the wire's
// shape here.
func clusterStatusOf(st cluster.Stats, rd cluster.Readiness) api.ClusterStatus {
	out := api.ClusterStatus{
		NodeID:           st.ID,
		Role:             roleName(st.State),
		LeaderID:         st.LeaderID,
		LeaderAddr:       st.LeaderAddr,
		Members:          st.Members,
		GossipMembers:    st.GossipMembers,
		Term:             st.Term,
		CommitIndex:      st.CommitIndex,
		AppliedIndex:     st.AppliedIndex,
		LeaderChanges:    st.LeaderChanges,
		Commit:           st.Commit,
		Apply:            st.Apply,
		Freeze:           st.Freeze,
		LogFault:         st.LogFault,
		Halted:           st.Halted,
		Readiness:        &rd,
		ReconcileActions: st.ReconcileActions,
		ReconcileCounts:  st.ReconcileCounts,
		Locks:            &api.LockStats{Held: st.Keys, Waiters: st.Waiters, Handoffs: st.Handoffs, Expired: st.Expired},
		Quotas:           &st.Quotas,
		Raft:             st.Raft,
	}
	if out.Members == nil {
		out.Members = []api.Member{}
	}
	if st.Health.Known {
		out.Health = &st.Health
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
