package membership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/raftlock/raftlock/cluster/nodewire"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// Admission: who may be added to the raft configuration.
//
// Every way a node enters the raft configuration is checked by one
// function, checkAdmission: a join request served by the leader (Join, a
// restart's rejoin, a node that gossip made aware of the cluster asking to
// be added: AddMember), the reconciler adding a live member gossip shows or
// updating the address of a member back elsewhere (reconcileMembers), and,
// on the other side, the node that asks, on what the member it asks tells
// of its cluster (checkCluster, before each join request, so that a leader
// of a build without this check cannot absorb it either) and gossip, which
// refuses to merge with members of another cluster (gossipDelegate). Its
// rules:
//
//   - A node whose data dir belongs to another cluster (its identity file,
//     package cluster's identity.go, names another cluster ID) is never added: raft would
//     replace its log with this cluster's, and the locks it held would be
//     gone. It is refused with nodewire.ErrWrongCluster, both sides log why, and its
//     data dir is left as it is. A node whose data dir belongs to no cluster
//     yet (an empty data dir, or one made before identity files existed) is
//     joinable. A cluster made before identity files has no ID: its leader
//     checks node IDs only.
//   - A node ID that is alive at another address is never given to a
//     newcomer (a second process started with a member's -node-id, or on a
//     copy of its data dir): the newcomer is refused with ErrNodeIDInUse,
//     naming the live address. The member's place is taken over only once
//     the reconciler's member source (members.go) calls it failed or left at
//     that address (raft's heartbeats to it failed for failureDetectTime, or
//     gossip says so) and, asked by the leader, no node of its ID answers
//     there (answersAtConfigAddr: the heartbeat record lags a restart), or
//     after it left (Leave) or was removed; a member restarted at a new
//     address is updated then. The refused node keeps
//     asking (its old address may just not be known dead yet), so New's
//     join fails after RequestTimeout with the refusal as its last error.
//   - A fresh node (its data dir holds no raft state) under the ID of a
//     voter that is not alive elsewhere has lost the log and the vote that
//     voter had: the voter's entry is removed first and the node added as a
//     new server (AddMember says why). A non-voter of that ID is kept.
//
// Gossip tags carry each node's cluster ID (tagClusterID; "none" while its
// data dir belongs to no cluster), so that the reconciler checks before
// adding. A gossip member that carries no such tag (a build from before it)
// is not added by the reconciler: whether its data dir belongs to another
// cluster is unknown, and adding it could destroy that cluster's state. It
// is added when it asks (every build with gossip asks the members gossip
// shows to add it, after checking their cluster itself), through AddMember.

// IdentityError is a refusal worded for people that matches the sentinels
// in Sentinels, so that its message need not repeat theirs.
type IdentityError struct {
	Msg       string
	Sentinels []error
}

func (e *IdentityError) Error() string { return e.Msg }

// Is reports whether target is one of e's sentinels.
func (e *IdentityError) Is(target error) bool { return slices.Contains(e.Sentinels, target) }

// ErrNodeIDInUse: a node asked to be added under a node ID that a live
// member has at another address. Only the leader sees it: the node that
// asked keeps asking, and reports the refusal when it gives up.
var ErrNodeIDInUse = errors.New("cluster: node ID in use by a live member")

// Candidate is a node to be added to the raft configuration: as it asks
// (a join request) or as gossip shows it.
type Candidate struct {
	ID   raft.ServerID
	Addr raft.ServerAddress
	// ClusterID is the cluster its data dir belongs to, as it tells it; ""
	// when it belongs to none yet, or the node does not tell (Untold).
	ClusterID string
	// Untold: the node says nothing of its cluster (a gossip member of a
	// build without tagClusterID). The reconciler does not add such a node;
	// a join request without a cluster ID is from a node that knows none
	// (or from a build that checked the cluster itself: checkCluster).
	Untold bool
	// Fresh: its data dir holds no raft state (a join-empty request).
	Fresh bool
}

