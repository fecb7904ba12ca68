package cluster

import (
	"github.com/raftlock/raftlock/cluster/internal/membership"
	"github.com/raftlock/raftlock/cluster/nodewire"
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
// members, so the same Peers make the same ID (membership.NewClusterID).
// Who may be added to a cluster is one check (package membership,
// admission.go), run by the leader on every path that adds a node and by
// the node that asks: a node that joins first asks the member it asks to
// add it for that member's IDs (nodewire.KindIdentity, which any member
// answers), refuses itself if both know their clusters and they differ
// (ErrWrongCluster; New fails on a fresh data dir, the background rejoin
// of an existing one stops and says why in the log; the member logs it
// too), tells its cluster ID in its join request, and records the cluster
// ID once added; a member that leads before it knows the ID (it asks no
// one to add it) asks the other servers of its configuration (package
// membership, identity.go: learnClusterFromServers). The authority is thus
// each member's own file, equal across a cluster because every member got it at
// bootstrap or from a member of it; it is not replicated in the
// log. A data dir from a version without the file (raft state, no file) is
// not refused: the configured NodeID is adopted and recorded, and the
// cluster ID is learned at the node's next join. A cluster made by such a
// version has no cluster ID: its members are checked by node ID only.

// ErrWrongCluster: the data dir belongs to one cluster and the member
// asked to add the node belongs to another. Joining with a fresh data
// dir, it also matches ErrJoin.
var ErrWrongCluster = nodewire.ErrWrongCluster

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
		if clusterID, err = membership.NewClusterID(peerServers(n.cfg.Peers)); err != nil {
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
