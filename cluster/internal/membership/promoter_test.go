package membership

import (
	"testing"
	"time"

	autopilot "github.com/hashicorp/raft-autopilot"
	"github.com/stretchr/testify/assert"

	raft "github.com/raftlock/raftlock/internal/raft"
)

var promoterNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testPromoter(voters int) *voterPromoter {
	return &voterPromoter{
		voters:            voters,
		deadVoterTimeout:  5 * time.Second,
		deadMemberTimeout: time.Hour,
		now:               func() time.Time { return promoterNow },
	}
}

var promoterConfig = &autopilot.Config{ServerStabilizationTime: 3 * time.Second}

// member is a server of an autopilot state, healthy or not for the given time.
func member(id string, st autopilot.RaftState, healthy bool, forTime time.Duration) *autopilot.ServerState {
	status := autopilot.NodeAlive
	if !healthy {
		status = autopilot.NodeFailed
	}
	return &autopilot.ServerState{
		Server: autopilot.Server{ID: raft.ServerID(id), NodeStatus: status},
		State:  st,
		Health: autopilot.ServerHealth{Healthy: healthy, StableSince: promoterNow.Add(-forTime)},
	}
}

func apState(servers ...*autopilot.ServerState) *autopilot.State {
	s := &autopilot.State{Servers: map[raft.ServerID]*autopilot.ServerState{}}
	for _, srv := range servers {
		s.Servers[srv.Server.ID] = srv
		if srv.HasVotingRights() {
			s.Voters = append(s.Voters, srv.Server.ID)
		}
	}
	return s
}

func ids(s ...string) []raft.ServerID {
	var out []raft.ServerID
	for _, id := range s {
		out = append(out, raft.ServerID(id))
	}
	return out
}

func TestPromoterFillsVotersWithStableNonvotersLowestIDFirst(t *testing.T) {
	p := testPromoter(3)
	s := apState(
		member("a", autopilot.RaftLeader, true, time.Minute),
		member("e", autopilot.RaftNonVoter, true, time.Minute),
		member("c", autopilot.RaftNonVoter, true, time.Minute),
		member("d", autopilot.RaftNonVoter, true, time.Second), // healthy, not yet stable
		member("b", autopilot.RaftNonVoter, false, time.Minute),
	)
	got := p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Equal(t, ids("c", "e"), got.Promotions, "two voters missing; b is unhealthy and d not stable yet")
	assert.Empty(t, got.Demotions)

	// At Voters, healthy voters stay and nothing is promoted.
	s = apState(
		member("a", autopilot.RaftLeader, true, time.Minute),
		member("b", autopilot.RaftVoter, true, time.Minute),
		member("c", autopilot.RaftVoter, true, time.Minute),
		member("d", autopilot.RaftNonVoter, true, time.Minute),
	)
	got = p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Empty(t, got.Promotions)
	assert.Empty(t, got.Demotions)
}

// From an even number of voters to an odd one the quorum keeps its size,
// so a healthy non-voter is promoted without waiting to be stable; from
// odd to even it must be stable.
func TestPromoterMakesTheCountOddAtOnce(t *testing.T) {
	p := testPromoter(3)
	s := apState(
		member("a", autopilot.RaftLeader, true, time.Minute),
		member("b", autopilot.RaftVoter, true, time.Minute),
		member("c", autopilot.RaftNonVoter, true, time.Second), // back a moment ago
		member("d", autopilot.RaftNonVoter, false, time.Minute),
	)
	got := p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Equal(t, ids("c"), got.Promotions, "2 voters: c makes 3 with the same quorum of 2")

	s = apState(
		member("a", autopilot.RaftLeader, true, time.Minute),
		member("b", autopilot.RaftVoter, true, time.Minute),
		member("d", autopilot.RaftNonVoter, true, time.Minute),
		member("c", autopilot.RaftNonVoter, true, time.Second),
	)
	got = p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Equal(t, ids("d"), got.Promotions, "a stable non-voter is preferred")

	p = testPromoter(5)
	s = apState(
		member("a", autopilot.RaftLeader, true, time.Minute),
		member("b", autopilot.RaftVoter, true, time.Minute),
		member("c", autopilot.RaftVoter, true, time.Minute),
		member("d", autopilot.RaftNonVoter, true, time.Second),
		member("e", autopilot.RaftNonVoter, true, time.Second),
	)
	got = p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Empty(t, got.Promotions, "3 voters: a fourth would raise the quorum to 3; it waits to be stable")

	p = testPromoter(3)
	s = apState(
		member("a", autopilot.RaftLeader, true, time.Minute),
		member("c", autopilot.RaftNonVoter, true, time.Second),
	)
	got = p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Empty(t, got.Promotions, "1 voter: a second would make the quorum 2 of 2; it waits to be stable")
}

