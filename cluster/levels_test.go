package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/internal/membership"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/fsm"
	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/transport"
)

// newerBuild is the levels of a build that reads acquire-all as a level 2
// command (see newerAcquireAll).
func newerBuild() *commandLevels {
	return &commandLevels{max: 2, levelOf: newerAcquireAll}
}

// beforeVersions makes cfg a member of a build from before versions were
// told in the member info exchange (nodewire.KindInfo): it tells none, and its
// decoder refuses a question that has one (nodewire.CodeBadRequest), as that
// build's did.
func beforeVersions(cfg *Config) {
	cfg.version = new("")
	cfg.wrapRPC = func(next transport.Handler) transport.Handler {
		return func(ctx context.Context, body []byte) ([]byte, error) {
			if req, err := nodewire.DecodeRequest(body); err == nil {
				if info, ok := req.(*nodewire.Info); ok && info.Version != "" {
					return nodewire.Reply{Code: nodewire.CodeBadRequest, Msg: "kindInfo request: trailing bytes"}.AppendBinary(nil), nil
				}
			}
			return next(ctx, body)
		}
	}
}

func acquireAllReq(keys ...string) lock.AcquireRequest {
	return lock.AcquireRequest{Key: keys[0], Keys: keys, Owner: lock.NewOwner(), TTL: time.Minute}
}

// In a rolling upgrade, the leader refuses a command that a member cannot
// read, wherever it is asked (on the leader, through a follower, through
// the older member itself), with ErrMemberTooOld naming the member;
// nothing is proposed, and commands every member reads go on. Once the
// member runs a build that reads it, the command works.
func TestLeaderRefusesCommandAMemberCannotRead(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.levels = newerBuild() })
	c.cfgs[2].levels = olderBuild()
	c.cfgs[2].version = new("v0.9.0-old")
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
		level, _ := leader.hooks().MemberLevel(follower.ID(), nil)
		return level == 2
	}, patience, 10*time.Millisecond, "the leader learns the newer follower's level")
	// Every member shows who runs what, and marks the older member, on
	// the leader and on a follower alike (without gossip: they told in the
	// info exchange).
	for _, n := range []*Node{leader, follower} {
		var got []string
		require.Eventually(t, func() bool {
			got = memberBuilds(n)
			return slices.Equal(got, []string{
				"n0 " + raftlockVersion + " level 2", "n1 " + raftlockVersion + " level 2", "n2 v0.9.0-old level 1 BELOW",
			})
		}, patience, 10*time.Millisecond, "members as %s shows them: %q", n.ID(), &got)
	}
	ctx := testCtx(t)
	_, first := acquire(t, leader, "first", time.Minute)

	for _, via := range []*Node{leader, follower, old} {
		_, err := via.AcquireAll(ctx, acquireAllReq("x", "y"))
		require.ErrorIs(t, err, ErrMemberTooOld, "asked through %s", via.ID())
		assert.NotErrorIs(t, err, lock.ErrUnknownOutcome, "nothing was proposed")
		assert.Contains(t, err.Error(), "voter n2", "names the member")
		assert.Contains(t, err.Error(), "install on n2 raftlock "+raftlockVersion, "says what to do")
		assert.Contains(t, err.Error(), "it runs raftlock v0.9.0-old", "says what it runs")
		assert.Equal(t, 1, countOccurrences(err.Error(), ErrMemberTooOld.Error()), "the sentinel's text once: %v", err)
	}
	// A waiting acquire-all is refused the same way.
	req := acquireAllReq("x", "y")
	req.Wait = time.Second
	_, err := follower.AcquireAll(ctx, req)
	require.ErrorIs(t, err, ErrMemberTooOld)

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
	c.cfgs[2].version = nil
	c.restart(2)
	var lease lock.Lease
	require.Eventually(t, func() bool {
		lease, err = follower.AcquireAll(ctx, acquireAllReq("x", "y"))
		return err == nil
	}, patience, 20*time.Millisecond, "acquire-all still refused after the upgrade: %v", err)
	assert.Greater(t, lease.Token, next.Token)
	assert.Contains(t, memberBuilds(c.leader()), "n2 "+raftlockVersion+" level 2", "no longer marked")
}

