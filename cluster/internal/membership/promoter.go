package membership

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	autopilot "github.com/hashicorp/raft-autopilot"

	raft "github.com/raftlock/raftlock/internal/raft"
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

	mu    sync.Mutex // protects marks and pairs
	marks map[raft.ServerID]healthMark
	// pairs maps a non-voter promoted to replace a dead voter to that
	// voter (see allowPromotion).
	pairs map[raft.ServerID]raft.ServerID
}

// healthMark is since when a member has been healthy, or unhealthy: the
// promoter's own record, kept in each ServerState's Server.Ext.
// raft-autopilot v0.3.0 sets Health.StableSince when it first sees a
// server and never again (buildServerState compares the new health with a
// pointer to itself), so its StableSince cannot time a failure.
type healthMark struct {
	healthy bool
	since   time.Time
}

var _ autopilot.Promoter = (*voterPromoter)(nil)

// GetServerExt records when srv's health last changed; autopilot calls it
// for every member at every state update.
func (p *voterPromoter) GetServerExt(_ *autopilot.Config, srv *autopilot.ServerState) any {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.marks == nil {
		p.marks = map[raft.ServerID]healthMark{}
	}
	m, ok := p.marks[srv.Server.ID]
	if !ok || m.healthy != srv.Health.Healthy {
		m = healthMark{healthy: srv.Health.Healthy, since: p.now()}
		p.marks[srv.Server.ID] = m
	}
	return m
}

// GetStateExt forgets the members that are no longer in the configuration.
func (p *voterPromoter) GetStateExt(_ *autopilot.Config, s *autopilot.State) any {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.marks {
		if _, ok := s.Servers[id]; !ok {
			delete(p.marks, id)
		}
	}
	for id := range p.pairs {
		if _, ok := s.Servers[id]; !ok {
			delete(p.pairs, id)
		}
	}
	return nil
}

// forget clears the record when this node stops leading: a new leader
// times failures afresh.
func (p *voterPromoter) forget() {
	p.mu.Lock()
	clear(p.marks)
	clear(p.pairs)
	p.mu.Unlock()
}

// allowPromotion is checked against the latest configuration (not the
// autopilot state, which may be a round old) right before a non-voter is
// promoted, with joins held off meanwhile: a promotion may take the voters
// up to Voters, or one beyond to replace a dead voter that still votes
// (which is demoted at the next round). So a promotion decided on a stale
// state, or racing a join that added a voter, never leaves more voters
// than wanted.
func (p *voterPromoter) allowPromotion(id raft.ServerID, servers []raft.Server) bool {
	voters := 0
	isVoter := map[raft.ServerID]bool{}
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			voters++
			isVoter[s.ID] = true
		}
	}
	if voters < p.voters {
		return true
	}
	p.mu.Lock()
	dead, paired := p.pairs[id]
	p.mu.Unlock()
	return paired && voters == p.voters && isVoter[dead]
}

// healthySince returns since when srv has been as healthy (or unhealthy)
// as it is now.
func healthySince(srv *autopilot.ServerState) time.Time {
	if m, ok := srv.Server.Ext.(healthMark); ok && m.healthy == srv.Health.Healthy {
		return m.since
	}
	return srv.Health.StableSince
}

// stableFor reports whether srv has been healthy for at least d.
func stableFor(srv *autopilot.ServerState, now time.Time, d time.Duration) bool {
	return srv.Health.Healthy && now.Sub(healthySince(srv)) >= d
}

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