func TestPromoterReplacesOneDeadVoterPerRound(t *testing.T) {
	p := testPromoter(3)
	s := apState(
		member("a", autopilot.RaftLeader, true, time.Minute),
		member("b", autopilot.RaftVoter, false, 6*time.Second),
		member("c", autopilot.RaftVoter, false, 10*time.Second),
		member("d", autopilot.RaftNonVoter, true, time.Minute),
		member("e", autopilot.RaftNonVoter, true, time.Minute),
	)
	got := p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Empty(t, got.Demotions, "not before its replacement votes")
	assert.Equal(t, ids("d"), got.Promotions, "one dead voter per round, lowest ID first, gets a replacement")
	cfg := []raft.Server{{ID: "a", Suffrage: raft.Voter}, {ID: "b", Suffrage: raft.Voter}, {ID: "c", Suffrage: raft.Voter}, {ID: "d", Suffrage: raft.Nonvoter}, {ID: "e", Suffrage: raft.Nonvoter}}
	assert.True(t, p.allowPromotion("d", cfg), "a replacement may take the voters one beyond Voters")
	assert.False(t, p.allowPromotion("e", cfg), "a promotion that is no replacement may not")
	cfg[1].Suffrage = raft.Nonvoter
	cfg[2].Suffrage = raft.Nonvoter
	assert.True(t, p.allowPromotion("e", cfg), "fewer voters than Voters")

	// The next round: the replacement votes; the dead voter is demoted.
	s = apState(
		member("a", autopilot.RaftLeader, true, time.Minute),
		member("b", autopilot.RaftVoter, false, 6*time.Second),
		member("c", autopilot.RaftVoter, false, 10*time.Second),
		member("d", autopilot.RaftVoter, true, time.Minute),
		member("e", autopilot.RaftNonVoter, true, time.Minute),
	)
	got = p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Equal(t, ids("b"), got.Demotions)
	assert.Empty(t, got.Promotions)

	// Not dead long enough: nothing yet.
	s = apState(
		member("a", autopilot.RaftLeader, true, time.Minute),
		member("b", autopilot.RaftVoter, false, 4*time.Second),
		member("c", autopilot.RaftVoter, true, time.Minute),
		member("d", autopilot.RaftNonVoter, true, time.Minute),
	)
	got = p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Empty(t, got.Demotions)
	assert.Empty(t, got.Promotions)
}

func TestPromoterKeepsDeadVoterWithoutReplacement(t *testing.T) {
	p := testPromoter(5)
	// Five voters, two dead at once, no non-voter: demoting would leave
	// fewer voters than wanted and no more live ones. Nothing changes.
	s := apState(
		member("a", autopilot.RaftLeader, true, time.Minute),
		member("b", autopilot.RaftVoter, false, time.Minute),
		member("c", autopilot.RaftVoter, false, time.Minute),
		member("d", autopilot.RaftVoter, true, time.Minute),
		member("e", autopilot.RaftVoter, true, time.Minute),
		member("f", autopilot.RaftNonVoter, true, time.Second), // not stable yet
	)
	got := p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Empty(t, got.Demotions)
	assert.Empty(t, got.Promotions)

	// More voters than wanted (bootstrapped with five Peers, Voters 3): a
	// dead one is demoted even without a replacement.
	p = testPromoter(3)
	got = p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Equal(t, ids("b"), got.Demotions)
	assert.Empty(t, got.Promotions)
}

