package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
)

// raftlock status shows each member's version and command level, marks
// the members below the leader's level and says what to install; a member
// that told neither shows "-". -json prints the agent's answer with them.
func TestStatusShowsMembersVersionsAndLevels(t *testing.T) {
	st := api.ClusterStatus{
		NodeID: "n0", Role: api.RoleLeader, LeaderID: "n0", LeaderAddr: "10.0.0.1:7400", Term: 3,
		Members: []api.Member{
			{ID: "n0", Address: "10.0.0.1:7400", Suffrage: api.SuffrageVoter, Leader: true, Version: "v1.3.0", Level: 2},
			{ID: "n1", Address: "10.0.0.2:7400", Suffrage: api.SuffrageVoter, Version: "v1.3.0", Level: 2},
			{ID: "n2", Address: "10.0.0.3:7400", Suffrage: api.SuffrageVoter, Version: "v1.2.0", Level: 1, BelowLeaderLevel: true},
			{ID: "n3", Address: "10.0.0.4:7400", Suffrage: api.SuffrageNonvoter, BelowLeaderLevel: true},
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/cluster" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	}))
	t.Cleanup(srv.Close)

	var out, errOut bytes.Buffer
	require.Equal(t, exitOK, runStatus([]string{"-addr", srv.URL}, &out, &errOut), errOut.String())
	text := out.String()
	assert.Contains(t, text, "node:    n0 (leader)\nleader:  n0 at 10.0.0.1:7400\n", "the lines before the table as they were")
	assert.Regexp(t, `(?m)^ID\s+ADDRESS\s+SUFFRAGE\s+ROLE\s+GOSSIP\s+API\s+HEALTH\s+VERSION\s+LEVEL$`, text)
	for _, row := range []string{
		`^n0\s+10\.0\.0\.1:7400\s+voter\s+leader\s+-\s+-\s+-\s+v1\.3\.0\s+2$`,
		`^n1\s+10\.0\.0\.2:7400\s+voter\s+follower\s+-\s+-\s+-\s+v1\.3\.0\s+2$`,
		`^n2\s+10\.0\.0\.3:7400\s+voter\s+follower\s+-\s+-\s+-\s+v1\.2\.0\s+1 \(BELOW THE LEADER'S 2\)$`,
		`^n3\s+10\.0\.0\.4:7400\s+nonvoter\s+follower\s+-\s+-\s+-\s+-\s+- \(BELOW THE LEADER'S 2\)$`,
	} {
		assert.Regexp(t, regexp.MustCompile(`(?m)`+row), text)
	}
	assert.Contains(t, text, "below the leader's command level 2: n2, n3; the leader refuses the commands they cannot read\n"+
		"(member_too_old) until they run raftlock v1.3.0 (the leader's)\n")

	// Nothing marked: no note.
	st.Members = st.Members[:2]
	out.Reset()
	require.Equal(t, exitOK, runStatus([]string{"-addr", srv.URL}, &out, &errOut), errOut.String())
	assert.NotContains(t, out.String(), "below the leader")
	assert.NotContains(t, out.String(), "BELOW")

	st.Members = append(st.Members, api.Member{ID: "n2", Address: "10.0.0.3:7400", Suffrage: api.SuffrageVoter, Version: "v1.2.0", Level: 1, BelowLeaderLevel: true})
	out.Reset()
	require.Equal(t, exitOK, runStatus([]string{"-addr", srv.URL, "-json"}, &out, &errOut), errOut.String())
	var got api.ClusterStatus
	require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
	assert.Equal(t, st, got)
	assert.Contains(t, out.String(), `"below_leader_level": true`)
	assert.Contains(t, out.String(), `"version": "v1.2.0"`)
	assert.Contains(t, out.String(), `"level": 1`)
}

// TestStatusOnAFollowerShowsTheLeadersJudgement: raftlock status asked of
// a follower shows each member's health as the leader judges it (a
// follower judges none), and a member that died as failed, not as a
// follower.
func TestStatusOnAFollowerShowsTheLeadersJudgement(t *testing.T) {
	ids := []string{"a", "b", "c"}
	agents, _ := startGossipCluster(t, ids...)
	st, err := agents[0].client(t).Cluster(context.Background())
	require.NoError(t, err)
	var followers []*agent
	for i, a := range agents {
		if ids[i] != st.LeaderID {
			followers = append(followers, a)
		}
	}
	require.Len(t, followers, 2, "leader %q", st.LeaderID)
	asked, dead := followers[0], followers[1]
	deadID := ids[slices.Index(agents, dead)]
	dead.kill(syscall.SIGKILL)

	row := func(id, role, health string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + id + `\s+\S+\s+voter\s+` + role + `\s+\S+\s+\S+\s+` + regexp.QuoteMeta(health) + `\s`)
	}
	var out string
	if !assert.Eventually(t, func() bool {
		var code int
		out, _, code = cli(t, asked, "status")
		return code == exitOK && row(deadID, "failed", "unhealthy (failed)").MatchString(out)
	}, 60*time.Second, 200*time.Millisecond, "the dead member, as the leader judges it") {
		t.Fatalf("the last status:\n%s", out)
	}
	assert.Contains(t, out, "(follower)\n", "asked of a follower")
	for _, id := range ids {
		switch id {
		case deadID:
		case st.LeaderID:
			assert.Regexp(t, row(id, "leader", "healthy"), out)
		default:
			assert.Regexp(t, row(id, "follower", "healthy"), out)
		}
	}
	assert.NotContains(t, out, "could not be read")
}

// statusServer serves GET /v1/cluster with *st, counting the requests.
func statusServer(t *testing.T, st *api.ClusterStatus) (url string, hits *atomic.Int32) {
	t.Helper()
	hits = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/cluster" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, hits
}

// raftlock status asked of a follower shows the leader's judgement of the
// members as the follower's agent answers it, which carries it: nothing is
// asked of the leader. An agent too old to carry it (no member judged)
// leaves status to ask the leader at its API address, as before.
func TestStatusOnAFollowerAsksTheLeaderOnlyForAnOlderAgent(t *testing.T) {
	leaderSt := api.ClusterStatus{NodeID: "n0", Role: api.RoleLeader, LeaderID: "n0", Members: []api.Member{
		{ID: "n0", Address: "10.0.0.1:7400", Suffrage: api.SuffrageVoter, Leader: true, Status: "alive", Health: api.HealthHealthy},
		{ID: "n1", Address: "10.0.0.2:7400", Suffrage: api.SuffrageVoter, Status: "alive", Health: api.HealthHealthy},
		{ID: "n2", Address: "10.0.0.3:7400", Suffrage: api.SuffrageVoter, Status: "failed", Health: api.HealthUnhealthy},
	}}
	leaderURL, leaderHits := statusServer(t, &leaderSt)
	for i := range leaderSt.Members {
		leaderSt.Members[i].APIAddr = leaderURL
	}
	rows := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^n0\s+10\.0\.0\.1:7400\s+voter\s+leader\s+-\s+\S+\s+healthy\s`),
		regexp.MustCompile(`(?m)^n1\s+10\.0\.0\.2:7400\s+voter\s+follower\s+-\s+\S+\s+healthy\s`),
		regexp.MustCompile(`(?m)^n2\s+10\.0\.0\.3:7400\s+voter\s+failed\s+-\s+\S+\s+unhealthy \(failed\)\s`),
	}

	follower := leaderSt
	follower.NodeID, follower.Role = "n1", api.RoleFollower
	follower.Members = slices.Clone(leaderSt.Members)
	for i := range follower.Members {
		follower.Members[i].Leader = follower.Members[i].ID == "n0"
	}
	followerURL, _ := statusServer(t, &follower)
	for name, tc := range map[string]struct {
		judges    bool  // the follower's agent carries the leader's judgement
		leaderGet int32 // requests status makes to the leader
	}{
		"current agent": {judges: true, leaderGet: 0},
		"older agent":   {judges: false, leaderGet: 1},
	} {
		t.Run(name, func(t *testing.T) {
			for i, m := range leaderSt.Members {
				if !tc.judges {
					m.Status, m.Health = "", ""
				}
				follower.Members[i].Status, follower.Members[i].Health = m.Status, m.Health
			}
			leaderHits.Store(0)
			var out, errOut bytes.Buffer
			require.Equal(t, exitOK, runStatus([]string{"-addr", followerURL}, &out, &errOut), errOut.String())
			for _, row := range rows {
				assert.Regexp(t, row, out.String())
			}
			assert.NotContains(t, out.String(), "could not be read")
			assert.Equal(t, tc.leaderGet, leaderHits.Load(), "requests to the leader's API")
		})
	}
}
