package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/raftlock/raftlock/api"
)

// leaderLevelOf is the command level the leader told, 0 when the members
// list no leader or it has not told.
func leaderLevelOf(members []api.Member) int {
	for _, m := range members {
		if m.Leader {
			return m.Level
		}
	}
	return 0
}

// buildCells are a member's VERSION and LEVEL cells in raftlock status:
// "-" for what it has not told, and a LEVEL that says so when the member
// reads less than the leader (leaderLevel, 0 when not known).
func buildCells(m api.Member, leaderLevel int) (version, level string) {
	version, level = "-", "-" // not told (yet), or a version too old to tell
	if m.Version != "" {
		version = m.Version
	}
	if m.Level > 0 {
		level = fmt.Sprint(m.Level)
	}
	if m.BelowLeaderLevel {
		below := " (BELOW THE LEADER)"
		if leaderLevel > 0 {
			below = fmt.Sprintf(" (BELOW THE LEADER'S %d)", leaderLevel)
		}
		level += below
	}
	return version, level
}

// printBelowLeader explains, under the members table, what the members
// marked below the leader's level mean for an upgrade.
func printBelowLeader(w io.Writer, members []api.Member, leaderLevel int) {
	var below []string
	leaderVersion := ""
	for _, m := range members {
		if m.BelowLeaderLevel {
			below = append(below, m.ID)
		}
		if m.Leader {
			leaderVersion = m.Version
		}
	}
	if len(below) == 0 {
		return
	}
	install := "the leader's raftlock version"
	if leaderVersion != "" {
		install = "raftlock " + leaderVersion + " (the leader's)"
	}
	fmt.Fprintf(w, "\nbelow the leader's command level %d: %s; the leader refuses the commands they cannot read\n"+
		"(member_too_old) until they run %s\n", leaderLevel, strings.Join(below, ", "), install)
}

// leaderView is the leader's own answer to GET /v1/cluster, when st, the
// asked agent's, is not the leader's and judges no member: only the leader
// judges its members' health and knows which are failed or left. An agent
// of this version shows that judgement on a follower too, as the leader
// reports it with its health checks, and then nothing is asked here. An
// agent of a version before that (or whose leader runs one), or one that
// has heard no recent report, shows none: status asks the leader itself
// then, at its API address (its -advertise-http) with the same token and
// TLS settings, so that it shows the leader's judgement through a rolling
// upgrade as before it. It returns nil and why when the leader cannot be
// read (no leader, no API address known, unreachable, or an agent that
// answers as another node or not as the leader); nil and "" when st is the
// leader's own or judges a member.
func leaderView(ctx context.Context, cfg api.ClientConfig, st api.ClusterStatus) (*api.ClusterStatus, string) {
	if st.Role == api.RoleLeader || slices.ContainsFunc(st.Members, func(m api.Member) bool { return m.Health != "" }) {
		return nil, ""
	}
	if st.LeaderID == "" {
		return nil, "no leader is known"
	}
	addr := ""
	for _, m := range st.Members {
		if m.ID == st.LeaderID {
			addr = m.APIAddr
		}
	}
	if addr == "" {
		return nil, fmt.Sprintf("the leader %s's API address is not known here", st.LeaderID)
	}
	c, err := api.NewClient(addr, cfg)
	if err != nil {
		return nil, fmt.Sprintf("the leader's API address %q: %v", addr, err)
	}
	defer c.Close()
	lst, err := c.Cluster(ctx)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("asking the leader at %s: %v", addr, err)
	case lst.NodeID != st.LeaderID || lst.Role != api.RoleLeader:
		return nil, fmt.Sprintf("%s answers as %s (%s), not as the leader %s", addr, lst.NodeID, lst.Role, st.LeaderID)
	}
	return &lst, ""
}

// judgedBy is member m as the leader judges it (health and status): from
// leader, the leader's own answer, when status was asked of another node
// (nil: m itself, as the asked agent answered).
func judgedBy(m api.Member, leader *api.ClusterStatus) api.Member {
	if leader == nil {
		return m
	}
	for _, lm := range leader.Members {
		if lm.ID == m.ID {
			m.Health, m.Status = lm.Health, lm.Status
			return m
		}
	}
	m.Health, m.Status = "", ""
	return m
}

// roleCell is a member's ROLE in raftlock status: leader or follower as
// raft has it, but failed or left for a member that is gone, as the
// leader's member status (or else gossip) says: raft keeps a dead member
// in its configuration, as a follower, until the reconciler removes it.
func roleCell(m api.Member) string {
	switch {
	case m.Leader:
		return "leader"
	case m.Status == api.GossipFailed || m.Status == api.GossipLeft: // the member source's words are gossip's
		return m.Status
	case m.Gossip == api.GossipFailed || m.Gossip == api.GossipLeft:
		return m.Gossip
	}
	return "follower"
}

// healthCell is a member's HEALTH in raftlock status: the leader's
// judgement, with its status when that is not alive; "-" when the leader
// has not judged it (or could not be asked).
func healthCell(m api.Member) string {
	switch {
	case m.Health != "" && m.Status != "" && m.Status != "alive":
		return m.Health + " (" + m.Status + ")"
	case m.Health != "":
		return m.Health
	}
	return "-"
}