// memberBuilds is n's Stats().Members as "id version level N", with
// "BELOW" for a member marked below the leader's level.
func memberBuilds(n *Node) []string {
	var out []string
	for _, m := range n.Stats().Members {
		s := fmt.Sprintf("%s %s level %d", m.ID, m.Version, m.Level)
		if m.BelowLeaderLevel {
			s += " BELOW"
		}
		out = append(out, s)
	}
	return out
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
	level, _ := n.hooks().MemberLevel("n0", nil)
	assert.Equal(t, 2, level, "its own build")
	level, version := n.hooks().MemberLevel("stranger", nil)
	assert.Equal(t, fsm.BaselineLevel, level)
	assert.Empty(t, version)
	n.membership.HeardFrom("stranger", "", 2, "v9") // not a member: not recorded
	level, _ = n.hooks().MemberLevel("stranger", nil)
	assert.Equal(t, fsm.BaselineLevel, level)
	level, version = n.hooks().MemberLevel("g", map[string]membership.GossipMember{"g": {Level: 3, Version: "v9"}})
	assert.Equal(t, 3, level)
	assert.Equal(t, "v9", version)

	// Alone, with a build that reads it: accepted.
	_, err := n.AcquireAll(testCtx(t), acquireAllReq("a", "b"))
	require.NoError(t, err)
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
	c1.version = new("v0.9.0-old")
	n1 := startNode(t, c1)
	waitOneCluster(t, []*Node{n0, n1}, []string{"n0=voter", "n1=voter"})
	require.Eventually(t, func() bool { return n0.IsLeader() && n0.leaderReady() }, patience, 10*time.Millisecond)
	require.Eventually(t, func() bool { return n1.hooks().GossipByID()["n0"].Level == 2 }, gossipPatience, 20*time.Millisecond,
		"n1 sees n0's level tag")
	assert.Equal(t, fsm.BaselineLevel, n0.hooks().GossipByID()["n1"].Level)

	_, err := n1.AcquireAll(testCtx(t), acquireAllReq("x", "y"))
	require.ErrorIs(t, err, ErrMemberTooOld)
	assert.Contains(t, err.Error(), "voter n1 reads level 1 (it runs raftlock v0.9.0-old)")
	// Both show who runs what from the tags, and mark the older member.
	want := []string{"n0 " + raftlockVersion + " level 2", "n1 v0.9.0-old level 1 BELOW"}
	assert.Equal(t, want, memberBuilds(n0))
	require.Eventually(t, func() bool { return slices.Equal(memberBuilds(n1), want) }, gossipPatience, 20*time.Millisecond,
		"n1 shows %q", memberBuilds(n1))

	// n1 upgraded in place (its tag changes): accepted.
	n1.hooks().SetLevelTag("2")
	require.Eventually(t, func() bool {
		_, err = n0.AcquireAll(testCtx(t), acquireAllReq("x", "y"))
		return err == nil
	}, gossipPatience, 20*time.Millisecond, "still refused: %v", err)
	assert.Equal(t, []string{"n0 " + raftlockVersion + " level 2", "n1 v0.9.0-old level 2"}, memberBuilds(n0), "no longer marked")
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
	plain := nodewire.EncodeRequest(&nodewire.Info{ID: "n", APIAddr: "a", Level: fsm.BaselineLevel})
	assert.Equal(t, []byte{nodewire.Version, byte(nodewire.KindInfo), 1, 'n', 1, 'a'}, plain)
	leveled := nodewire.EncodeRequest(&nodewire.Info{ID: "n", APIAddr: "a", Level: 3})
	assert.Equal(t, slices.Concat(plain, []byte{3}), leveled)

	req, err := nodewire.DecodeRequest(leveled)
	require.NoError(t, err)
	assert.Equal(t, &nodewire.Info{ID: "n", APIAddr: "a", Level: 3}, req)
	req, err = nodewire.DecodeRequest(plain)
	require.NoError(t, err)
	assert.Equal(t, &nodewire.Info{ID: "n", APIAddr: "a"}, req)
	for _, tail := range [][]byte{{0}, {1}, {3, 0}, {0x80}} {
		bad := slices.Concat(plain, tail)
		_, err := nodewire.DecodeRequest(bad)
		assert.ErrorIs(t, err, ErrBadRequest, "%x", bad)
	}

	n := startNode(t, func() Config {
		cfg := testConfig(t, "n0")
		cfg.Bootstrap = true
		cfg.levels = newerBuild()
		return cfg
	}())
	ans, err := serveInfo(testCtx(t), n, nil, &nodewire.Info{ID: "x", Level: 2})
	require.NoError(t, err)
	assert.Equal(t, 2, ans.Level, "asked with a level: answers its own")
	ans, err = serveInfo(testCtx(t), n, nil, &nodewire.Info{ID: "x"})
	require.NoError(t, err)
	assert.Zero(t, ans.Level, "asked without: answers none")
	assert.Equal(t, []byte{nodewire.Version, byte(nodewire.CodeOK), byte(nodewire.KindInfo), 2, 'n', '0', 0},
		nodewire.Reply{Code: nodewire.CodeOK, Kind: nodewire.KindInfo, Answer: &ans}.AppendBinary(nil))
}

