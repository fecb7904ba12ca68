package once_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/clustertest"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/once"
)

// Three replicas of a job, each with a client on its own node of one cluster:
// each tick runs exactly once. The loops' clock is the fake one; the tick's
// lease (the window, 5 minutes, plus the skew) is counted by the cluster in
// real time, and each tick is a key of its own.
func TestThreeClusterNodesRunEachTickOnce(t *testing.T) {
	c := clustertest.Start(t, 3, nil)
	nodes := c.Nodes
	clock := newFakeClock(base.Add(time.Second))
	r := newRuns()
	replicas(t, len(nodes), func(ctx context.Context, i int) error {
		return once.PerTick(ctx, lock.New(nodes[i]), "report", once.Every(5*time.Minute), func(ctx context.Context, tick once.Tick) error {
			r.add(i, tick)
			return nil
		}, once.WithClock(clock), failOnError(t))
	})

	for k := 1; k <= 3; k++ {
		clock.waitForSleepers(t, len(nodes)) // every replica waits for the next tick
		tick := base.Add(time.Duration(k) * 5 * time.Minute)
		clock.AdvanceTo(tick)
		clock.waitForSleepers(t, len(nodes)) // every replica has tried it
		assert.Len(t, r.of(tick), 1, "tick %v ran on replicas %v", tick, r.of(tick))
	}
	r.mu.Lock()
	ticks := append([]once.Tick(nil), r.ticks...)
	r.mu.Unlock()
	require.Len(t, ticks, 3)
	for i := 1; i < len(ticks); i++ {
		assert.Greater(t, ticks[i].Token, ticks[i-1].Token, "each tick's lock has a higher token")
	}
	for _, tick := range ticks {
		info, err := c.Follower(t).Inspect(t.Context(), tick.Key)
		require.NoError(t, err)
		assert.True(t, info.Locked, "%s is kept until its window ends", tick.Key)
		assert.Equal(t, tick.Token, info.Token)
	}
}
