package cluster

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/transport"
)

// judgements is each member's status and health as n shows them
// (Stats.Members), as "status/health".
func judgements(n *Node) map[string]string {
	out := map[string]string{}
	for _, m := range n.Stats().Members {
		out[m.ID] = m.Status + "/" + m.Health
	}
	return out
}

// requireJudgements waits until n shows the members as want has them.
func requireJudgements(t *testing.T, n *Node, want map[string]string, what string) {
	t.Helper()
	var got map[string]string
	if !assert.Eventually(t, func() bool {
		got = judgements(n)
		return maps.Equal(got, want)
	}, patience, 5*time.Millisecond) {
		t.Fatalf("%s: %s shows %v, want %v", what, n.ID(), got, want)
	}
}

// requireFollowerJudgements waits until a node of nodes (nil: stopped)
// that does not lead shows the members as want has them: whichever does,
// so that an election meanwhile (a loaded machine's heartbeats come late)
// changes nothing.
func requireFollowerJudgements(t *testing.T, nodes []*Node, want map[string]string, what string) {
	t.Helper()
	last := map[string]map[string]string{}
	if !assert.Eventually(t, func() bool {
		for _, n := range nodes {
			if n == nil || n.IsLeader() {
				continue
			}
			got := judgements(n)
			last[n.ID()] = got
			if maps.Equal(got, want) && !n.IsLeader() {
				return true
			}
		}
		return false
	}, patience, 5*time.Millisecond) {
		t.Fatalf("%s: the followers show %v, want %v", what, last, want)
	}
}

// A follower has no judgement of its members of its own: it shows the
// leader's, which comes with the leader's health report. A member stopped
// is failed and unhealthy on the other follower as on the leader; once no
// leader reports, the follower shows no judgement, and says why in its
// readiness, as for the cluster's health.
func TestFollowerShowsTheLeadersJudgementOfMembers(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.DeadVoterTimeout = time.Hour })
	leader := c.leader()
	var followers []*Node
	for _, n := range c.nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}
	require.Len(t, followers, 2)
	asked, stopped := followers[0], followers[1]
	want := map[string]string{leader.ID(): "alive/healthy", asked.ID(): "alive/healthy", stopped.ID(): "alive/healthy"}
	requireFollowerJudgements(t, c.nodes, want, "all alive")

	c.stop(c.index(stopped))
	want[stopped.ID()] = "failed/unhealthy"
	leader = c.leader()
	requireJudgements(t, leader, want, "the leader judges the stopped member")
	requireFollowerJudgements(t, c.nodes, want, "the follower shows the leader's judgement")
	assert.True(t, c.follower().Stats().Health.Known, "with the health report it came in")

	asked = c.follower()
	c.stop(c.index(c.leader()))
	var r Readiness
	require.Eventually(t, func() bool {
		r = asked.Readiness()
		for _, j := range judgements(asked) {
			if j != "/" {
				return false
			}
		}
		return !r.Health.Known
	}, patience, 5*time.Millisecond, "no leader reports: no judgement shown; last readiness %+v", r)
	assert.NotEmpty(t, r.Reason)
}

// beforeMembersView makes cfg a member of a build from before the leader's
// stats request carried its view of the members: its decoder refuses a
// request that carries it (trailing bytes, nodewire.CodeBadRequest), as
// that build's did.
func beforeMembersView(cfg *Config) {
	cfg.wrapRPC = func(next transport.Handler) transport.Handler {
		return func(ctx context.Context, body []byte) ([]byte, error) {
			if req, err := nodewire.DecodeRequest(body); err == nil {
				if st, ok := req.(*nodewire.ServerStatsRequest); ok && len(st.Health.Members) > 0 {
					return nodewire.Reply{Code: nodewire.CodeBadRequest, Msg: "server-stats request: trailing bytes"}.AppendBinary(nil), nil
				}
			}
			return next(ctx, body)
		}
	}
}

// In a rolling upgrade a member of a build before the leader's view of the
// members refuses the stats requests that carry it: the leader asks it
// again without, so it stays healthy, gets the health report and becomes
// ready, while the other members show the leader's view. Upgraded (a
// restart on the current build), it gets the view too.
func TestOlderMemberWithoutTheLeadersView(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.DeadVoterTimeout = time.Hour })
	beforeMembersView(&c.cfgs[2])
	c.stop(2)
	old := c.restart(2)
	leader := c.leader()
	require.NotEqual(t, old, leader, "the older member must not lead for this test")
	var current *Node
	for _, n := range c.nodes {
		if n != leader && n != old {
			current = n
		}
	}
	all := map[string]string{"n0": "alive/healthy", "n1": "alive/healthy", "n2": "alive/healthy"}
	requireJudgements(t, leader, all, "the leader judges the older member healthy: it answers")
	requireReadiness(t, old, true, 1)
	requireFollowerJudgements(t, []*Node{current}, all, "a member of the current build shows the leader's view")
	assert.Equal(t, map[string]string{"n0": "/", "n1": "/", "n2": "/"}, judgements(old), "the older member never gets it")

	// Upgraded: down for a health check or more, as a restart is, then
	// back on the current build.
	c.stop(2)
	requireJudgements(t, leader, map[string]string{"n0": "alive/healthy", "n1": "alive/healthy", "n2": "failed/unhealthy"}, "the leader sees the member down")
	c.cfgs[2].wrapRPC = nil
	upgraded := c.restart(2)
	requireFollowerJudgements(t, []*Node{upgraded}, all, "the upgraded member shows the leader's view")
}
