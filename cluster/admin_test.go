package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// A force-release whose outcome is unknown (its leader stepped down after
// proposing it) is not sent again, unlike the owner's commands: a repeat
// after the first took effect would end the lease of the waiter it handed
// the key to. The caller hears at once that the outcome is unknown, long
// before its context ends.
func TestForceReleaseIsNotRetriedAfterAnUnknownOutcome(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		// Neither ends the call here: retries would go on until ctx.
		cfg.LeaderWait, cfg.RequestTimeout = time.Minute, time.Minute
	})
	l := c.leader()
	acquire(t, l, "stuck", time.Minute)
	for i, n := range c.nodes {
		if n != l {
			c.stop(i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	_, err := l.ForceRelease(ctx, "stuck")
	require.Error(t, err)
	assert.ErrorIs(t, err, lock.ErrUnknownOutcome)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "given up at the first unknown outcome, not retried until ctx ended")
	assert.ErrorContains(t, err, `force-release of "stuck"`)
	assert.Less(t, time.Since(start), 10*time.Second)
}
