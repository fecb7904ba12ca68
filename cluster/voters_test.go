package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	raft "github.com/raftlock/raftlock/internal/raft"
)

// suffrages returns the IDs of the voters and non-voters in n's configuration.
func suffrages(t *testing.T, n *Node) (voters, nonvoters []string) {
	t.Helper()
	f := n.raft.GetConfiguration()
	require.NoError(t, f.Error())
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		} else {
			nonvoters = append(nonvoters, string(s.ID))
		}
	}
	slices.Sort(voters)
	slices.Sort(nonvoters)
	return voters, nonvoters
}

// requireVoters waits until the leader's configuration has exactly these voters and non-voters.
func requireVoters(t *testing.T, c *testCluster, voters, nonvoters []string) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, nv := suffrages(t, c.leader())
		return slices.Equal(v, voters) && slices.Equal(nv, nonvoters)
	}, patience, 5*time.Millisecond, "want voters %v and non-voters %v", voters, nonvoters)
}

func TestMembersBeyondVotersJoinAsNonvoters(t *testing.T) {
	c := newCluster(t, 5, nil) // Voters: 3 by default
	requireVoters(t, c, []string{"n0", "n1", "n2"}, []string{"n3", "n4"})

	// A non-voter serves locks like any node, and sees what voters commit.
	ctx := testCtx(t)
	_, lease := acquire(t, c.nodes[4], "k", time.Minute)
	info, err := c.nodes[3].Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	assert.Equal(t, lease.Token, info.Token)
}

func TestLeavingVoterIsReplacedByNonvoter(t *testing.T) {
	c := newCluster(t, 4, nil)
	requireVoters(t, c, []string{"n0", "n1", "n2"}, []string{"n3"})

	var leaving *Node
	for _, n := range c.nodes[:3] {
		if n != c.leader() {
			leaving = n
			break
		}
	}
	require.NoError(t, leaving.Leave(testCtx(t)))
	c.nodes[c.index(leaving)] = nil

	want := []string{"n0", "n1", "n2", "n3"}
	want = slices.DeleteFunc(want, func(id string) bool { return id == leaving.ID() })
	requireVoters(t, c, want, nil)
}

func TestUnreachableVoterIsReplacedAndComesBackAsNonvoter(t *testing.T) {
	c := newCluster(t, 4, func(cfg *Config) { cfg.DeadVoterTimeout = 300 * time.Millisecond })
	requireVoters(t, c, []string{"n0", "n1", "n2"}, []string{"n3"})

	// Stop a voter that does not lead, without leaving: it is gone, not gone for good.
	var dead int
	for i, n := range c.nodes[:3] {
		if n != c.leader() {
			dead = i
			break
		}
	}
	deadID := c.nodes[dead].ID()
	c.stop(dead)

	want := slices.DeleteFunc([]string{"n0", "n1", "n2", "n3"}, func(id string) bool { return id == deadID })
	requireVoters(t, c, want, []string{deadID})

	// Back again, it stays a non-voter while enough voters stand.
	c.restart(dead)
	c.waitLeader()
	requireVoters(t, c, want, []string{deadID})
	acquire(t, c.nodes[dead], "after", time.Minute) // and it serves locks
}

// A voter that stays away is demoted, then removed; a non-voter that stays
// away is removed. One that returns rejoins (its Join is set) as a non-voter.
func TestUnreachableMembersAreRemovedAfterDeadMemberTimeout(t *testing.T) {
	c := newCluster(t, 5, func(cfg *Config) {
		cfg.DeadVoterTimeout = 300 * time.Millisecond
		cfg.DeadMemberTimeout = 600 * time.Millisecond
	})
	requireVoters(t, c, []string{"n0", "n1", "n2"}, []string{"n3", "n4"})

	var deadVoter int
	for i, n := range c.nodes[:3] {
		if n != c.leader() {
			deadVoter = i
			break
		}
	}
	deadVoterID := c.nodes[deadVoter].ID()
	c.stop(deadVoter)
	c.stop(4)
	want := slices.DeleteFunc([]string{"n0", "n1", "n2", "n3"}, func(id string) bool { return id == deadVoterID })
	requireVoters(t, c, want, nil)

	cfg := c.cfgs[4]
	cfg.Join = []string{c.leader().Addr()} // the node it first joined through may be the dead voter
	c.nodes[4] = startNode(t, cfg)         // with Join set, it asks to be added again
	c.waitLeader()
	requireVoters(t, c, want, []string{"n4"})
	acquire(t, c.nodes[4], "after", time.Minute)
}

func TestVotersMustBeOdd(t *testing.T) {
	for _, v := range []int{-1, 0, 2, 4, 11} {
		cfg := testConfig(t, "n0")
		cfg.Bootstrap = true
		cfg.Voters = v
		err := cfg.Validate()
		assert.ErrorIs(t, err, ErrInvalidConfig, "Voters %d", v)
	}
}
