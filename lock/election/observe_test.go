package election_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/election"
)

type observed struct {
	ld  election.Leader
	err error
}

// observe runs Observe in a goroutine until ctx ends; every yield arrives
// on the channel, which is closed when the loop ends.
func observe(ctx context.Context, e *election.Election) <-chan observed {
	out := make(chan observed, 64)
	go func() {
		defer close(out)
		for ld, err := range e.Observe(ctx) {
			out <- observed{ld, err}
		}
	}()
	return out
}

func nextLeader(t *testing.T, ch <-chan observed, what string) election.Leader {
	t.Helper()
	o := receive(t, ch, what)
	require.NoError(t, o.err, what)
	return o.ld
}

// Observe follows the leadership through its changes: nobody, a leader, a
// hand-over to the next campaigner, nobody again; and ends with its ctx.
func TestObserveFollowsTheLeadership(t *testing.T) {
	ctx := testCtx(t)
	shared := newStore(t)
	a := election.New(lock.New(shared), "scheduler")
	b := election.New(lock.New(shared), "scheduler")
	octx, stop := context.WithCancel(ctx)
	seen := observe(octx, election.New(lock.New(shared), "scheduler"))

	assert.Equal(t, election.Leader{}, nextLeader(t, seen, "nobody leads yet"))
	leadA, err := a.Campaign(ctx, "a:8080")
	require.NoError(t, err)
	got := nextLeader(t, seen, "a's election")
	assert.Equal(t, leadA.Term(), got.Term)
	assert.Equal(t, "a:8080", got.Value)

	bWon := campaign(ctx, b, "b:8080")
	waitForCampaigners(t, shared, b, 1)
	require.NoError(t, leadA.Resign(ctx))
	got = nextLeader(t, seen, "the hand-over to b")
	leadB := receive(t, bWon, "b's election")
	require.NoError(t, leadB.err)
	assert.Equal(t, leadB.lead.Term(), got.Term, "the hand-over is one change: no gap with nobody leading")
	assert.Equal(t, "b:8080", got.Value)

	require.NoError(t, leadB.lead.Resign(ctx))
	assert.Equal(t, election.Leader{}, nextLeader(t, seen, "nobody leads"))

	stop()
	last := receive(t, seen, "the end of the observation")
	assert.ErrorIs(t, last.err, context.Canceled)
	_, open := <-seen
	assert.False(t, open, "Observe ends with its ctx")
}

// watchlessStore hides the store's watches: Observe falls back to polling.
type watchlessStore struct{ lock.Store }

func (s watchlessStore) List(ctx context.Context, req lock.ListRequest) ([]lock.LockInfo, error) {
	return s.Store.(lock.Lister).List(ctx, req)
}

func TestObservePollsAStoreThatCannotWatch(t *testing.T) {
	ctx := testCtx(t)
	shared := newStore(t)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := observe(octx, election.New(lock.New(watchlessStore{shared}), "scheduler"))
	assert.Equal(t, election.Leader{}, nextLeader(t, seen, "nobody leads yet"))
	lead, err := election.New(lock.New(shared), "scheduler").Campaign(ctx, "a")
	require.NoError(t, err)
	got := nextLeader(t, seen, "the election, by polling")
	assert.Equal(t, lead.Term(), got.Term)
	assert.Equal(t, "a", got.Value)
}

func TestObserveRefusesAnInvalidElection(t *testing.T) {
	for ld, err := range election.New(nil, "x").Observe(context.Background()) {
		assert.ErrorIs(t, err, election.ErrInvalid)
		assert.Equal(t, election.Leader{}, ld)
	}
}
