package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// newerBuild is the levels of a build that reads acquire-all as a level 2
// command (see newerAcquireAll).
func newerBuild() *commandLevels {
	return &commandLevels{max: 2, levelOf: newerAcquireAll}
}

func acquireAllReq(keys ...string) lock.AcquireRequest {
	return lock.AcquireRequest{Key: keys[0], Keys: keys, Owner: lock.NewOwner(), TTL: time.Minute}
}

// In a rolling upgrade, the leader refuses a command that a member cannot
// read, wherever it is asked (on the leader, through a follower, through
// the older member itself), with lock.ErrMemberTooOld naming the member;
// nothing is proposed, and commands every member reads go on. Once the
// member runs a build that reads it, the command works.
func TestLeaderRefusesCommandAMemberCannotRead(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.levels = newerBuild() })
	c.cfgs[2].levels = olderBuild()
	c.stop(2)
	old := c.restart(2)
	leader := c.leader()
	require.NotEqual(t, old, leader, "the older member must not lead for this test")
	var follower *Node
	for _, n := range c.nodes {
		if n != leader && n != old {
			follower = n
		}
	}
	require.Eventually(t, func() bool {
		level, _ := leader.memberLevel(follower.ID(), nil)
		return level == 2
	}, patience, 10*time.Millisecond, "the leader learns the newer follower's level")
	ctx := testCtx(t)
	_, first := acquire(t, leader, "first", time.Minute)

	for _, via := range []*Node{leader, follower, old} {
		_, err := via.AcquireAll(ctx, acquireAllReq("x", "y"))
		require.ErrorIs(t, err, lock.ErrMemberTooOld, "asked through %s", via.ID())
		assert.NotErrorIs(t, err, lock.ErrUnknownOutcome, "nothing was proposed")
		assert.Contains(t, err.Error(), "voter n2", "names the member")
		assert.Contains(t, err.Error(), "install on n2 raftlock "+raftlockVersion, "says what to do")
		assert.Equal(t, 1, countOccurrences(err.Error(), lock.ErrMemberTooOld.Error()), "the sentinel's text once: %v", err)
	}
	// A waiting acquire-all is refused the same way.
	req := acquireAllReq("x", "y")
	req.Wait = time.Second
	_, err := follower.AcquireAll(ctx, req)
	require.ErrorIs(t, err, lock.ErrMemberTooOld)

	// Nothing was proposed: no token consumed, no key taken; and the
	// older member, having applied what came after, still runs.
	_, next := acquire(t, follower, "next", time.Minute)
	assert.Equal(t, first.Token+1, next.Token)
	waitApplied(t, old, leader)
	require.NoError(t, old.Err())
	info, err := old.InspectStale("x")
	require.NoError(t, err)
	assert.False(t, info.Locked)

	// The older member upgraded: it tells its level when it starts, and
	// the command works.
	c.stop(2)
	c.cfgs[2].levels = newerBuild()
	c.restart(2)
	var lease lock.Lease
	require.Eventually(t, func() bool {
		lease, err = follower.AcquireAll(ctx, acquireAllReq("x", "y"))
		return err == nil
	}, patience, 20*time.Millisecond, "acquire-all still refused after the upgrade: %v", err)
	assert.Greater(t, lease.Token, next.Token)
}

// A member whose level is not known counts as reading the baseline: until
// the leader has heard a newer member's level, it refuses that member too;
// the leader's own build counts at once.
func TestMemberLevelDefaultsToBaseline(t *testing.T) {
	n := startNode(t, func() Config {
		cfg := testConfig(t, "n0")
		cfg.Bootstrap = true
		cfg.levels = newerBuild()
		return cfg
	}())
	require.NoError(t, n.Ready(testCtx(t)))
	level, _ := n.memberLevel("n0", nil)
	assert.Equal(t, 2, level, "its own build")
	level, version := n.memberLevel("stranger", nil)
	assert.Equal(t, fsm.BaselineLevel, level)
	assert.Empty(t, version)
	n.heardFrom("stranger", "", 2) // not a member: not recorded
	level, _ = n.memberLevel("stranger", nil)
	assert.Equal(t, fsm.BaselineLevel, level)
	level, version = n.memberLevel("g", map[string]gossipMember{"g": {Level: 3, Version: "v9"}})
	assert.Equal(t, 3, level)
	assert.Equal(t, "v9", version)

	// Alone, with a build that reads it: accepted.
	_, err := n.AcquireAll(testCtx(t), acquireAllReq("a", "b"))
	require.NoError(t, err)
	assert.Equal(t, fsm.BaselineLevel, parseLevel(""))
	assert.Equal(t, fsm.BaselineLevel, parseLevel("junk"))
	assert.Equal(t, fsm.BaselineLevel, parseLevel("0"))
	assert.Equal(t, 4, parseLevel("4"))
}

