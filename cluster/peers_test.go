package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every member comes to show every other member's API address, including
// one that joined later and one that restarted with a new address.
func TestMembersLearnEachOthersAPIAddr(t *testing.T) {
	n := 0
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.APIAddr = fmt.Sprintf("http://api-%d.test:7070", n)
		n++
	})
	want := map[string]string{"n0": "http://api-0.test:7070", "n1": "http://api-1.test:7070", "n2": "http://api-2.test:7070"}
	everyNodeShows := func() bool {
		for _, node := range c.nodes {
			if node == nil {
				continue
			}
			got := map[string]string{}
			for _, m := range node.Stats().Members {
				got[m.ID] = m.APIAddr
			}
			if !assert.ObjectsAreEqual(want, got) {
				return false
			}
		}
		return true
	}
	require.Eventually(t, everyNodeShows, patience, 10*time.Millisecond)

	c.stop(2)
	cfg := c.cfgs[2]
	cfg.APIAddr = "https://moved.test:7443"
	c.cfgs[2] = cfg
	c.nodes[2] = startNode(t, cfg)
	want["n2"] = "https://moved.test:7443"
	// The restarted node's first questions tell the others its new address.
	require.Eventually(t, everyNodeShows, patience, 10*time.Millisecond)
}

// A node asked for its info answers whether or not it leads, and says who it is.
func TestInfoIsAnsweredByFollowers(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.APIAddr = "http://" + cfg.NodeID })
	f := c.follower()
	rep, err := c.leader().call(testCtx(t), f.Addr(), nodewire.EncodeRequest(&nodewire.Info{ID: "n-unknown"}), nil)
	require.NoError(t, err)
	assert.Equal(t, nodewire.CodeOK, rep.Code)
	assert.Equal(t, &nodewire.Info{ID: f.ID(), APIAddr: "http://" + f.ID()}, rep.Answer)
}
