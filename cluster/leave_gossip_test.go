package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// A gossiping member asked to leave, the leader included, under traffic,
// leaves and comes back as a voter when started again on its data dir with
// the same config, round after round; and it never waits on a gossip
// broadcast that cannot go out. It used to: the member's role changes when
// it is removed, and updating its gossip tags once gossip had left waited
// serf's broadcast timeout (5 s) for nothing, up to three times, so that a
// leave took 10 to 15 s instead of under 2. Nor does the leader add a
// leaving member straight back because its gossip still shows it alive.
func TestLeaveAndRejoinWithGossipUnderTraffic(t *testing.T) {
	var logs *lockedBuffer
	nodes, cfgs := startGossipGroup(t, 3, func(addrs []string) []Config {
		logs = &lockedBuffer{} // only this attempt's nodes
		cfgs := expectConfigs(t, addrs, 3)
		for i := range cfgs {
			cfgs[i].Logger = capturedLogger(cfgs[i].NodeID, logs)
		}
		return cfgs
	})
	for i := range cfgs {
		// Started again at the same addresses, raft's and gossip's (another
		// test could take one in the moment between; nothing here can
		// avoid that).
		cfgs[i].BindAddr = nodes[i].Addr()
	}
	all := []string{"n0=voter", "n1=voter", "n2=voter"}
	waitOneCluster(t, nodes, all)

	var mu sync.Mutex
	live := func() []*Node {
		mu.Lock()
		defer mu.Unlock()
		var out []*Node
		for _, n := range nodes {
			if n != nil {
				out = append(out, n)
			}
		}
		return out
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				ns := live()
				n := ns[i%len(ns)]
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				owner := lock.NewOwner()
				key := fmt.Sprintf("w%d", w)
				if _, err := n.Acquire(cctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute}); err == nil {
					n.Release(cctx, key, owner)
				}
				cancel()
			}
		}()
	}
	t.Cleanup(func() { stop(); wg.Wait() })

	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 6 {
		i := rng.IntN(3)
		if round%2 == 1 { // every other round, the leader
			for j, n := range nodes {
				if n.IsLeader() {
					i = j
				}
			}
		}
		start, logged := time.Now(), len(logs.String())
		lctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := nodes[i].Leave(lctx)
		cancel()
		t.Logf("round %d: %s (leader %v) left in %v: %v", round, cfgs[i].NodeID, round%2 == 1, time.Since(start), err)
		require.NoError(t, err, "round %d: %s leaves", round, cfgs[i].NodeID)
		readded := regexp.MustCompile(`reconciler: add-[^\n]* id=` + cfgs[i].NodeID + ` [^\n]*`)
		assert.Empty(t, readded.FindAllString(logs.String()[logged:], -1),
			"round %d: the leader added %s back while it was leaving", round, cfgs[i].NodeID)
		mu.Lock()
		nodes[i] = nil
		mu.Unlock()
		n := startNode(t, cfgs[i])
		mu.Lock()
		nodes[i] = n
		mu.Unlock()
		waitOneCluster(t, live(), all)
	}
	assert.False(t, strings.Contains(logs.String(), "timeout waiting for update broadcast"),
		"a node waited on a gossip broadcast after its gossip had left")
}