// String names the node for messages: its ID, and its address if known.
func (c Candidate) String() string {
	if c.Addr == "" {
		return fmt.Sprintf("node %q", c.ID)
	}
	return fmt.Sprintf("node %q (%s)", c.ID, c.Addr)
}

// admission is checkAdmission's verdict on a candidate it admits.
type admission struct {
	// removeFirst: the configuration holds a voter of the candidate's ID
	// that lost its state (the candidate is fresh): remove it before the
	// candidate is added.
	removeFirst bool
}

// checkAdmission is the one check of whether c may be added to the raft
// configuration of the cluster whose ID is ours ("" if unknown), whose
// members (the raft configuration and the nodes gossip shows, with the
// reconciler's judgement of their liveness: knownMembers) are members; nil
// members checks the cluster alone. It reads no state of its own, so the
// leader, the reconciler, the node that asks and gossip all call it with
// what they know. A refusal's message names both sides and says what to do.
func checkAdmission(ours string, members []KnownMember, c Candidate) (admission, error) {
	if c.ClusterID != "" && ours != "" && c.ClusterID != ours {
		return admission{}, &IdentityError{
			Msg: fmt.Sprintf("cluster: the data dir of %s belongs to cluster %s, not to cluster %s: it is not added, and its data dir is left as it is "+
				"(a data dir cannot move to another cluster: raft would replace its log). Point that node's Join/RetryJoin (the agent's -join/-retry-join) at members of cluster %s, "+
				"or give it an empty DataDir (-data-dir) to join cluster %s as a new member",
				c, c.ClusterID, ours, c.ClusterID, ours),
			Sentinels: []error{nodewire.ErrWrongCluster},
		}
	}
	var verdict admission
	member := false
	for _, m := range members {
		if m.ID != c.ID {
			continue
		}
		member = member || m.InConfig
		if live := m.liveAddr(); live != "" && live != c.Addr {
			return admission{}, &IdentityError{
				Msg: fmt.Sprintf("cluster: node ID %q is in use by a live member at %s; the node at %s asking to be added under it is refused. "+
					"Give that node its own -node-id (NodeID); to replace the member, stop it (it is replaced once the cluster sees it failed) "+
					"or take it out first (raftlock leave, Leave)",
					c.ID, live, c.Addr),
				Sentinels: []error{ErrNodeIDInUse},
			}
		}
		verdict.removeFirst = c.Fresh && m.InConfig && m.Suffrage != raft.Nonvoter
	}
	if c.Untold && !member {
		return admission{}, fmt.Errorf("%w: %s tells no cluster ID (a build from before gossip told it): it is added when it asks to join", errClusterUntold, c)
	}
	return verdict, nil
}

// errClusterUntold: a gossip member that tells no cluster ID is not added
// by the reconciler (see Admission above).
var errClusterUntold = errors.New("cluster: not added unasked")

// liveAddr is an address at which m is alive other than one it is known
// dead at: the address raft has for it, unless its heartbeats there failed
// for failureDetectTime or its member source calls it failed or left
// there; else the address gossip shows it alive at; "" when neither.
func (m KnownMember) liveAddr() raft.ServerAddress {
	if m.InConfig && !m.HeartbeatsFailed && (m.Addr != m.ConfigAddr || m.Status == autopilot.NodeAlive) {
		return m.ConfigAddr
	}
	if m.Status == autopilot.NodeAlive {
		return m.Addr
	}
	return ""
}

// How a candidate came to the leader, for admit's log lines.
const (
	viaJoinRequest = "join request"
	viaGossip      = "gossip"
)

