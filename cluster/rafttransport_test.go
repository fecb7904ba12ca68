package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"

	"github.com/raftlock/raftlock/lock"
)

// A member stopped (Close) while the leader replicates to it under load
// logs no warning or error about its own stop, every time: raft's
// transport must not see its connections closed under an RPC it was
// serving as a failure.
func TestStoppedFollowerLogsNoProblem(t *testing.T) {
	const stops = 20
	logs := make([]*lockedBuffer, 3)
	i := 0
	c := newCluster(t, 3, func(cfg *Config) {
		logs[i] = &lockedBuffer{}
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.NodeID, Output: logs[i], Level: hclog.Info})
		i++
		// Timings that a loaded machine does not turn into elections,
		// whose lines are not the stop's.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l := c.nodes[0]
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				l.Acquire(ctx, lock.AcquireRequest{Key: fmt.Sprintf("w%d-%d", w, i%50), Owner: lock.NewOwner(), TTL: time.Millisecond})
				cancel()
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })

	for s := range stops {
		k := 1 + s%2
		if c.nodes[k].IsLeader() {
			k = 3 - k
		}
		from := len(logs[k].String())
		c.stop(k)
		for _, line := range strings.Split(logs[k].String()[from:], "\n") {
			if strings.Contains(line, "[ERROR]") {
				assert.Fail(t, "a stop logged an error", "stop %d of n%d: %s", s, k, line)
			}
		}
		c.restart(k)
		c.waitLeader()
	}
}
