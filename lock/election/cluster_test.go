package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/clustertest"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/election"
)

// Three campaigners, each on its own node of one cluster. The leader is cut
// off from its node, so its keep-alive fails: its lease runs out in the
// cluster, which hands the name to the campaigner queued first, with a
// higher term; that one's resignation hands it to the last.
func TestLeadershipMovesAcrossClusterNodes(t *testing.T) {
	ctx := testCtx(t)
	c := clustertest.Start(t, 3, nil)
	nodes := c.Nodes
	const ttl = time.Second // generous for a keep-alive through raft under -race; the failover takes about this long
	var stores []*replicaStore
	var elections []*election.Election
	for i, n := range nodes {
		stores = append(stores, replica(n, "scheduler"))
		elections = append(elections, election.New(lock.New(stores[i]), "scheduler", election.TTL(ttl)))
	}

	// An observer on another node sees each leader in turn, pushed by the
	// watch of its own node's state (no polling).
	octx, stopObserving := context.WithCancel(ctx)
	seen := observe(octx, election.New(lock.New(nodes[2]), "scheduler"))

	first, err := elections[0].Campaign(ctx, "n0")
	require.NoError(t, err)
	second := campaign(ctx, elections[1], "n1")
	waitForCampaigners(t, nodes[0], elections[0], 1)
	third := campaign(ctx, elections[2], "n2")
	waitForCampaigners(t, nodes[0], elections[0], 2)

	stores[0].down.Store(true) // n0's campaigner is cut off: its lease is not extended
	receive(t, first.Done(), "the first leader to learn that it lost the leadership")
	assert.ErrorIs(t, context.Cause(first.Context()), lock.ErrNotHeld)

	res := receive(t, second, "the campaigner queued first to be elected")
	require.NoError(t, res.err)
	assert.Greater(t, res.lead.Term(), first.Term(), "a new term")
	got, err := elections[2].Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, res.lead.Term(), got.Term, "seen from another node")
	assert.Equal(t, "n1", got.Value)
	select {
	case r := <-third:
		require.FailNow(t, "two leaders at once", "the third was elected too: %v", r.err)
	default:
	}

	require.NoError(t, res.lead.Resign(ctx))
	last := receive(t, third, "the last campaigner to be elected")
	require.NoError(t, last.err)
	assert.Greater(t, last.lead.Term(), res.lead.Term())
	assert.Equal(t, "n2", last.lead.Value())

	assert.NoError(t, first.Resign(ctx), "resigning a lost leadership is not an error")
	require.NoError(t, last.lead.Resign(ctx))

	want := []election.Leader{{}, {Term: first.Term(), Value: "n0"}, {Term: res.lead.Term(), Value: "n1"}, {Term: last.lead.Term(), Value: "n2"}, {}}
	var observed []election.Leader
	for len(observed) < len(want) {
		ld := nextLeader(t, seen, "the next leadership")
		ld.Remaining = 0
		observed = append(observed, ld)
	}
	assert.Equal(t, want, observed, "every leadership, in order, each once")
	stopObserving()
}
