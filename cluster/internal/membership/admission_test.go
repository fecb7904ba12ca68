package membership

import (
	"maps"
	"strings"
	"testing"

	autopilot "github.com/hashicorp/raft-autopilot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/internal/nodestatus"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// The one admission check, rule by rule.
func TestCheckAdmission(t *testing.T) {
	const ours, theirs = "c-ours", "c-theirs"
	alive := func(id, addr string, s raft.ServerSuffrage) KnownMember {
		return KnownMember{MemberView: MemberView{ID: raft.ServerID(id), Addr: raft.ServerAddress(addr), Status: autopilot.NodeAlive},
			InConfig: true, Suffrage: s, ConfigAddr: raft.ServerAddress(addr)}
	}
	failed := func(m KnownMember) KnownMember {
		m.Status, m.HeartbeatsFailed = autopilot.NodeFailed, true
		return m
	}
	members := []KnownMember{
		alive("leader", "10.0.0.1:7000", raft.Voter),
		alive("live", "10.0.0.2:7000", raft.Voter),
		failed(alive("dead", "10.0.0.3:7000", raft.Voter)),
		failed(alive("deadnv", "10.0.0.4:7000", raft.Nonvoter)),
		// Gossip shows it at a new address; raft's heartbeats to the old
		// one still succeed.
		{MemberView: MemberView{ID: "moving", Addr: "10.0.0.9:7000", Status: autopilot.NodeAlive}, InConfig: true, Suffrage: raft.Voter, ConfigAddr: "10.0.0.5:7000"},
		// Not in the configuration (removed), still alive in gossip.
		{MemberView: MemberView{ID: "removed", Addr: "10.0.0.6:7000", Status: autopilot.NodeAlive}},
		{MemberView: MemberView{ID: "left", Addr: "10.0.0.7:7000", Status: autopilot.NodeLeft}},
	}
	for _, tc := range []struct {
		name    string
		ours    string
		c       Candidate
		want    error // nil: admitted
		naming  string
		replace bool
	}{
		{name: "another cluster's data dir", ours: ours, c: Candidate{ID: "y", Addr: "10.1.0.1:7000", ClusterID: theirs}, want: nodewire.ErrWrongCluster, naming: theirs},
		{name: "another cluster's data dir, fresh", ours: ours, c: Candidate{ID: "y", Addr: "10.1.0.1:7000", ClusterID: theirs, Fresh: true}, want: nodewire.ErrWrongCluster},
		{name: "another cluster's data dir, under a member's ID", ours: ours, c: Candidate{ID: "dead", Addr: "10.0.0.3:7000", ClusterID: theirs}, want: nodewire.ErrWrongCluster},
		{name: "this cluster's", ours: ours, c: Candidate{ID: "new", Addr: "10.1.0.1:7000", ClusterID: ours}},
		{name: "a data dir of no cluster yet", ours: ours, c: Candidate{ID: "new", Addr: "10.1.0.1:7000", Fresh: true}},
		{name: "a cluster without an ID checks node IDs only", c: Candidate{ID: "new", Addr: "10.1.0.1:7000", ClusterID: theirs}},
		{name: "a gossip member that tells no cluster", ours: ours, c: Candidate{ID: "old", Addr: "10.1.0.1:7000", Untold: true}, want: errClusterUntold},
		{name: "a member that tells no cluster moves", ours: ours, c: Candidate{ID: "dead", Addr: "10.1.0.1:7000", Untold: true}},
		{name: "a live member's ID, empty data dir", ours: ours, c: Candidate{ID: "live", Addr: "10.1.0.1:7000", Fresh: true}, want: ErrNodeIDInUse, naming: "10.0.0.2:7000"},
		{name: "a copy of a live member's data dir", ours: ours, c: Candidate{ID: "live", Addr: "10.1.0.1:7000", ClusterID: ours}, want: ErrNodeIDInUse, naming: "10.0.0.2:7000"},
		{name: "the leader's ID", ours: ours, c: Candidate{ID: "leader", Addr: "10.1.0.1:7000", Fresh: true}, want: ErrNodeIDInUse, naming: "10.0.0.1:7000"},
		{name: "gossip shows a move that raft does not see yet", ours: ours, c: Candidate{ID: "moving", Addr: "10.0.0.9:7000", ClusterID: ours}, want: ErrNodeIDInUse, naming: "10.0.0.5:7000"},
		{name: "a removed member alive elsewhere", ours: ours, c: Candidate{ID: "removed", Addr: "10.1.0.1:7000", Fresh: true}, want: ErrNodeIDInUse, naming: "10.0.0.6:7000"},
		{name: "a removed member itself", ours: ours, c: Candidate{ID: "removed", Addr: "10.0.0.6:7000", ClusterID: ours}},
		{name: "a member that left", ours: ours, c: Candidate{ID: "left", Addr: "10.1.0.1:7000", Fresh: true}},
		{name: "a dead voter, back at a new address", ours: ours, c: Candidate{ID: "dead", Addr: "10.1.0.1:7000", ClusterID: ours}},
		{name: "a dead voter, back with an empty data dir", ours: ours, c: Candidate{ID: "dead", Addr: "10.1.0.1:7000", Fresh: true}, replace: true},
		{name: "a live voter restarted with an empty data dir at its address", ours: ours, c: Candidate{ID: "live", Addr: "10.0.0.2:7000", Fresh: true}, replace: true},
		{name: "a dead non-voter, back with an empty data dir", ours: ours, c: Candidate{ID: "deadnv", Addr: "10.1.0.1:7000", Fresh: true}},
		{name: "a member confirming its membership", ours: ours, c: Candidate{ID: "live", Addr: "10.0.0.2:7000", ClusterID: ours}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkAdmission(tc.ours, members, tc.c)
			if tc.want == nil {
				require.NoError(t, err)
				assert.Equal(t, tc.replace, got.removeFirst, "remove the old entry first")
				return
			}
			assert.ErrorIs(t, err, tc.want)
			if err != nil {
				assert.Contains(t, err.Error(), string(tc.c.ID))
				assert.Contains(t, err.Error(), tc.naming)
			}
		})
	}
}

// Gossip tags must fit memberlist's 512 bytes (serf refuses more): with the
// cluster ID among them, the largest tags a node sets still fit, with a
// 200-byte cluster name (the most Config allows) and DNS-named addresses.
func TestGossipTagsWithClusterIDFit(t *testing.T) {
	host := strings.Repeat("h", 40) + ".raftlock.default.svc.cluster.local"
	n := startGossip(t, Config{NodeID: "n0", ClusterName: strings.Repeat("c", 200), APIAddr: "https://" + host + ":8443"}, bootstrapped)
	require.Len(t, n.ident.ClusterID(), 32)
	n.gossip.tagsMu.Lock()
	tags := maps.Clone(n.gossip.tags)
	n.gossip.tagsMu.Unlock()
	assert.Equal(t, n.ident.ClusterID(), tags[tagClusterID])
	tags[tagRaft] = host + ":7400"
	tags[tagRole] = nodestatus.SuffrageNonvoter
	tags[tagLeaving] = "1"
	tags[tagExpect] = "9"
	tags[tagVersion] = "v1.23.456-rc.7+incompatible"
	assert.NoError(t, n.gossip.serf.SetTags(tags))
}
