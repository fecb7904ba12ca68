package main

import (
	"sort"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
)

// nodeStatus shows a cluster.Node to the HTTP API.
type nodeStatus struct{ node *cluster.Node }

func (s nodeStatus) Status() api.ClusterStatus {
	st := s.node.Stats()
	out := api.ClusterStatus{
		NodeID:       st.ID,
		Role:         roleName(st.State),
		LeaderID:     st.LeaderID,
		LeaderAddr:   st.LeaderAddr,
		Term:         st.Term,
		CommitIndex:  st.CommitIndex,
		AppliedIndex: st.AppliedIndex,
		Locks:        &api.LockStats{Held: st.Keys, Waiters: st.LocalWaiters},
		Raft:         st.Raft,
	}
	if servers, err := s.node.Servers(); err == nil {
		for id, addr := range servers {
			out.Members = append(out.Members, api.Member{ID: id, Address: addr, Suffrage: api.SuffrageVoter, Leader: id == st.LeaderID})
		}
		sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].ID < out.Members[j].ID })
	}
	return out
}

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
