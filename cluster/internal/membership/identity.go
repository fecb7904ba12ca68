package membership

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/cluster/nodewire"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// Whose cluster a node belongs to, between members: package cluster's
// identity.go says how members agree on the cluster ID; these are the
// exchanges.

// NewClusterID names a cluster being bootstrapped. A node bootstrapping
// alone draws 128 random bits: no one else has to agree. Nodes bootstrapped
// together (Peers) cannot talk before they agree, so, like etcd's cluster
// ID, theirs is a hash of the initial configuration (IDs and addresses, in
// ID order) that each of them is given: the same Peers give the same ID.
func NewClusterID(servers []raft.Server) (string, error) {
	if len(servers) <= 1 {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("cluster: drawing a cluster ID: %w", err)
		}
		return hex.EncodeToString(b), nil
	}
	sorted := slices.Clone(servers)
	slices.SortFunc(sorted, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	h := sha256.New()
	h.Write([]byte("raftlock cluster\x00"))
	for _, p := range sorted {
		fmt.Fprintf(h, "%s\x00%s\x00", p.ID, p.Address)
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// checkCluster asks the member at addr which node it is and which cluster
// it belongs to before this node asks it to add it (join runs it before
// each join request), and runs the admission check (admission.go) on this
// node as that member's cluster would: so a member of a build that does not
// check (a leader from before the check) cannot absorb this node either. It
// returns what the member told (its cluster ID empty if it does not know
// it; both empty from a member too old to tell), or an error matching
// nodewire.ErrWrongCluster.
func (mgr *Manager) checkCluster(ctx context.Context, addr string) (nodewire.Identity, error) {
	mine := mgr.ident.ClusterID()
	rep, err := mgr.node.Call(ctx, addr, nodewire.EncodeRequest(&nodewire.Identity{ID: mgr.cfg.NodeID, ClusterID: mine}))
	if err != nil {
		return nodewire.Identity{}, err
	}
	them, ok := rep.Answer.(*nodewire.Identity)
	if !ok {
		return nodewire.Identity{}, nil // a member too old to know nodewire.KindIdentity answers bad request
	}
	self := Candidate{ID: raft.ServerID(mgr.cfg.NodeID), Addr: raft.ServerAddress(mgr.cfg.Addr), ClusterID: mine}
	if _, err := checkAdmission(them.ClusterID, nil, self); err != nil {
		return nodewire.Identity{}, fmt.Errorf("%w (member %q at %s told its cluster; this node's data dir is %s, its identity file %s)",
			err, them.ID, addr, mgr.cfg.DataDir, mgr.ident.Path())
	}
	return *them, nil
}

// learnClusterFromServers records the cluster ID that another server of
// this node's raft configuration tells, when the data dir knows none yet
// (join calls it once this node leads). A node learns its cluster ID from
// the member that adds it, which is the leader; so a leader that does not
// know it would leave every member that asks it as ignorant as itself, and
// it asks no one to add it. That leader exists: the voters of a
// BootstrapExpect cluster other than its proposer learn the ID only when
// they ask the leader to add them, and one of them can be elected before
// it asked (the proposer, first leader, stepped down under load). Each
// server is asked at the address the configuration has for it, and
// believed only if it answers under the ID the configuration has there.
func (mgr *Manager) learnClusterFromServers(ctx context.Context) {
	if mgr.ident.ClusterID() != "" {
		return
	}
	f := mgr.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == mgr.cfg.NodeID {
			continue
		}
		them, err := mgr.checkCluster(ctx, string(s.Address))
		if err != nil {
			mgr.log.Debug("asking a server of the configuration for the cluster ID", "id", s.ID, "addr", s.Address, "error", err)
			continue
		}
		if them.ID == string(s.ID) && them.ClusterID != "" {
			mgr.joinedCluster(them.ClusterID)
			return
		}
	}
}

// joinedCluster records the cluster of the member that added this node (or
// of a server of its configuration: learnClusterFromServers), if the data
// dir did not know its cluster yet.
func (mgr *Manager) joinedCluster(clusterID string) {
	learned, err := mgr.ident.LearnClusterID(clusterID)
	switch {
	case err != nil:
		mgr.log.Warn("could not record the cluster ID in the data dir; it is learned again at the next join", "cluster", clusterID, "error", err,
			"what_to_do", "make the data dir writable by this user")
	case learned:
		mgr.log.Info("recorded the cluster ID in the data dir", "cluster", clusterID)
		if mgr.gossip != nil {
			mgr.setGossipTag(tagClusterID, clusterIDTag(clusterID))
		}
	}
}

// IdentityReply answers nodewire.KindIdentity: any member (leader or not) tells its
// node ID and cluster ID. A node of another cluster asking is about to be
// refused by its own side (checkCluster); this side runs the same check and
// logs it, so that the operator of either cluster sees why the node is
// not added.
func (mgr *Manager) IdentityReply(req *nodewire.Identity) *nodewire.Identity {
	mine := mgr.ident.ClusterID()
	asking := Candidate{ID: raft.ServerID(req.ID), ClusterID: req.ClusterID}
	if _, err := checkAdmission(mine, nil, asking); err != nil {
		mgr.refusals.log(mgr.log, hclog.Error, "wrong-cluster:"+req.ID, "a node of another cluster asked to join this one; it is refused", "node", req.ID,
			"its_cluster", req.ClusterID, "cluster", mine, "error", err)
	}
	return &nodewire.Identity{ID: mgr.cfg.NodeID, ClusterID: mine}
}