// The info exchange's version field: after the level, which then travels
// even at the baseline; refused when empty, or after a level below the
// baseline. A question with a version gets the answerer's level and
// version; a build from before versions refuses it (its decoder does), and
// the asker asks again without it (askInfo).
func TestNodeInfoCarriesVersion(t *testing.T) {
	plain := nodewire.EncodeRequest(&nodewire.Info{ID: "n", APIAddr: "a"})
	versioned := nodewire.EncodeRequest(&nodewire.Info{ID: "n", APIAddr: "a", Version: "v1.2"})
	assert.Equal(t, slices.Concat(plain, []byte{fsm.BaselineLevel, 4, 'v', '1', '.', '2'}), versioned, "the baseline level, then the version")
	leveled := nodewire.EncodeRequest(&nodewire.Info{ID: "n", APIAddr: "a", Level: 3, Version: "v1.2"})
	assert.Equal(t, slices.Concat(plain, []byte{3, 4, 'v', '1', '.', '2'}), leveled)
	req, err := nodewire.DecodeRequest(versioned)
	require.NoError(t, err)
	assert.Equal(t, &nodewire.Info{ID: "n", APIAddr: "a", Level: fsm.BaselineLevel, Version: "v1.2"}, req)
	req, err = nodewire.DecodeRequest(leveled)
	require.NoError(t, err)
	assert.Equal(t, &nodewire.Info{ID: "n", APIAddr: "a", Level: 3, Version: "v1.2"}, req)
	for _, tail := range [][]byte{{1, 0}, {0, 1, 'v'}, {3, 2, 'v'}, {1, 1, 'v', 0}} {
		bad := slices.Concat(plain, tail)
		_, err := nodewire.DecodeRequest(bad)
		assert.ErrorIs(t, err, ErrBadRequest, "%x", bad)
	}

	n := startNode(t, func() Config {
		cfg := testConfig(t, "n0")
		cfg.Bootstrap = true
		cfg.version = new("v9.9.9-test")
		return cfg
	}())
	ans, err := serveInfo(testCtx(t), n, nil, &nodewire.Info{ID: "x", Version: "v1.2"})
	require.NoError(t, err)
	assert.Equal(t, nodewire.Info{ID: "n0", Level: fsm.MaxCommandLevel, Version: "v9.9.9-test"}, ans, "asked with a version: answers its own")
	ans, err = serveInfo(testCtx(t), n, nil, &nodewire.Info{ID: "x"})
	require.NoError(t, err)
	assert.Equal(t, nodewire.Info{ID: "n0"}, ans, "asked without: the bytes of the builds before versions")

	old := startNode(t, func() Config {
		cfg := testConfig(t, "old")
		cfg.Bootstrap = true
		cfg.APIAddr = "http://old.test"
		cfg.levels = baselineBuild() // builds before versions read no level above the baseline
		beforeVersions(&cfg)
		return cfg
	}())
	rep, err := n.call(testCtx(t), old.Addr(), nodewire.EncodeRequest(&nodewire.Info{ID: "n0", Version: "v9.9.9-test"}), nil)
	require.NoError(t, err)
	require.Equal(t, nodewire.CodeBadRequest, rep.Code, "the older build refuses a version")
	info, err := n.hooks().AskInfo(testCtx(t), old.Addr())
	require.NoError(t, err, "asked again without the version")
	assert.Equal(t, &nodewire.Info{ID: "old", APIAddr: "http://old.test"}, info)
}

// A refusal crosses the forwarding RPC as its own code, which the asking
// node reads back as ErrMemberTooOld with the leader's message once.
func TestMemberTooOldCrossesTheRPC(t *testing.T) {
	served := fmt.Errorf("%w: install on n2", ErrMemberTooOld)
	rep := errorReplyFor(served)
	assert.Equal(t, nodewire.CodeMemberTooOld, rep.Code)
	got, err := nodewire.DecodeReply(rep.AppendBinary(nil))
	require.NoError(t, err)
	assert.ErrorIs(t, got.Err(), ErrMemberTooOld)
	assert.Equal(t, served.Error(), got.Err().Error())
}