// CalculatePromotionsAndDemotions fills the voters up to Config.Voters
// with non-voters healthy for the stabilization time (lowest ID first; a
// promotion that makes the count odd takes a healthy non-voter without
// waiting for it to be stable, if no stable one is there), then deals with at most one voter unhealthy for DeadVoterTimeout per
// round: while Voters or fewer vote, a healthy non-voter is promoted to
// replace it; once more than Voters vote (the replacement votes, or the
// cluster was bootstrapped with more Peers), it is demoted. The leader is
// never demoted.
//
// Promoting first never lowers the number of healthy voters, and with a
// 3-voter cluster with one voter dead the tolerance is the same either
// way (4 voters of which 3 must answer, or 2 of which 2 must); demoting
// first, as autopilot prefers, opens a window with fewer than Voters
// voters in which a join would be added as a voter too, ending with one
// voter too many. Autopilot applies only what it finds safe on its side:
// it promotes healthy servers only, one round of promotions before any
// demotion; allowPromotion checks each promotion against the latest
// configuration.
func (p *voterPromoter) CalculatePromotionsAndDemotions(c *autopilot.Config, s *autopilot.State) autopilot.RaftChanges {
	var changes autopilot.RaftChanges
	now := p.now()
	stable := s.ServerStabilizationTime(c)
	voters := 0
	var candidates, healthy []raft.ServerID // stable non-voters; healthy ones, stable or not
	var dead []*autopilot.ServerState
	for _, id := range slices.Sorted(maps.Keys(s.Servers)) { // in order: no choice depends on map order
		srv := s.Servers[id]
		switch {
		case srv.HasVotingRights():
			voters++
			if srv.State != autopilot.RaftLeader && !srv.Health.Healthy && now.Sub(healthySince(srv)) >= p.deadVoterTimeout {
				dead = append(dead, srv)
			}
		case srv.State == autopilot.RaftNonVoter && srv.Server.NodeStatus == autopilot.NodeAlive && srv.Health.Healthy:
			healthy = append(healthy, id)
			if stableFor(srv, now, stable) {
				candidates = append(candidates, id)
			}
		}
	}
	promoted := map[raft.ServerID]bool{}
	next := func(pool []raft.ServerID) (raft.ServerID, bool) {
		for _, id := range pool {
			if !promoted[id] {
				return id, true
			}
		}
		return "", false
	}
	for voters+len(changes.Promotions) < p.voters {
		count := voters + len(changes.Promotions)
		id, ok := next(candidates)
		reason := fmt.Sprintf("%d voters, %d wanted: promoting a non-voter healthy for %v", count, p.voters, stable)
		if !ok && count%2 == 0 {
			// From an even count to an odd one the quorum keeps its size
			// (2 of 2, then 2 of 3): one more voter can only help, even
			// one that fails right away, so no stability is waited for.
			// A member that comes back (a leave and a restart) gets its
			// vote within a health check or two, and the cluster is not
			// left meanwhile with two voters, one of which it cannot lose.
			id, ok = next(healthy)
			reason = fmt.Sprintf("%d voters, %d wanted: promoting a healthy non-voter at once (the quorum keeps its size)", count, p.voters)
		}
		if !ok {
			break
		}
		promoted[id] = true
		p.say(id, "%s", reason)
		changes.Promotions = append(changes.Promotions, id)
	}
	if len(dead) > 0 {
		d := dead[0]
		unhealthyFor := now.Sub(healthySince(d)).Truncate(time.Millisecond)
		replacement, ok := next(candidates)
		switch {
		case voters+len(changes.Promotions) > p.voters:
			p.say(d.Server.ID, "voter unhealthy (status %s) for %v, DeadVoterTimeout %v: %d voters remain without it", d.Server.NodeStatus, unhealthyFor, p.deadVoterTimeout, voters+len(changes.Promotions)-1)
			changes.Demotions = append(changes.Demotions, d.Server.ID)
		case ok:
			c := replacement
			p.say(c, "replaces voter %s, unhealthy (status %s) for %v, DeadVoterTimeout %v", d.Server.ID, d.Server.NodeStatus, unhealthyFor, p.deadVoterTimeout)
			p.mu.Lock()
			if p.pairs == nil {
				p.pairs = map[raft.ServerID]raft.ServerID{}
			}
			p.pairs[c] = d.Server.ID
			p.mu.Unlock()
			changes.Promotions = append(changes.Promotions, c)
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
		if gone := now.Sub(healthySince(st)); gone >= p.deadMemberTimeout {
			p.say(srv.ID, "non-voter unhealthy (status %s) for %v, DeadMemberTimeout %v", srv.NodeStatus, gone.Truncate(time.Second), p.deadMemberTimeout)
			out.FailedNonVoters = append(out.FailedNonVoters, srv)
		}
	}
	return out
}