// admit runs checkAdmission on the leader against its own cluster ID and
// members, and logs a refusal (once a minute per node and reason: a
// refused node asks again). The reconciler meets a member that moved
// before its old address is known dead, which is no error: gossip lets
// one node at a time have an ID, so that one is logged at Info.
func (mgr *Manager) admit(c Candidate, via string) (admission, error) {
	ours, members := mgr.ident.ClusterID(), mgr.knownMembers()
	verdict, err := checkAdmission(ours, members, c)
	if err == nil && mgr.answersAtConfigAddr(members, c) {
		verdict, err = checkAdmission(ours, markAlive(members, c.ID), c)
	}
	switch {
	case errors.Is(err, nodewire.ErrWrongCluster):
		mgr.refusals.log(mgr.log, hclog.Error, "wrong-cluster:"+string(c.ID)+"@"+string(c.Addr), "refusing to add a node of another cluster",
			"id", c.ID, "addr", c.Addr, "via", via, "its_cluster", c.ClusterID, "cluster", mgr.ident.ClusterID(), "error", err)
	case errors.Is(err, errClusterUntold):
		mgr.refusals.log(mgr.log, hclog.Debug, "untold:"+string(c.ID)+"@"+string(c.Addr), "not adding a gossip member unasked", "id", c.ID, "addr", c.Addr, "error", err)
	case errors.Is(err, ErrNodeIDInUse) && via == viaGossip:
		mgr.refusals.log(mgr.log, hclog.Info, "in-use:"+string(c.ID)+"@"+string(c.Addr), "not moving a member to the new address gossip shows until its old address is seen failed",
			"id", c.ID, "addr", c.Addr, "error", err)
	case errors.Is(err, ErrNodeIDInUse):
		mgr.refusals.log(mgr.log, hclog.Error, "in-use:"+string(c.ID)+"@"+string(c.Addr), "refusing to add a node under the ID of a live member",
			"id", c.ID, "addr", c.Addr, "via", via, "error", err)
	}
	return verdict, err
}

// moveProbeTimeout bounds how long the leader waits for a member's old
// address to answer before it moves the member elsewhere: a live node
// answers within milliseconds; a dead one refuses the connection at once,
// unless its host is gone and the dial hangs, which delays the move by this.
const moveProbeTimeout = time.Second

// answersAtConfigAddr says whether admitting c would move a member that the
// leader's record judges dead at its raft address while a node of c's ID
// still answers there. The record is raft's heartbeat failures, and raft
// reports a member answering again only once its next heartbeat succeeds,
// after a backoff: a member stopped and started again on its address is
// dead on that record for a while, and a copy of its data dir asking from
// another address in that window would take its place (and its vote) from
// a live member. So before such a move the leader asks the old address who
// answers there.
func (mgr *Manager) answersAtConfigAddr(members []KnownMember, c Candidate) bool {
	i := slices.IndexFunc(members, func(m KnownMember) bool { return m.ID == c.ID })
	if i < 0 {
		return false
	}
	m := members[i]
	if !m.InConfig || m.ConfigAddr == "" || m.ConfigAddr == c.Addr || m.liveAddr() != "" {
		return false
	}
	ctx, cancel := mgr.closingContext()
	defer cancel()
	ctx, cancelProbe := context.WithTimeout(ctx, moveProbeTimeout)
	defer cancelProbe()
	info, err := mgr.askInfo(ctx, string(m.ConfigAddr))
	return err == nil && info.ID == string(c.ID)
}

// markAlive returns members with id alive at its raft address: what a node
// of id answering there shows.
func markAlive(members []KnownMember, id raft.ServerID) []KnownMember {
	out := slices.Clone(members)
	for i := range out {
		if out[i].ID == id {
			out[i].HeartbeatsFailed, out[i].Status = false, autopilot.NodeAlive
			out[i].Addr = out[i].ConfigAddr
		}
	}
	return out
}

// refusalLog logs a refusal once a minute per key: a refused node retries,
// and each try would log it again.
type refusalLog struct {
	mu     sync.Mutex // protects warned
	warned map[string]time.Time
}

func (l *refusalLog) log(logger hclog.Logger, level hclog.Level, key, msg string, args ...any) {
	l.mu.Lock()
	if l.warned == nil {
		l.warned = map[string]time.Time{}
	}
	now := time.Now()
	last, ok := l.warned[key]
	if ok && now.Sub(last) < time.Minute {
		l.mu.Unlock()
		return
	}
	l.warned[key] = now
	l.mu.Unlock()
	logger.Log(level, msg, args...)
}