func errorReplyFor(err error) nodewire.Reply {
	return nodewire.Reply{Code: nodewire.CodeFor(err), Kind: nodewire.KindCommand, Msg: err.Error()}
}

// Non-voters count as much as voters: they apply every entry too.
func TestLeaderRefusesCommandANonVoterCannotRead(t *testing.T) {
	c := newCluster(t, 4, func(cfg *Config) { cfg.levels = newerBuild() })
	c.cfgs[3].levels = olderBuild()
	beforeVersions(&c.cfgs[3]) // nor does it tell its version
	c.stop(3)
	c.restart(3)
	leader := c.leader()
	require.Equal(t, []string{"n0=voter", "n1=voter", "n2=voter", "n3=nonvoter"}, raftServers(leader))
	require.Eventually(t, func() bool {
		for _, id := range []string{"n0", "n1", "n2"} {
			if level, _ := leader.hooks().MemberLevel(id, nil); level != 2 {
				return false
			}
		}
		return true
	}, patience, 10*time.Millisecond, "the leader learns the newer voters' levels")
	_, err := leader.AcquireAll(testCtx(t), acquireAllReq("x", "y"))
	require.ErrorIs(t, err, ErrMemberTooOld)
	assert.Contains(t, err.Error(), "non-voter n3")
	assert.Contains(t, err.Error(), "its version is not known here")
	// A member that told neither its version nor its level is shown so,
	// and marked: it counts as reading the baseline.
	assert.Equal(t, "n3  level 0 BELOW", memberBuilds(leader)[3])
}

// baselineBuild is the levels of today's released build: every command at
// the baseline, and snapshots only up to version 5 (no remembered
// releases).
func baselineBuild() *commandLevels {
	return &commandLevels{max: fsm.BaselineLevel, levelOf: fsm.CommandLevel}
}

// snapshotVersionOf takes a snapshot on n (something must have been
// applied since its last) and returns the fsm snapshot version it wrote.
func snapshotVersionOf(t *testing.T, n *Node) byte {
	t.Helper()
	f := n.raft.Snapshot()
	require.NoError(t, f.Error(), n.ID())
	_, rc, err := f.Open()
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.Greater(t, len(b), 9, "a snapshot is a header and the machine's state")
	return b[9]
}

// machineSnapshotV5 is the machine's state in snapshot version 5.
func machineSnapshotV5(t *testing.T, s *stateMachine) []byte {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.m.SnapshotIn(5)
	require.NoError(t, err)
	return b
}

// waitLevels waits until every node knows each member's level as want
// says (0 for one that tells none, which counts as the baseline).
func waitLevels(t *testing.T, nodes []*Node, want map[string]int) {
	t.Helper()
	for _, n := range nodes {
		require.Eventually(t, func() bool {
			for id, level := range want {
				if got, _ := n.hooks().MemberBuild(id, n.hooks().GossipByID()); got != level {
					return false
				}
			}
			return true
		}, patience, 10*time.Millisecond, "%s does not know every member's level", n.ID())
	}
}

// Every node, leader and followers alike, writes its snapshots in the
// version every member reads: version 5 while one member runs a build
// that reads no later (a rolling upgrade), version 6 once all read it.
func TestSnapshotVersionFollowsMemberLevels(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.cfgs[2].levels = baselineBuild()
	c.cfgs[2].version = new("v0.9.0-old")
	c.stop(2)
	c.restart(2)
	leader := c.leader()
	waitLevels(t, c.nodes, map[string]int{"n0": fsm.ReleasesLevel, "n1": fsm.ReleasesLevel, "n2": fsm.BaselineLevel})

	snapshotAll := func() map[string]byte {
		l := c.leader()
		owner, _ := acquire(t, l, "k", time.Minute)
		ok, err := l.Release(testCtx(t), "k", owner) // remembered: the state has a release record
		require.NoError(t, err)
		require.True(t, ok)
		versions := map[string]byte{}
		for _, n := range c.nodes {
			waitApplied(t, n, l)
			versions[n.ID()] = snapshotVersionOf(t, n)
		}
		return versions
	}
	assert.Equal(t, map[string]byte{"n0": 5, "n1": 5, "n2": 5}, snapshotAll(), "with n2 reading level 1 (leader %s)", leader.ID())

	// n2 upgraded: once every node knows it, version 6 everywhere.
	c.stop(2)
	c.cfgs[2].levels, c.cfgs[2].version = nil, nil
	c.restart(2)
	waitLevels(t, c.nodes, map[string]int{"n0": fsm.ReleasesLevel, "n1": fsm.ReleasesLevel, "n2": fsm.ReleasesLevel})
	assert.Equal(t, map[string]byte{"n0": 6, "n1": 6, "n2": 6}, snapshotAll())
}