func TestPromoterNeverDemotesTheLeader(t *testing.T) {
	p := testPromoter(3)
	s := apState(
		member("a", autopilot.RaftLeader, false, time.Hour),
		member("b", autopilot.RaftVoter, true, time.Minute),
		member("c", autopilot.RaftVoter, true, time.Minute),
		member("d", autopilot.RaftNonVoter, true, time.Minute),
	)
	got := p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Empty(t, got.Demotions)
	assert.Empty(t, got.Promotions)
}

func TestPromoterRemovesOnlyLeftMembersAndLongDeadNonvoters(t *testing.T) {
	p := testPromoter(3)
	deadVoter := member("b", autopilot.RaftVoter, false, 2*time.Hour)
	leftVoter := member("c", autopilot.RaftVoter, false, time.Second)
	leftVoter.Server.NodeStatus = autopilot.NodeLeft
	longDead := member("d", autopilot.RaftNonVoter, false, 2*time.Hour)
	recentlyDead := member("e", autopilot.RaftNonVoter, false, time.Minute)
	leftNonvoter := member("f", autopilot.RaftNonVoter, false, time.Second)
	leftNonvoter.Server.NodeStatus = autopilot.NodeLeft
	s := apState(member("a", autopilot.RaftLeader, true, time.Hour), deadVoter, leftVoter, longDead, recentlyDead, leftNonvoter)
	failed := &autopilot.FailedServers{
		StaleVoters:     ids("x"),
		StaleNonVoters:  ids("y"),
		FailedVoters:    []*autopilot.Server{&deadVoter.Server, &leftVoter.Server},
		FailedNonVoters: []*autopilot.Server{&longDead.Server, &recentlyDead.Server, &leftNonvoter.Server},
	}
	got := p.FilterFailedServerRemovals(promoterConfig, s, failed)
	assert.Empty(t, got.StaleVoters, "every member is known: nothing is stale")
	assert.Empty(t, got.StaleNonVoters)
	assert.Equal(t, []*autopilot.Server{&leftVoter.Server}, got.FailedVoters, "a failed voter is demoted, never removed; one that left goes")
	assert.Equal(t, []*autopilot.Server{&longDead.Server, &leftNonvoter.Server}, got.FailedNonVoters)
}

