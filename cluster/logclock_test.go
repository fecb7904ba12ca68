package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// manualClock is a Clock moved by hand.
type manualClock struct{ mono time.Duration }

func (c *manualClock) Now() time.Time           { return time.Unix(0, 0).Add(c.mono) }
func (c *manualClock) Monotonic() time.Duration { return c.mono }

func TestLogClock(t *testing.T) {
	mc := &manualClock{mono: 7 * time.Hour} // any origin
	lc := newLogClock(mc, 42*time.Second)
	assert.Equal(t, 42*time.Second, lc.now(), "starts at the machine's log time")
	mc.mono += 1500 * time.Millisecond
	assert.Equal(t, 43500*time.Millisecond, lc.now(), "advances with monotonic time")
	mc.mono -= time.Hour
	assert.Equal(t, 43500*time.Millisecond, lc.now(), "a clock running back makes it stand still")
	assert.Equal(t, 500*time.Millisecond, lc.until(44*time.Second))
}

// Wall clocks that step, and a new leader whose clocks read hours apart from
// the old one's, neither end a lease before its holder's deadline nor shorten
// what a read reports; and the lease still ends soon after that deadline. A
// node that stamped wall time (or raw monotonic readings) fails this test.
func TestClockStepsNeverShortenLeases(t *testing.T) {
	clocks := map[string]*fakeClock{
		"n0": {},
		"n1": {monoOrigin: 5 * time.Hour},  // other hosts count monotonic
		"n2": {monoOrigin: -3 * time.Hour}, // time from other origins
	}
	clocks["n1"].step(time.Hour) // and their wall clocks disagree
	clocks["n2"].step(-time.Hour)
	c := newCluster(t, 3, func(cfg *Config) { cfg.Clock = clocks[cfg.NodeID] })
	ctx := testCtx(t)
	l, f := c.leader(), c.follower()

	const ttl = 3 * time.Second
	sent := time.Now()
	_, lease := acquire(t, f, "k", ttl)
	deadline := sent.Add(lease.Remaining)

	check := func(when string) {
		t.Helper()
		for _, n := range c.nodes {
			if n == nil {
				continue
			}
			info, err := n.Inspect(ctx, "k")
			answered := time.Now()
			require.NoError(t, err)
			if answered.Before(deadline) {
				assert.True(t, info.Locked, "%s: %s: the lease ended before its holder's deadline", when, n.ID())
			}
			// The leader answered before we got the answer, so by its
			// figure the lease ends no later than answered+Remaining.
			if info.Locked {
				assert.False(t, answered.Add(info.Remaining).Before(deadline),
					"%s: %s: the lease ends %v before its holder's deadline", when, n.ID(), deadline.Sub(answered.Add(info.Remaining)))
			}
		}
	}
	clocks[l.ID()].step(time.Hour)
	check("leader's wall clock stepped 1h forward")
	clocks[l.ID()].step(-2 * time.Hour)
	check("leader's wall clock stepped 2h back")
	c.stop(c.index(l))
	c.waitLeader()
	check("a new leader with other clocks")

	require.Eventually(t, func() bool {
		info, err := f.Inspect(ctx, "k")
		return err == nil && !info.Locked
	}, time.Until(deadline)+patience, 10*time.Millisecond, "the lease ends after all")
	assert.False(t, time.Now().Before(deadline))
	_, err := f.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: ttl})
	assert.NoError(t, err)
}

// While a lease is pending, the leader commits its clock at least every
// clockSync, so a new leader without a measurement of its own (which
// starts from the last committed stamp) adds little to the lease; with
// nothing pending it stays idle.
func TestLeaderCommitsItsClockWhileLeasesPending(t *testing.T) {
	n := newCluster(t, 1, nil).nodes[0]
	owner, _ := acquire(t, n, "k", time.Minute)
	start := n.sm.now()
	require.Eventually(t, func() bool { return n.sm.now() >= start+clockSync }, patience, 10*time.Millisecond,
		"the committed log time follows the leader's clock")

	ok, err := n.Release(testCtx(t), "k", owner)
	require.NoError(t, err)
	require.True(t, ok)
	applied, changed := n.sm.appliedIndex()
	select {
	case <-changed:
		t.Fatalf("entry %d applied with nothing pending", applied+1)
	case <-time.After(clockSync + 200*time.Millisecond):
	}
}