// A member of today's released build (level 1) that lags so far that the
// leader sends it a snapshot restores it and goes on: the leader wrote
// version 5, though its state remembers releases. The others still
// answer a repeated release as they did.
func TestOlderMemberRestoresLeaderSnapshot(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.TrailingLogs = 8
		cfg.WALSegmentSize = 4 << 10 // so that compaction drops the entries the lagging member lacks
	})
	c.cfgs[2].levels = baselineBuild()
	c.stop(2)
	c.restart(2)
	l := c.leader()
	require.NotEqual(t, "n2", l.ID(), "the older member must lag, not lead")
	// As it would after a restart on that build: told, not just unknown.
	waitLevels(t, []*Node{l}, map[string]int{"n2": fsm.BaselineLevel})
	lastIndex := c.nodes[2].raft.LastIndex()
	c.stop(2)

	ctx := testCtx(t)
	var released lock.Owner
	for i := range 50 {
		key := fmt.Sprintf("k%d", i)
		owner, _ := acquire(t, l, key, time.Hour)
		if i%10 == 0 {
			continue // held
		}
		ok, err := l.Release(ctx, key, owner)
		require.NoError(t, err)
		require.True(t, ok)
		released = owner
	}
	require.NoError(t, l.raft.Snapshot().Error())
	first, err := l.store.FirstIndex()
	require.NoError(t, err)
	require.Greater(t, first, lastIndex+1, "the leader no longer has the entries the lagging member needs")

	old := c.restart(2)
	require.Eventually(t, func() bool { return old.Stats().Restores > 0 || old.Err() != nil }, patience, 5*time.Millisecond,
		"the older member neither installed the leader's snapshot nor halted")
	require.NoError(t, old.Err(), "not halted")
	require.Positive(t, old.Stats().Restores, "the older member installed the leader's snapshot")
	waitApplied(t, old, l)
	assert.Equal(t, l.Stats().LastToken, old.Stats().LastToken)
	info, err := old.InspectStale("k0")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, 5, old.Stats().Keys)
	assert.Equal(t, machineSnapshotV5(t, l.sm), machineSnapshotV5(t, old.sm), "the leader's state, but for the releases it remembers")

	// It goes on applying; the leader still remembers the release.
	acquire(t, l, "after", time.Minute)
	waitApplied(t, old, l)
	require.NoError(t, old.Err())
	ok, err := l.Release(ctx, "k49", released)
	require.NoError(t, err)
	assert.True(t, ok, "a repeated release is still answered released")
}

// The level seam plays an older build's snapshot reading too: an adapter
// of level 1 halts at version 6, as that build would, and restores version
// 5; an adapter not yet told the members' levels writes version 5.
func TestStateMachineOfLevelOneReadsSnapshotVersion5(t *testing.T) {
	newer := newStateMachine(testLogger("sm"), nil)
	b, err := fsm.AppendBatch(nil, []fsm.Command{{Op: fsm.OpAcquire, Stamp: time.Second, Key: "k", Owner: fsm.Owner(lock.NewOwner()), TTL: time.Minute}})
	require.NoError(t, err)
	newer.ApplyBatch([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: b}})
	write := func() []byte {
		s, err := newer.Snapshot()
		require.NoError(t, err)
		var buf bytes.Buffer
		require.NoError(t, s.(*snapshot).write(&buf))
		return buf.Bytes()
	}
	v5 := write()
	assert.Equal(t, byte(5), v5[9], "not told: the version every build reads")
	six := func() int { return 6 }
	newer.writeVersion.Store(&six)
	v6 := write()
	assert.Equal(t, byte(6), v6[9])

	older := newStateMachine(testLogger("sm"), nil)
	older.levels = *baselineBuild()
	require.NoError(t, older.Restore(nopCloser{bytes.NewReader(v5)}))
	assert.Equal(t, uint64(1), older.counts().lastToken)
	err = older.Restore(nopCloser{bytes.NewReader(v6)})
	var halt *HaltError
	require.ErrorAs(t, err, &halt)
	assert.ErrorIs(t, err, fsm.ErrBadVersion)
	assert.Contains(t, err.Error(), "reads command level 1")
	assert.Contains(t, err.Error(), "needs command level 2")
}