func TestMergeMembers(t *testing.T) {
	servers := []raft.Server{
		{ID: "n0", Address: "10.0.0.1:7000", Suffrage: raft.Voter},
		{ID: "n1", Address: "10.0.0.2:7000", Suffrage: raft.Voter},
		{ID: "n2", Address: "10.0.0.3:7000", Suffrage: raft.Nonvoter},
		{ID: "n3", Address: "10.0.0.4:7000", Suffrage: raft.Nonvoter},
	}
	failing := map[raft.ServerID]bool{"n1": true, "n3": true, "n0": true}

	// Without gossip: the configuration, judged by heartbeats; this node alive.
	got := mergeMembers("n0", servers, failing, nil)
	want := []KnownMember{
		{MemberView: MemberView{ID: "n0", Addr: "10.0.0.1:7000", Status: autopilot.NodeAlive}, InConfig: true, Suffrage: raft.Voter, ConfigAddr: "10.0.0.1:7000"},
		{MemberView: MemberView{ID: "n1", Addr: "10.0.0.2:7000", Status: autopilot.NodeFailed}, InConfig: true, Suffrage: raft.Voter, ConfigAddr: "10.0.0.2:7000", HeartbeatsFailed: true},
		{MemberView: MemberView{ID: "n2", Addr: "10.0.0.3:7000", Status: autopilot.NodeAlive}, InConfig: true, Suffrage: raft.Nonvoter, ConfigAddr: "10.0.0.3:7000"},
		{MemberView: MemberView{ID: "n3", Addr: "10.0.0.4:7000", Status: autopilot.NodeFailed}, InConfig: true, Suffrage: raft.Nonvoter, ConfigAddr: "10.0.0.4:7000", HeartbeatsFailed: true},
	}
	assert.Equal(t, want, got)

	// With gossip: its word wins for the members it knows (n1 alive at a
	// new address, where raft has not tried it yet; n2 left), but not
	// against failing heartbeats at the same address (n5); n3 (not in
	// gossip: an older version) is still judged by its heartbeats, and n4,
	// alive in gossip only, is listed for the reconciler to add.
	gossip := []MemberView{
		{ID: "n0", Addr: "10.0.0.1:7000", APIAddr: "http://10.0.0.1:8080", Status: autopilot.NodeAlive, Version: "1"},
		{ID: "n1", Addr: "10.0.0.9:7000", Status: autopilot.NodeAlive},
		{ID: "n2", Addr: "10.0.0.3:7000", Status: autopilot.NodeLeft},
		{ID: "n4", Addr: "10.0.0.5:7000", Status: autopilot.NodeAlive},
		{ID: "n5", Addr: "10.0.0.6:7000", Status: autopilot.NodeAlive},
	}
	servers = append(servers, raft.Server{ID: "n5", Address: "10.0.0.6:7000", Suffrage: raft.Voter})
	failing["n5"] = true
	got = mergeMembers("n0", servers, failing, gossip)
	want = []KnownMember{
		{MemberView: gossip[0], InConfig: true, Suffrage: raft.Voter, ConfigAddr: "10.0.0.1:7000"},
		{MemberView: gossip[1], InConfig: true, Suffrage: raft.Voter, ConfigAddr: "10.0.0.2:7000", HeartbeatsFailed: true},
		{MemberView: gossip[2], InConfig: true, Suffrage: raft.Nonvoter, ConfigAddr: "10.0.0.3:7000"},
		{MemberView: MemberView{ID: "n3", Addr: "10.0.0.4:7000", Status: autopilot.NodeFailed}, InConfig: true, Suffrage: raft.Nonvoter, ConfigAddr: "10.0.0.4:7000", HeartbeatsFailed: true},
		{MemberView: gossip[3]},
		{MemberView: MemberView{ID: "n5", Addr: "10.0.0.6:7000", Status: autopilot.NodeFailed}, InConfig: true, Suffrage: raft.Voter, ConfigAddr: "10.0.0.6:7000", HeartbeatsFailed: true},
	}
	assert.Equal(t, want, got)
}

// The promoter times health itself (autopilot v0.3.0's StableSince never
// moves after a server's first state): the clock restarts at each change.
func TestPromoterTimesHealthChanges(t *testing.T) {
	now := promoterNow
	p := testPromoter(3)
	p.now = func() time.Time { return now }
	srv := member("b", autopilot.RaftVoter, true, 0)
	srv.Health.StableSince = time.Time{} // what autopilot would keep: its first sighting
	ext := func() time.Time {
		srv.Server.Ext = p.GetServerExt(promoterConfig, srv)
		return healthySince(srv)
	}
	assert.Equal(t, now, ext())
	first := now
	now = now.Add(time.Second)
	assert.Equal(t, first, ext(), "still healthy: same mark")
	srv.Health.Healthy = false
	assert.Equal(t, now, ext(), "unhealthy from now")
	now = now.Add(6 * time.Second)
	s := apState(member("a", autopilot.RaftLeader, true, time.Hour), srv, member("c", autopilot.RaftVoter, true, time.Hour), member("d", autopilot.RaftNonVoter, true, time.Hour))
	got := p.CalculatePromotionsAndDemotions(promoterConfig, s)
	assert.Equal(t, ids("d"), got.Promotions, "b unhealthy for 6s, DeadVoterTimeout 5s: replaced")

	srv.Health.Healthy = true
	assert.Equal(t, now, ext(), "healthy again from now")
	p.GetStateExt(promoterConfig, apState(member("a", autopilot.RaftLeader, true, time.Hour)))
	assert.NotContains(t, p.marks, raft.ServerID("b"), "forgotten once out of the configuration")
}
