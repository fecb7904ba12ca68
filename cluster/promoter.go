package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
)

// voterPromoter is the reconciler's autopilot.Promoter: it keeps the
// number of voters at Config.Voters with healthy members, and lets go of
// the members that are gone. See "Membership" in reconcile.go for the
// rules and why they keep the cluster's quorum.
type voterPromoter struct {
	voters            int
	deadVoterTimeout  time.Duration
	deadMemberTimeout time.Duration
	now               func() time.Time
	// explain records why a change is proposed (reconciler.explain); nil
	// in tests that need no reasons.
	explain func(id raft.ServerID, reason string)
}

var _ autopilot.Promoter = (*voterPromoter)(nil)

func (p *voterPromoter) GetServerExt(*autopilot.Config, *autopilot.ServerState) any { return nil }
func (p *voterPromoter) GetStateExt(*autopilot.Config, *autopilot.State) any        { return nil }

// GetNodeTypes: every member may vote (there are no read replicas or
// zones); which ones do is CalculatePromotionsAndDemotions' choice.
func (p *voterPromoter) GetNodeTypes(_ *autopilot.Config, s *autopilot.State) map[raft.ServerID]autopilot.NodeType {
	types := make(map[raft.ServerID]autopilot.NodeType, len(s.Servers))
	for id := range s.Servers {
		types[id] = autopilot.NodeVoter
	}
	return types
}

func (p *voterPromoter) IsPotentialVoter(t autopilot.NodeType) bool { return t == autopilot.NodeVoter }

func (p *voterPromoter) say(id raft.ServerID, format string, args ...any) {
	if p.explain != nil {
		p.explain(id, fmt.Sprintf(format, args...))
	}
}

// sortedIDs returns the state's server IDs in order, so that no choice
// depends on map order.
func sortedIDs(s *autopilot.State) []raft.ServerID {
	ids := make([]raft.ServerID, 0, len(s.Servers))
	for id := range s.Servers {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b raft.ServerID) int { return strings.Compare(string(a), string(b)) })
	return ids
}

// CalculatePromotionsAndDemotions fills the voters up to Config.Voters
// with non-voters healthy for the stabilization time (lowest ID first),
// then replaces at most one voter unhealthy for DeadVoterTimeout per round:
// demoted, with a healthy non-voter promoted in its place; without one it
// is demoted only if more than Voters voters would remain. The leader is
// never demoted. Autopilot applies only what it finds safe on its side
// too: it promotes healthy servers only, and demotes one failed voter
// before promoting when the voter count is odd.
func (p *voterPromoter) CalculatePromotionsAndDemotions(c *autopilot.Config, s *autopilot.State) autopilot.RaftChanges {
	var changes autopilot.RaftChanges
	now := p.now()
	stable := s.ServerStabilizationTime(c)
	voters := 0
	var candidates []raft.ServerID
	var dead []*autopilot.ServerState
	for _, id := range sortedIDs(s) {
		srv := s.Servers[id]
		switch {
		case srv.HasVotingRights():
			voters++
			if srv.State != autopilot.RaftLeader && !srv.Health.Healthy && now.Sub(srv.Health.StableSince) >= p.deadVoterTimeout {
				dead = append(dead, srv)
			}
		case srv.State == autopilot.RaftNonVoter && srv.Server.NodeStatus == autopilot.NodeAlive && srv.Health.IsStable(now, stable):
			candidates = append(candidates, id)
		}
	}
	for voters+len(changes.Promotions) < p.voters && len(candidates) > 0 {
		id := candidates[0]
		candidates = candidates[1:]
		p.say(id, "%d voters, %d wanted: promoting a non-voter healthy for %v", voters+len(changes.Promotions), p.voters, stable)
		changes.Promotions = append(changes.Promotions, id)
	}
	if len(dead) > 0 {
		d := dead[0]
		unhealthyFor := now.Sub(d.Health.StableSince).Truncate(time.Millisecond)
		switch {
		case len(candidates) > 0:
			c := candidates[0]
			p.say(d.Server.ID, "voter unhealthy (status %s) for %v, DeadVoterTimeout %v: %s takes its vote", d.Server.NodeStatus, unhealthyFor, p.deadVoterTimeout, c)
			p.say(c, "replaces voter %s, unhealthy for %v", d.Server.ID, unhealthyFor)
			changes.Demotions = append(changes.Demotions, d.Server.ID)
			changes.Promotions = append(changes.Promotions, c)
		case voters+len(changes.Promotions)-1 >= p.voters:
			p.say(d.Server.ID, "voter unhealthy (status %s) for %v, DeadVoterTimeout %v: %d voters remain without it", d.Server.NodeStatus, unhealthyFor, p.deadVoterTimeout, voters+len(changes.Promotions)-1)
			changes.Demotions = append(changes.Demotions, d.Server.ID)
		}
	}
	return changes
}

// FilterFailedServerRemovals lets autopilot remove only the members that
// left and the non-voters unhealthy for DeadMemberTimeout. A failed voter
// is never removed (the promoter demotes it first: removal would shrink
// the quorum's denominator without a vote), and no member is stale (every
// member of the configuration is a known server, see KnownServers).
func (p *voterPromoter) FilterFailedServerRemovals(_ *autopilot.Config, s *autopilot.State, failed *autopilot.FailedServers) *autopilot.FailedServers {
	out := &autopilot.FailedServers{}
	now := p.now()
	for _, srv := range failed.FailedVoters {
		if srv.NodeStatus == autopilot.NodeLeft {
			p.say(srv.ID, "voter left the cluster")
			out.FailedVoters = append(out.FailedVoters, srv)
		}
	}
	for _, srv := range failed.FailedNonVoters {
		if srv.NodeStatus == autopilot.NodeLeft {
			p.say(srv.ID, "member left the cluster")
			out.FailedNonVoters = append(out.FailedNonVoters, srv)
			continue
		}
		st := s.Servers[srv.ID]
		if st == nil || st.Health.Healthy || st.HasVotingRights() {
			continue
		}
		if gone := now.Sub(st.Health.StableSince); gone >= p.deadMemberTimeout {
			p.say(srv.ID, "non-voter unhealthy (status %s) for %v, DeadMemberTimeout %v", srv.NodeStatus, gone.Truncate(time.Second), p.deadMemberTimeout)
			out.FailedNonVoters = append(out.FailedNonVoters, srv)
		}
	}
	return out
}
