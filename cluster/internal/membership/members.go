package membership

import (
	"slices"
	"strings"
	"sync"
	"time"

	autopilot "github.com/hashicorp/raft-autopilot"

	raft "github.com/raftlock/raftlock/internal/raft"
)

// Who is a member, and is it alive?
//
// The reconciler (reconcile.go) acts on knownMembers: every server of the
// raft configuration, and every live node that wants to be one, each with a
// status (alive, failed, left). Two sources feed it:
//
//   - the leader's raft heartbeats (heartbeatView below): a member whose
//     heartbeats have failed without a break for failureDetectTime is failed,
//     every other member of the configuration alive. This source knows only
//     members of the configuration and never says "left": a member leaves
//     by asking the leader (Leave), which removes it at once.
//   - gossip, when the node runs it (Node.gossipView): its alive, failed
//     and left states, and the nodes that are not members yet. A member of
//     the configuration that gossip does not know (a node of a version
//     without gossip, during an upgrade) is judged by its heartbeats, and
//     one that gossip calls alive but whose heartbeats (at the address
//     gossip gives) have failed for failureDetectTime is failed: raft
//     cannot reach it, whatever gossip hears, and the sooner of the two
//     detections bounds how long Readiness may lag behind a death.

// MemberView is one node as the reconciler's sources see it.
type MemberView struct {
	ID      raft.ServerID
	Addr    raft.ServerAddress // its raft address
	APIAddr string             // where it serves its API; "" if unknown
	Status  autopilot.NodeStatus
	Version string // its raftlock version, "" if unknown
	Leaving bool   // its Leave is under way (gossip's leaving tag)
	// ClusterID is the cluster its data dir belongs to, as it tells ("" if
	// none yet); ClusterUntold says it does not tell (admission.go).
	ClusterID     string
	ClusterUntold bool
}

// MemberSource is a view of the nodes other than raft's own: gossip's.
type MemberSource func() []MemberView

// KnownMember is one node the reconciler knows of.
type KnownMember struct {
	MemberView
	// InConfig says the node is in the raft configuration; Suffrage is then
	// its suffrage there, and ConfigAddr the address raft has for it (a
	// member back at another address differs from Addr).
	InConfig   bool
	Suffrage   raft.ServerSuffrage
	ConfigAddr raft.ServerAddress
	// HeartbeatsFailed: the leader's heartbeats to ConfigAddr have failed
	// for failureDetectTime (a member of the configuration only).
	HeartbeatsFailed bool
}

// failureDetectTime is how long a member's heartbeats must have failed
// without a break before the heartbeat source calls it failed: twice the
// heartbeat timeout, after which its followers would have started an
// election had the leader been the one gone. One refused connection is not
// a death; a process restarting on its data dir takes longer than this,
// and is then failed until it answers again (DeadVoterTimeout decides what
// happens meanwhile).
func (mgr *Manager) failureDetectTime() time.Duration { return 2 * mgr.cfg.HeartbeatTimeout }

// knownMembers is what the reconciler acts on: the raft configuration's
// servers and the nodes that want to join, sorted by ID, each with its
// status. It reads local state only.
func (mgr *Manager) knownMembers() []KnownMember {
	f := mgr.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil
	}
	var gossip []MemberView
	if src := mgr.gossipView.Load(); src != nil {
		gossip = (*src)()
	}
	return mergeMembers(mgr.cfg.NodeID, f.Configuration().Servers, mgr.heartbeats.view(mgr.failureDetectTime()), gossip)
}

// mergeMembers joins the raft configuration, the heartbeat source's
// failures and the gossip source's view (nil when gossip is off) into the
// reconciler's list, sorted by ID. self is this node's ID: it is alive by
// definition (it is the one asking).
func mergeMembers(self string, servers []raft.Server, failed map[raft.ServerID]bool, gossip []MemberView) []KnownMember {
	byID := make(map[raft.ServerID]*KnownMember, len(servers)+len(gossip))
	for _, g := range gossip {
		m := &KnownMember{MemberView: g}
		byID[g.ID] = m
	}
	for _, s := range servers {
		m, ok := byID[s.ID]
		if !ok {
			// Not in gossip (or gossip is off): its heartbeats judge it.
			status := autopilot.NodeAlive
			if failed[s.ID] {
				status = autopilot.NodeFailed
			}
			m = &KnownMember{MemberView: MemberView{ID: s.ID, Addr: s.Address, Status: status}}
			byID[s.ID] = m
		}
		m.InConfig, m.Suffrage, m.ConfigAddr, m.HeartbeatsFailed = true, s.Suffrage, s.Address, failed[s.ID]
		if m.Addr == "" {
			m.Addr = s.Address
		}
		if m.Status == autopilot.NodeAlive && m.Addr == s.Address && failed[s.ID] {
			// Raft's heartbeats go to the address gossip gives, and fail.
			m.Status = autopilot.NodeFailed
		}
	}
	if m, ok := byID[raft.ServerID(self)]; ok {
		m.Status, m.HeartbeatsFailed = autopilot.NodeAlive, false
	}
	out := make([]KnownMember, 0, len(byID))
	for _, m := range byID {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b KnownMember) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// heartbeatWatch is the leader's record of which members stop answering
// its heartbeats: raft's FailedHeartbeatObservation says when each was
// last heard from, ResumedHeartbeatObservation that it answers again.
type heartbeatWatch struct {
	mu      sync.Mutex
	failing map[raft.ServerID]time.Time // last contact of each member whose heartbeats fail
}

func newHeartbeatWatch() *heartbeatWatch {
	return &heartbeatWatch{failing: make(map[raft.ServerID]time.Time)}
}

func (w *heartbeatWatch) observe(o raft.Observation) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch o := o.Data.(type) {
	case raft.FailedHeartbeatObservation:
		if _, ok := w.failing[o.PeerID]; !ok {
			last := o.LastContact
			if last.IsZero() {
				// Never heard from since this leader began replicating to
				// it: count from the first failure.
				last = time.Now()
			}
			w.failing[o.PeerID] = last
		}
	case raft.ResumedHeartbeatObservation:
		delete(w.failing, o.PeerID)
	case raft.PeerObservation:
		// Replication to it starts or stops: a new stream has missed
		// nothing yet, and a member that was removed and joins again must
		// not inherit its old failure.
		delete(w.failing, o.Peer.ID)
	}
}

// forget clears the record: a new leader learns afresh who answers it.
func (w *heartbeatWatch) forget() {
	w.mu.Lock()
	clear(w.failing)
	w.mu.Unlock()
}

// view returns the members whose heartbeats have failed for at least d.
func (w *heartbeatWatch) view(d time.Duration) map[raft.ServerID]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[raft.ServerID]bool, len(w.failing))
	for id, last := range w.failing {
		if time.Since(last) >= d {
			out[id] = true
		}
	}
	return out
}

// watchHeartbeats registers for raft's heartbeat observations; the
// record is kept while this node leads and cleared when it stops.
func (mgr *Manager) watchHeartbeats() {
	observations := make(chan raft.Observation, 64)
	observer := raft.NewObserver(observations, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.PeerObservation:
			return true
		}
		return false
	})
	mgr.raft.RegisterObserver(observer)
	mgr.wg.Go(func() {
		defer mgr.raft.DeregisterObserver(observer)
		for {
			select {
			case <-mgr.closing:
				return
			case o := <-observations:
				mgr.heartbeats.observe(o)
			}
		}
	})
}
