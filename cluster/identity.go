package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/raftlock/raftlock/cluster/nodewire"
	raft "github.com/raftlock/raftlock/internal/raft"

	"github.com/hashicorp/go-hclog"
)

// Whose data dir: the identity file.
//
// DataDir/identity.json records the node's ID and its cluster's ID, written
// atomically (a temporary file, fsync, rename, fsync of the directory)
// before raft writes anything under that name. New refuses a data dir whose
// file names another node (ErrWrongNode, also ErrInvalidConfig): the
// directory holds that node's log and vote, and a node started on it under
// another name would be replicated to, and counted in commits, as the old
// one. A bootstrap names a new cluster: 128 random bits alone; with Peers,
// which nodes cannot agree on before they talk, a hash of the Peers list
// (IDs and addresses), as etcd derives its cluster ID from its initial
// members, so the same Peers make the same ID. Who may be added to a
// cluster is one check (admission.go), run by the leader on every path that
// adds a node and by the node that asks: a node that joins first asks the
// member it asks to add it for that member's IDs (kindIdentity, which any
// member answers), refuses itself if both know their clusters and they
// differ (ErrWrongCluster; New fails on a fresh data dir, the background
// rejoin of an existing one stops and says why in the log; the member logs
// it too), tells its cluster ID in its join request, and records the
// cluster ID once added; a member that leads before it knows the ID (it
// asks no one to add it) asks the other servers of its configuration
// (learnClusterFromServers). The authority is thus each
// member's own file, equal across a cluster because every member got it at
// bootstrap or from a member of it; it is not replicated in the
// log. A data dir from a version without the file (raft state, no file) is
// not refused: the configured NodeID is adopted and recorded, and the
// cluster ID is learned at the node's next join. A cluster made by such a
// version has no cluster ID: its members are checked by node ID only.

// ErrWrongCluster: the data dir belongs to one cluster and the member
// asked to add the node belongs to another. Joining with a fresh data
// dir, it also matches ErrJoin.
var ErrWrongCluster = nodewire.ErrWrongCluster

// identityError is a refusal worded for people that matches the sentinels
// in is, so that its message need not repeat theirs.
type identityError struct {
	msg string
	is  []error
}

func (e *identityError) Error() string { return e.msg }

func (e *identityError) Is(target error) bool { return slices.Contains(e.is, target) }

