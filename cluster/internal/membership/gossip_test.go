package membership

import (
	"fmt"
	"net"
	"testing"

	"github.com/hashicorp/serf/serf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A node promises one proposer at a time; only that proposer's release of
// the claim promised takes the promise back, and a proposer that
// bootstrapped keeps its own.
func TestBootstrapPromiseIsExclusive(t *testing.T) {
	var e expectState
	require.True(t, e.promise("a", 1))
	assert.True(t, e.promise("a", 2), "the same proposer's next claim")
	assert.False(t, e.promise("b", 3), "another proposer")
	e.release("b", 3)
	assert.Equal(t, "a", e.promised(), "only the proposer releases its promise")
	e.release("a", 1)
	assert.Equal(t, "a", e.promised(), "a late release of an older claim releases nothing")
	e.release("a", 2)
	assert.True(t, e.promise("b", 4))
	e.mu.Lock()
	e.done = true
	e.mu.Unlock()
	e.release("b", 4)
	assert.Equal(t, "b", e.promised(), "kept once bootstrapped")
}

// Retry-join resolves names, and skips this node's own address.
func TestRetryJoinResolvesNamesAndSkipsItself(t *testing.T) {
	n := startGossip(t, Config{NodeID: "n0"}, bootstrapped)
	addr := n.GossipAddr()
	// Each entry: a name with a port, an IP without one (this node's
	// gossip port is the default: that is this node, skipped), and
	// this node's own address.
	n.cfg.RetryJoin = []string{"localhost:7999", "127.0.0.1", addr}
	_, port, err := SplitGossipAddr(addr)
	require.NoError(t, err)
	addrs, errs := n.resolveRetryJoin(t.Context())
	assert.Empty(t, errs)
	assert.Contains(t, addrs, "127.0.0.1:7999", "localhost resolved")
	assert.NotContains(t, addrs, addr, "this node skipped")
	assert.NotContains(t, addrs, fmt.Sprintf("127.0.0.1:%d", port))
}

// A gossip member whose name is not a valid node ID is refused when it
// merges or announces itself alive, as a join with it would be.
func TestGossipRefusesBadNodeID(t *testing.T) {
	n := startGossip(t, Config{NodeID: "n0"}, bootstrapped)
	d := &gossipDelegate{mgr: n, g: n.gossip}
	member := func(name string) *serf.Member {
		return &serf.Member{Name: name, Addr: net.IPv4(127, 0, 0, 1), Port: 1, Tags: map[string]string{tagCluster: n.gossip.cluster}, Status: serf.StatusAlive}
	}
	err := d.NotifyMerge([]*serf.Member{member("a b/../x")})
	assert.ErrorContains(t, err, `member "a b/../x"`)
	assert.ErrorContains(t, err, "a node ID holds only letters")
	assert.NoError(t, d.NotifyMerge([]*serf.Member{member("n1")}))
}