// With gossip on, members tell their level in the "level" tag: a newer
// leader refuses a command its older peer cannot read, naming the version
// the peer's tag gives, and accepts it once the peer's tag says it reads it.
func TestGossipCarriesCommandLevels(t *testing.T) {
	c0 := gossipConfig(t, "n0", anyGossipAddr, 0, nil)
	c0.Bootstrap = true
	c0.levels = newerBuild()
	n0 := startNode(t, c0)
	c1 := gossipConfig(t, "n1", anyGossipAddr, 0, []string{n0.GossipAddr()})
	c1.levels = olderBuild()
	n1 := startNode(t, c1)
	waitOneCluster(t, []*Node{n0, n1}, []string{"n0=voter", "n1=voter"})
	require.Eventually(t, func() bool { return n0.IsLeader() && n0.leaderReady() }, patience, 10*time.Millisecond)
	require.Eventually(t, func() bool { return n1.gossipByID()["n0"].Level == 2 }, gossipPatience, 20*time.Millisecond,
		"n1 sees n0's level tag")
	assert.Equal(t, fsm.BaselineLevel, n0.gossipByID()["n1"].Level)

	_, err := n1.AcquireAll(testCtx(t), acquireAllReq("x", "y"))
	require.ErrorIs(t, err, lock.ErrMemberTooOld)
	assert.Contains(t, err.Error(), "voter n1 reads level 1 (it runs raftlock "+raftlockVersion+")")

	// n1 upgraded in place (its tag changes): accepted.
	n1.setGossipTag(tagLevel, "2")
	require.Eventually(t, func() bool {
		_, err = n0.AcquireAll(testCtx(t), acquireAllReq("x", "y"))
		return err == nil
	}, gossipPatience, 20*time.Millisecond, "still refused: %v", err)
}

func countOccurrences(s, sub string) int {
	n := 0
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			n++
		}
	}
	return n
}

// The info exchange's level field: absent at the baseline (the bytes of
// builds before levels), present above it, refused when it says the
// baseline or less (one encoding per message); a question with a level
// gets the answerer's, one without gets none (a build from before levels
// refuses trailing bytes).
func TestNodeInfoCarriesLevelAboveBaselineOnly(t *testing.T) {
	plain := encodeRequest(&nodeInfo{id: "n", apiAddr: "a", level: fsm.BaselineLevel})
	assert.Equal(t, []byte{wireVersion, byte(kindInfo), 1, 'n', 1, 'a'}, plain)
	leveled := encodeRequest(&nodeInfo{id: "n", apiAddr: "a", level: 3})
	assert.Equal(t, slices.Concat(plain, []byte{3}), leveled)

	req, err := decodeRequest(leveled)
	require.NoError(t, err)
	assert.Equal(t, &nodeInfo{id: "n", apiAddr: "a", level: 3}, req)
	req, err = decodeRequest(plain)
	require.NoError(t, err)
	assert.Equal(t, &nodeInfo{id: "n", apiAddr: "a"}, req)
	for _, tail := range [][]byte{{0}, {1}, {3, 0}, {0x80}} {
		bad := slices.Concat(plain, tail)
		_, err := decodeRequest(bad)
		assert.ErrorIs(t, err, ErrBadRequest, "%x", bad)
	}

	n := startNode(t, func() Config {
		cfg := testConfig(t, "n0")
		cfg.Bootstrap = true
		cfg.levels = newerBuild()
		return cfg
	}())
	ans, err := (&nodeInfo{id: "x", level: 2}).serve(testCtx(t), n, nil)
	require.NoError(t, err)
	assert.Equal(t, 2, ans.(*nodeInfo).level, "asked with a level: answers its own")
	ans, err = (&nodeInfo{id: "x"}).serve(testCtx(t), n, nil)
	require.NoError(t, err)
	assert.Zero(t, ans.(*nodeInfo).level, "asked without: answers none")
	assert.Equal(t, []byte{wireVersion, byte(codeOK), byte(kindInfo), 2, 'n', '0', 0},
		reply{code: codeOK, kind: kindInfo, answer: ans}.appendBinary(nil))
}

// A refusal crosses the forwarding RPC as its own code, which the asking
// node reads back as lock.ErrMemberTooOld with the leader's message once.
func TestMemberTooOldCrossesTheRPC(t *testing.T) {
	served := fmt.Errorf("%w: install on n2", lock.ErrMemberTooOld)
	rep := errorReplyFor(served)
	assert.Equal(t, codeMemberTooOld, rep.code)
	got, err := decodeReply(rep.appendBinary(nil))
	require.NoError(t, err)
	assert.ErrorIs(t, got.err(), lock.ErrMemberTooOld)
	assert.Equal(t, served.Error(), got.err().Error())
}

func errorReplyFor(err error) reply {
	return reply{code: replyCodeFor(err), kind: kindCommand, msg: err.Error()}
}

// Non-voters count as much as voters: they apply every entry too.
func TestLeaderRefusesCommandANonVoterCannotRead(t *testing.T) {
	c := newCluster(t, 4, func(cfg *Config) { cfg.levels = newerBuild() })
	c.cfgs[3].levels = olderBuild()
	c.stop(3)
	c.restart(3)
	leader := c.leader()
	require.Equal(t, []string{"n0=voter", "n1=voter", "n2=voter", "n3=nonvoter"}, raftServers(leader))
	require.Eventually(t, func() bool {
		for _, id := range []string{"n0", "n1", "n2"} {
			if level, _ := leader.memberLevel(id, nil); level != 2 {
				return false
			}
		}
		return true
	}, patience, 10*time.Millisecond, "the leader learns the newer voters' levels")
	_, err := leader.AcquireAll(testCtx(t), acquireAllReq("x", "y"))
	require.ErrorIs(t, err, lock.ErrMemberTooOld)
	assert.Contains(t, err.Error(), "non-voter n3")
}