// newClusterID names a cluster being bootstrapped. A node bootstrapping
// alone draws 128 random bits: no one else has to agree. Nodes bootstrapped
// together (Peers) cannot talk before they agree, so, like etcd's cluster
// ID, theirs is a hash of the initial configuration (IDs and addresses, in
// ID order) that each of them is given: the same Peers give the same ID.
func newClusterID(peers []Peer) (string, error) {
	if len(peers) <= 1 {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("cluster: drawing a cluster ID: %w", err)
		}
		return hex.EncodeToString(b), nil
	}
	sorted := slices.Clone(peers)
	slices.SortFunc(sorted, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	h := sha256.New()
	h.Write([]byte("raftlock cluster\x00"))
	for _, p := range sorted {
		fmt.Fprintf(h, "%s\x00%s\x00", p.ID, p.Addr)
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
// ErrWrongCluster.
func (n *Node) checkCluster(ctx context.Context, addr string) (nodewire.Identity, error) {
	mine := n.ident.ClusterID()
	rep, err := n.call(ctx, addr, nodewire.EncodeRequest(&nodewire.Identity{ID: n.cfg.NodeID, ClusterID: mine}))
	if err != nil {
		return nodewire.Identity{}, err
	}
	them, ok := rep.Answer.(*nodewire.Identity)
	if !ok {
		return nodewire.Identity{}, nil // a member too old to know kindIdentity answers bad request
	}
	self := candidate{ID: raft.ServerID(n.cfg.NodeID), Addr: raft.ServerAddress(n.Addr()), ClusterID: mine}
	if _, err := checkAdmission(them.ClusterID, nil, self); err != nil {
		return nodewire.Identity{}, fmt.Errorf("%w (member %q at %s told its cluster; this node's data dir is %s, its identity file %s)",
			err, them.ID, addr, n.cfg.DataDir, n.ident.Path())
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
func (n *Node) learnClusterFromServers(ctx context.Context) {
	if n.ident.ClusterID() != "" {
		return
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.cfg.NodeID {
			continue
		}
		them, err := n.checkCluster(ctx, string(s.Address))
		if err != nil {
			n.log.Debug("asking a server of the configuration for the cluster ID", "id", s.ID, "addr", s.Address, "error", err)
			continue
		}
		if them.ID == string(s.ID) && them.ClusterID != "" {
			n.joinedCluster(them.ClusterID)
			return
		}
	}
}

// joinedCluster records the cluster of the member that added this node (or
// of a server of its configuration: learnClusterFromServers), if the data
// dir did not know its cluster yet.
func (n *Node) joinedCluster(clusterID string) {
	learned, err := n.ident.LearnClusterID(clusterID)
	switch {
	case err != nil:
		n.log.Warn("could not record the cluster ID in the data dir; it is learned again at the next join", "cluster", clusterID, "error", err,
			"what_to_do", "make the data dir writable by this user")
	case learned:
		n.log.Info("recorded the cluster ID in the data dir", "cluster", clusterID)
		if n.gossip != nil {
			n.setGossipTag(tagClusterID, clusterIDTag(clusterID))
		}
	}
}

// identityReply answers kindIdentity: any member (leader or not) tells its
// node ID and cluster ID. A node of another cluster asking is about to be
// refused by its own side (checkCluster); this side runs the same check and
// logs it, so that the operator of either cluster sees why the node is
// not added.
func (n *Node) identityReply(req *nodewire.Identity) *nodewire.Identity {
	mine := n.ident.ClusterID()
	asking := candidate{ID: raft.ServerID(req.ID), ClusterID: req.ClusterID}
	if _, err := checkAdmission(mine, nil, asking); err != nil {
		n.refusals.log(n, hclog.Error, "wrong-cluster:"+req.ID, "a node of another cluster asked to join this one; it is refused", "node", req.ID,
			"its_cluster", req.ClusterID, "cluster", mine, "error", err)
	}
	return &nodewire.Identity{ID: n.cfg.NodeID, ClusterID: mine}
}

// recordIdentity runs in New once it knows whether the data dir holds raft
// state, before raft writes anything under this node's name. Where New found
// no identity file it writes one:
//   - a fresh data dir that bootstraps: the node ID and a new cluster ID;
//   - a fresh data dir that joins: the node ID, and the cluster ID once a
//     member has added it (join);
//   - raft state without an identity file, made by an earlier version: the
//     configured NodeID is adopted, since that version kept no record to
//     check it against, and the cluster ID is learned at the next join.
//
// If New then fails on a fresh data dir, the file it wrote is removed: the
// directory belongs to nobody yet. A file found beside no raft state (the
// operator removed the state but not the file) stays; a bootstrap records
// its new cluster ID in it, and a join is checked against the recorded one.
func (n *Node) recordIdentity(found, existing bool, cleanup *[]func()) error {
	switch {
	case existing && found:
		return nil
	case existing:
		n.log.Info("recording the node ID in a data dir made by an earlier version", "file", n.ident.Path())
		return n.ident.Save("")
	}
	clusterID := n.ident.ClusterID()
	if n.cfg.Bootstrap {
		var err error
		if clusterID, err = newClusterID(n.cfg.Peers); err != nil {
			return err
		}
	}
	if err := n.ident.Save(clusterID); err != nil {
		return err
	}
	if !found {
		*cleanup = append(*cleanup, n.ident.Remove)
	}
	return nil
}
