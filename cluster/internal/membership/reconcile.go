package membership

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/internal/nodestatus"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// Membership: the leader reconciles the raft configuration.
//
// Join asks the listed addresses in turn to add this node; a member that
// does not lead answers with the leader's address and Join asks that one.
// A leader without gossip adds it as a voter while fewer than Config.Voters
// (3 by default) voters exist, and as a non-voter otherwise; a leader with
// gossip always adds it as a non-voter, and the promoter below gives it a
// vote once it is stable (AddMember says why). Non-voters replicate
// every lock, serve and forward calls like any node, but do not vote or
// acknowledge commits, so embedding a node in 30 replicas of a service keeps
// a 3-voter quorum and 3 fsyncs per commit. Members named in Peers at
// bootstrap are all voters, however many.
//
// From then on the leader runs hashicorp/raft-autopilot (the library Consul,
// Nomad and Vault share), started once this node leads and its term is
// ready (cluster's judgingTerm says why not before) and stopped when the term ends.
// Every autopilotInterval it asks each member for its last log index and
// term and how long ago it heard from the leader
// (nodewire.KindServerStats, answered by any node), and judges each member healthy
// when its member source (members.go) says alive, it heard from the leader
// within lastContactThreshold, is on the leader's term, and is at most
// MaxTrailingLogs entries behind. Every autopilotInterval too, the
// promoter below decides, one step at a time:
//
//   - while fewer than Voters voters exist (a voter left, say), it promotes
//     non-voters healthy for the stabilization time, lowest ID first, so
//     the choice does not depend on map order or timing; a promotion that
//     makes the count odd (2 to 3, 4 to 5) takes a healthy non-voter at
//     once if no stable one is there, as the quorum keeps its size;
//   - a voter unhealthy for DeadVoterTimeout is replaced: a healthy
//     non-voter is promoted, and once it votes (the next round) the dead
//     voter is demoted. Without a non-voter to promote it keeps its vote
//     unless more than Voters voters remain. Promoting adds a live vote and
//     demoting one that does not answer takes none away, so the number of
//     healthy voters never drops on the reconciler's account; while both
//     vote (4 voters of which 3 must answer) the cluster tolerates no
//     further failure, as it did not before (2 of 3 answering). Why not
//     demote first, as autopilot prefers: see
//     voterPromoter.CalculatePromotionsAndDemotions;
//   - a non-voter failed for DeadMemberTimeout is removed, as is a member
//     that left (gossip says so; without gossip a member leaves by asking
//     the leader, which removes it at once). Voters are never removed by
//     the reconciler: they are demoted first. Autopilot itself caps
//     removals so that no round takes away a majority of the voters.
//   - a live node that is not in the configuration (gossip knows it, raft
//     does not) is added as a non-voter, and a member back at a new address
//     is updated, keeping its suffrage (reconcileMembers).
//
// The leader's failure tolerance (healthy voters beyond a quorum) is what
// Readiness reports, on every node: the leader passes it along with each
// stats request, and with it its view of every member (status and
// health), which the other nodes' Stats show; both are believed for a few
// checks. The reconciler's last actions, with their reasons, are in
// Stats.ReconcileActions.
//
// Timing. A dead voter is replaced after failure detection (members.go:
// 2×HeartbeatTimeout from raft's heartbeats, or gossip's if sooner), the
// next health check (autopilotInterval), DeadVoterTimeout, the next
// reconcile round (autopilotInterval) for the promotion and one more for
// the demotion: with DefaultConfig at most 1 s + 1 s + 5 s + 1 s + 1 s,
// under 10 s; Readiness is back a readyHold later. DeadVoterTimeout
// is the knob: it must outlast what a healthy voter may go through without
// answering — an election (one to two ElectionTimeouts), a stall of the
// host or its disk, a restart of the process on its data dir (a few
// seconds) — or every such event swaps voters for nothing (safe, but
// churn); and it should be short, because while a voter is dead a 3-voter
// cluster tolerates no further failure. 5 s is ten ElectionTimeouts of
// DefaultConfig. Raise it with the raft timeouts.

// Timings of the reconciler, derived from the raft timings so that a
// cluster tuned for a slow network is judged by that network's standards.
const (
	// MaxTrailingLogs is how far behind the leader's log a member may be
	// and still count as healthy (Consul's default is 250; lock traffic
	// batches many commands per entry, but a burst can still put a sound
	// follower a few hundred entries behind while a stats request travels).
	MaxTrailingLogs = 1000
	// maxReconcileActions is how many recent actions Stats keeps.
	maxReconcileActions = 16
)

// autopilotInterval is how often the leader checks its members' health and
// reconciles: twice HeartbeatTimeout (1 s with DefaultConfig), within
// 100 ms and 2 s (autopilot's own default).
func (mgr *Manager) autopilotInterval() time.Duration {
	return min(max(2*mgr.cfg.HeartbeatTimeout, 100*time.Millisecond), 2*time.Second)
}

// lastContactThreshold: a member that has not heard from the leader for
// longer is unhealthy. A follower starts an election after one to two
// HeartbeatTimeouts without the leader; four leave room for a loaded host.
func (mgr *Manager) lastContactThreshold() time.Duration { return 4 * mgr.cfg.HeartbeatTimeout }

// stabilizationTime is how long a non-voter must have been healthy before
// it is promoted: three health checks in a row.
func (mgr *Manager) stabilizationTime() time.Duration { return 3 * mgr.autopilotInterval() }

// ReconcileAction is one change the leader's reconciler made to the raft
// configuration.
type ReconcileAction = nodestatus.ReconcileAction

// Actions of a ReconcileAction.
const (
	ActionAddVoter      = "add-voter"
	ActionAddNonvoter   = "add-nonvoter"
	ActionPromote       = "promote"
	ActionDemote        = "demote"
	ActionRemove        = "remove"
	ActionUpdateAddress = "update-address"
)

// reconcileActionNames are every Action, for counts that list each one.
var reconcileActionNames = []string{ActionAddVoter, ActionAddNonvoter, ActionPromote, ActionDemote, ActionRemove, ActionUpdateAddress}

// ClusterHealth is the leader's latest judgement of its members, as
// autopilot computes it.
type ClusterHealth = nodestatus.ClusterHealth

// heardHealth is a ClusterHealth and whom it came from.
type heardHealth struct {
	ClusterHealth
	// members is the leader's view of each member, by ID; nil when its
	// report had none (a leader of a build before it, or before its first
	// health check).
	members  map[string]nodewire.MemberReport
	leaderID string
	at       time.Duration // this node's monotonic reading when it learned it
}

// reconciler runs autopilot while this node leads, records its actions,
// and keeps the latest cluster health (its own, or the leader's report).
type reconciler struct {
	mgr      *Manager
	ap       *autopilot.Autopilot
	promoter *voterPromoter
	poke     chan struct{} // size one: membership changed, reconcile now
	// voterChange is held while a join or a promotion reads the
	// configuration and adds a voter, so that the two never both add the
	// voter that was missing.
	voterChange sync.Mutex

	mu      sync.Mutex
	actions []ReconcileAction        // oldest first, at most maxReconcileActions
	counts  map[string]uint64        // every action committed since New, by Action
	reasons map[raft.ServerID]string // why the next change to a member is made
	// leaving holds the members this leader removed because they asked
	// to leave, with when (monotonic): such a member still gossips as
	// alive for a second or two while its gossip leave goes out, and
	// reconcileMembers must not add it straight back as a non-voter.
	// A join request from the member clears its entry.
	leaving map[raft.ServerID]time.Duration
	state   *autopilot.State // the leader's latest state; nil while not leading
	stateAt time.Time        // when autopilot computed state
	heard   heardHealth      // a follower's latest report from the leader
	// answered is each member's last answer to a stats request, while
	// this node leads.
	answered map[raft.ServerID]answeredStats
	// refusedView holds, while this node leads, the members that refused
	// a stats request carrying its view of the members (a build before
	// it), with when (monotonic): they are asked without it until
	// viewRetryAfter has passed or a request to them fails (a restart, as
	// on an upgrade, may bring a build that reads it).
	refusedView map[raft.ServerID]time.Duration
	// goodSince is this node's monotonic reading since when every report
	// (its own judgement while it leads, else goodLeader's) has said this
	// node is healthy with enough failure tolerance; 0 when the last one
	// did not.
	goodSince  time.Duration
	goodLeader string
}

type answeredStats struct {
	stats nodewire.ServerStats
	at    time.Time
}

func newReconciler(mgr *Manager) *reconciler {
	r := &reconciler{mgr: mgr, poke: make(chan struct{}, 1), reasons: map[raft.ServerID]string{}, leaving: map[raft.ServerID]time.Duration{}, answered: map[raft.ServerID]answeredStats{},
		refusedView: map[raft.ServerID]time.Duration{}, counts: map[string]uint64{}}
	for _, a := range reconcileActionNames {
		r.counts[a] = 0
	}
	r.promoter = &voterPromoter{
		voters:            mgr.cfg.Voters,
		deadVoterTimeout:  mgr.cfg.DeadVoterTimeout,
		deadMemberTimeout: mgr.cfg.DeadMemberTimeout,
		now:               time.Now,
		explain:           r.explain,
	}
	interval := mgr.autopilotInterval()
	r.ap = autopilot.New(raftRecorder{mgr.raft, r}, (*autopilotDelegate)(r),
		autopilot.WithLogger(mgr.quiet.Wrap(mgr.log)),
		autopilot.WithPromoter(r.promoter),
		autopilot.WithUpdateInterval(interval),
		autopilot.WithReconcileInterval(interval))
	return r
}

// wake asks the leader to reconcile membership now (a member joined,
// left, or changed address) rather than at the next round.
func (r *reconciler) wake() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// run starts autopilot once this node's leader term is ready and stops it
// when the term ends (or another begins), until the node closes; while it
// runs it reconciles membership every autopilotInterval and when woken.
func (r *reconciler) run() {
	mgr := r.mgr
	ticker := time.NewTicker(mgr.autopilotInterval())
	defer ticker.Stop()
	var running any // the term autopilot runs for (Node.JudgingTerm); nil when it does not run
	stop := func() {
		<-r.ap.Stop()
		running = nil
		r.promoter.forget()
		r.mu.Lock()
		r.state = nil
		clear(r.answered)
		clear(r.refusedView)
		r.goodSince = 0
		r.mu.Unlock()
		mgr.heartbeats.forget()
	}
	for {
		changed := mgr.node.LeaderChanged()
		judging := mgr.node.JudgingTerm()
		if running != nil && running != judging {
			stop()
		}
		if running == nil && judging != nil {
			r.ap.Start(context.Background())
			running = judging
		}
		select {
		case <-mgr.closing:
			if running != nil {
				stop()
			}
			return
		case <-changed:
		case <-ticker.C:
			if running != nil {
				r.reconcileMembers()
			}
		case <-r.poke:
			if running != nil {
				r.reconcileMembers()
				r.ap.RemoveDeadServers()
			}
		}
	}
}

// reconcileMembers adds the live nodes that are not in the configuration,
// as non-voters (the promoter makes voters of them if voters are wanted),
// and updates the address of a member back at a new one, keeping its
// suffrage. Each passes the admission check first (admission.go): a node
// whose data dir belongs to another cluster, or that tells no cluster ID
// (an older build: it is added when it asks), is not added, and a member
// is moved only once its old address is seen failed, and never into a
// voter's place when gossip shows it with no raft state (it asks to join
// then, and AddMember replaces the entry). Without gossip every
// known member is in the configuration, at the address raft has, so there
// is nothing to do. autopilot.AddServer first removes a server of another
// ID at the same address (an address reused by a new node), unless that
// would remove too many voters.
func (r *reconciler) reconcileMembers() {
	for _, m := range r.mgr.knownMembers() {
		if m.Status != autopilot.NodeAlive || m.Addr == "" || (m.InConfig && m.ConfigAddr == m.Addr) {
			continue
		}
		if !m.InConfig && (m.Leaving || r.isLeaving(m.ID)) {
			continue
		}
		// A node that tells no cluster of its own ("none") holds no raft
		// state, as far as gossip knows: under a voter's ID it lost that
		// voter's log and vote, so it must not be moved in as that voter.
		// It asks to join, saying whether it is fresh, and AddMember acts.
		fresh := m.ClusterID == "" && !m.ClusterUntold
		verdict, err := r.mgr.admit(Candidate{ID: m.ID, Addr: m.Addr, ClusterID: m.ClusterID, Untold: m.ClusterUntold, Fresh: fresh}, viaGossip)
		if err != nil || verdict.removeFirst {
			continue
		}
		reason := "alive member not in the raft configuration"
		if m.InConfig {
			reason = fmt.Sprintf("member back at a new address (was %s)", m.ConfigAddr)
		}
		r.explain(m.ID, reason)
		if err := r.ap.AddServer(&autopilot.Server{ID: m.ID, Name: string(m.ID), Address: m.Addr, NodeStatus: m.Status}); err != nil && !r.mgr.closed() {
			r.mgr.log.Warn("reconciler: adding member failed; retrying at the next round", "id", m.ID, "addr", m.Addr, "error", err)
		}
	}
}

// leaveGossipGrace bounds how long a member that asked to leave is not
// added back while gossip still shows it alive. Its gossip leave goes out
// within seconds (serf waits at most its broadcast timeout, 5 s); past
// this, a member still alive in gossip is one that never left gossip, and
// the reconciler treats it as any live member again.
const leaveGossipGrace = time.Minute

// noteLeaving records that id was removed at its own request.
func (r *reconciler) noteLeaving(id raft.ServerID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.mgr.monotonic()
	for other, at := range r.leaving {
		if now-at > leaveGossipGrace {
			delete(r.leaving, other)
		}
	}
	r.leaving[id] = now
}

// joining forgets that id left: it asks to be a member again.
func (r *reconciler) joining(id raft.ServerID) {
	r.mu.Lock()
	delete(r.leaving, id)
	r.mu.Unlock()
}

// isLeaving says whether id asked to leave less than leaveGossipGrace ago.
func (r *reconciler) isLeaving(id raft.ServerID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.leaving[id]
	return ok && r.mgr.monotonic()-at <= leaveGossipGrace
}

// explain records why the next configuration change for id is made.
func (r *reconciler) explain(id raft.ServerID, reason string) {
	r.mu.Lock()
	r.reasons[id] = reason
	r.mu.Unlock()
}

// record adds a committed change to the ring of recent actions, with the
// reason given last for that member (or fallback), and logs it.
func (r *reconciler) record(action string, id raft.ServerID, fallback string) {
	r.mu.Lock()
	reason, ok := r.reasons[id]
	if !ok {
		reason = fallback
	}
	delete(r.reasons, id)
	r.counts[action]++
	r.actions = append(r.actions, ReconcileAction{At: time.Now(), Action: action, ID: string(id), Reason: reason})
	if len(r.actions) > maxReconcileActions {
		r.actions = append([]ReconcileAction(nil), r.actions[len(r.actions)-maxReconcileActions:]...)
	}
	r.mu.Unlock()
	r.mgr.log.Info("reconciler: "+action, "id", id, "reason", reason)
}

// recentActions returns a copy of the ring, oldest first.
func (r *reconciler) recentActions() []ReconcileAction {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.actions) == 0 {
		return nil
	}
	return append([]ReconcileAction(nil), r.actions...)
}

// actionCounts returns a copy of the counts by action, every action
// listed.
func (r *reconciler) actionCounts() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.counts)
}

// health is the cluster health as this node knows it: its own judgement
// while it leads, else the current leader's last report if recent.
func (r *reconciler) health() ClusterHealth {
	mgr := r.mgr
	r.mu.Lock()
	defer r.mu.Unlock()
	if mgr.node.Leading() {
		if r.state == nil {
			return ClusterHealth{}
		}
		return healthOf(r.state, raft.ServerID(mgr.cfg.NodeID), r.stateAt)
	}
	h, ok := r.believedLocked()
	if !ok {
		return ClusterHealth{}
	}
	return h.ClusterHealth
}

// believedLocked is the last report of the leader this node knows, and
// whether it is recent enough to believe (a few health checks old at
// most); r.mu is held.
func (r *reconciler) believedLocked() (heardHealth, bool) {
	mgr := r.mgr
	leaderID := mgr.leader()
	h := r.heard
	if leaderID == "" || h.leaderID != leaderID || mgr.monotonic()-h.at > 4*mgr.autopilotInterval() {
		return heardHealth{}, false
	}
	return h, true
}

// view is each member's status and health as the leader sees them, by
// ID: on the leader its own (what its member source says now, and its
// reconciler's last judgement), elsewhere the current leader's last
// report while health believes it; nil when there is none. So one rule,
// health's, says on every node whether the leader's judgement is known.
func (r *reconciler) view() map[string]nodewire.MemberReport {
	mgr := r.mgr
	if mgr.isLeader() {
		r.mu.Lock()
		state := r.state
		r.mu.Unlock()
		out := make(map[string]nodewire.MemberReport)
		for _, m := range mgr.leaderView(state) {
			out[m.ID] = m
		}
		return out
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.believedLocked()
	if !ok {
		return nil
	}
	return h.members
}

// leaderView is how this node, leading, sees each member of its
// configuration, sorted by ID: the status its member source gives now, and
// the health state (autopilot's, nil before its first check) gives.
func (mgr *Manager) leaderView(state *autopilot.State) []nodewire.MemberReport {
	var out []nodewire.MemberReport
	for _, m := range mgr.knownMembers() {
		if !m.InConfig {
			continue
		}
		rep := nodewire.MemberReport{ID: string(m.ID), Status: string(m.Status)}
		if state != nil {
			if srv := state.Servers[m.ID]; srv != nil {
				rep.Judged, rep.Healthy = true, srv.Health.Healthy
			}
		}
		out = append(out, rep)
	}
	return out
}

// viewRetryAfter is how long the leader asks a member that refused its
// view of the members without it, before it tries again: a backstop for
// an upgrade it did not see as a failed request.
func (mgr *Manager) viewRetryAfter() time.Duration { return 30 * mgr.autopilotInterval() }

// healthOf summarizes an autopilot state for the member id.
func healthOf(s *autopilot.State, id raft.ServerID, at time.Time) ClusterHealth {
	h := ClusterHealth{Known: true, FailureTolerance: s.FailureTolerance, Voters: len(s.Voters), CheckedAt: at}
	for _, v := range s.Voters {
		if srv := s.Servers[v]; srv != nil && srv.Health.Healthy {
			h.HealthyVoters++
		}
	}
	if srv := s.Servers[id]; srv != nil {
		h.Healthy = srv.Health.Healthy
	}
	return h
}

// heardFromLeader records the health report a leader sent with its stats
// request. Only the leader this node knows is believed.
func (r *reconciler) heardFromLeader(req *nodewire.ServerStatsRequest) {
	mgr := r.mgr
	if leaderID := mgr.leader(); leaderID == "" || leaderID != req.ID {
		return
	}
	h := heardHealth{leaderID: req.ID, at: mgr.monotonic()}
	if req.Health.Known {
		h.ClusterHealth = ClusterHealth{
			Known:            true,
			FailureTolerance: req.Health.Tolerance,
			Voters:           req.Health.Voters,
			HealthyVoters:    req.Health.HealthyVoters,
			Healthy:          req.Health.Healthy,
			CheckedAt:        time.Now(),
		}
	}
	if len(req.Health.Members) > 0 {
		h.members = make(map[string]nodewire.MemberReport, len(req.Health.Members))
		for _, m := range req.Health.Members {
			h.members[m.ID] = m
		}
	}
	r.mu.Lock()
	r.heard = h
	r.noteReportLocked(req.ID, h.ClusterHealth)
	r.mu.Unlock()
}

// noteReportLocked keeps goodSince from a report of leaderID's.
func (r *reconciler) noteReportLocked(leaderID string, h ClusterHealth) {
	good := h.Known && h.Healthy && h.FailureTolerance >= r.mgr.WantTolerance()
	switch {
	case !good:
		r.goodSince = 0
	case r.goodSince == 0 || r.goodLeader != leaderID:
		r.goodSince, r.goodLeader = r.mgr.monotonic(), leaderID
	}
}

// goodFor is how long reports from the current leader have all been
// good; 0 if the last was not.
func (r *reconciler) goodFor() time.Duration {
	leaderID := r.mgr.leader()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.goodSince == 0 || leaderID == "" || r.goodLeader != leaderID {
		return 0
	}
	return max(r.mgr.monotonic()-r.goodSince, 1)
}

// autopilotDelegate is the reconciler as autopilot's
// ApplicationIntegration.
type autopilotDelegate reconciler

var _ autopilot.ApplicationIntegration = (*autopilotDelegate)(nil)

func (d *autopilotDelegate) AutopilotConfig() *autopilot.Config {
	mgr := d.mgr
	return &autopilot.Config{
		CleanupDeadServers:      true,
		LastContactThreshold:    mgr.lastContactThreshold(),
		MaxTrailingLogs:         MaxTrailingLogs,
		ServerStabilizationTime: mgr.stabilizationTime(),
	}
}

// NotifyState keeps the state for Stats and Readiness.
func (d *autopilotDelegate) NotifyState(s *autopilot.State) {
	r := (*reconciler)(d)
	r.mu.Lock()
	r.state, r.stateAt = s, time.Now()
	r.noteReportLocked(r.mgr.cfg.NodeID, healthOf(s, raft.ServerID(r.mgr.cfg.NodeID), r.stateAt))
	r.mu.Unlock()
}

// KnownServers is knownMembers in autopilot's terms: every member of the
// configuration is known, so autopilot never sees one as stale (and
// removes none for not being known: a member only gossip forgot is judged
// by its heartbeats).
func (d *autopilotDelegate) KnownServers() map[raft.ServerID]*autopilot.Server {
	mgr := d.mgr
	self := raft.ServerID(mgr.cfg.NodeID)
	leading := mgr.isLeader()
	out := make(map[raft.ServerID]*autopilot.Server)
	for _, m := range mgr.knownMembers() {
		out[m.ID] = &autopilot.Server{
			ID:         m.ID,
			Name:       string(m.ID),
			Address:    m.Addr,
			NodeStatus: m.Status,
			Version:    m.Version,
			IsLeader:   leading && m.ID == self,
		}
	}
	return out
}

// FetchServerStats asks every member (but this node, which reads its own)
// for its log position and last contact with the leader, all at once and
// within one autopilotInterval: autopilot's ctx gives half of one, which a
// loaded host can spend before a request is even sent, and a request not
// sent also leaves the member without the leader's health report (ctx's
// own end still stops the requests when autopilot stops). A member that does not
// answer is given its last answer aged by the time since (none if it never
// answered): its last contact grows until it passes lastContactThreshold,
// so a member that stops answering turns unhealthy whatever its member
// source says. The request carries this leader's latest health report,
// which is how every node knows the cluster's failure tolerance, and its
// view of every member (leaderView), which is how a node that does not
// lead shows it. A build before the view refuses a request with it
// (nodewire.CodeBadRequest: trailing bytes); such a member is asked again
// at once without it, and for a while after (refusedView), so that it
// keeps answering and keeps getting the health report.
func (d *autopilotDelegate) FetchServerStats(ctx context.Context, servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	r := (*reconciler)(d)
	mgr := r.mgr
	self := raft.ServerID(mgr.cfg.NodeID)
	r.mu.Lock()
	state, at := r.state, r.stateAt
	r.mu.Unlock()
	parent := ctx
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), mgr.autopilotInterval())
	defer cancel()
	stopWithParent := context.AfterFunc(parent, func() {
		if errors.Is(parent.Err(), context.Canceled) {
			cancel()
		}
	})
	defer stopWithParent()

	var view []nodewire.MemberReport
	if state != nil {
		view = mgr.leaderView(state)
	}

	out := make(map[raft.ServerID]*autopilot.ServerStats, len(servers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, srv := range servers {
		if id == self {
			st := mgr.OwnServerStats()
			mu.Lock()
			out[id] = &autopilot.ServerStats{LastContact: 0, LastTerm: st.LastTerm, LastIndex: st.LastIndex}
			mu.Unlock()
			continue
		}
		req := nodewire.ServerStatsRequest{ID: mgr.cfg.NodeID}
		if state != nil {
			h := healthOf(state, id, at)
			req.Health = nodewire.HealthReport{Known: true, Tolerance: h.FailureTolerance, Voters: h.Voters, HealthyVoters: h.HealthyVoters, Healthy: h.Healthy}
		}
		var withoutView []byte // the request as a build before the view reads it
		if state != nil && len(view) > 0 {
			withoutView = nodewire.EncodeRequest(&req)
			if r.readsView(id) {
				req.Health.Members = view
			}
		}
		body := nodewire.EncodeRequest(&req)
		addr := string(srv.Address)
		wg.Go(func() {
			rep, err := mgr.node.Call(ctx, addr, body)
			if err == nil && rep.Code == nodewire.CodeBadRequest && len(req.Health.Members) > 0 {
				r.mu.Lock()
				r.refusedView[id] = mgr.monotonic()
				r.mu.Unlock()
				mgr.log.Debug("reconciler: member refused the leader's view of the members (an older build); asking without it", "id", id)
				rep, err = mgr.node.Call(ctx, addr, withoutView)
			}
			now := time.Now()
			r.mu.Lock()
			defer r.mu.Unlock()
			if err != nil {
				delete(r.refusedView, id) // it may come back on another build
			}
			answer, ok := rep.Answer.(*nodewire.ServerStats)
			var st nodewire.ServerStats
			if ok {
				st = *answer
			}
			if err != nil || !ok {
				last, ok := r.answered[id]
				if !ok {
					return
				}
				st = last.stats
				if st.LastContact >= 0 {
					st.LastContact += now.Sub(last.at)
				}
			} else {
				r.answered[id] = answeredStats{stats: st, at: now}
			}
			mu.Lock()
			out[id] = &autopilot.ServerStats{LastContact: st.LastContact, LastTerm: st.LastTerm, LastIndex: st.LastIndex}
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// readsView says whether member id is sent this leader's view of the
// members: it has not refused it lately (see refusedView).
func (r *reconciler) readsView(id raft.ServerID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, refused := r.refusedView[id]
	return !refused || r.mgr.monotonic()-at > r.mgr.viewRetryAfter()
}

// RemoveFailedServer removes a member the promoter let go (a non-voter
// failed for DeadMemberTimeout, or a member that left). Autopilot wants it
// to return at once, so the removal runs on its own; it is done only if
// the member is still no voter, or left.
func (d *autopilotDelegate) RemoveFailedServer(srv *autopilot.Server) {
	r := (*reconciler)(d)
	mgr := r.mgr
	id, left := srv.ID, srv.NodeStatus == autopilot.NodeLeft
	if id == raft.ServerID(mgr.cfg.NodeID) {
		return // a leader never removes itself (see Leave); knownMembers counts it alive anyway
	}
	mgr.wg.Go(func() {
		s, ok := configServer(mgr.raft, id)
		if !ok || s.Suffrage == raft.Voter && !left {
			return // gone, or promoted again meanwhile: the promoter demotes it first
		}
		ctx, cancel := context.WithTimeout(context.Background(), mgr.cfg.RequestTimeout)
		defer cancel()
		if err := mgr.waitFuture(ctx, raftRecorder{mgr.raft, r}.RemoveServer(id, 0, 0)); err != nil && !mgr.closed() {
			mgr.log.Warn("reconciler: removing member failed; retrying at the next round", "id", id, "error", err)
		}
	})
}

func (mgr *Manager) OwnServerStats() nodewire.ServerStats {
	st := nodewire.ServerStats{LastContact: -1, LastIndex: mgr.raft.LastIndex()}
	st.LastTerm, _ = strconv.ParseUint(mgr.raft.Stats()["last_log_term"], 10, 64)
	if mgr.isLeader() {
		st.LastContact = 0
	} else if last := mgr.raft.LastContact(); !last.IsZero() {
		st.LastContact = time.Since(last)
	}
	return st
}

// raftRecorder is raft as autopilot sees it: every configuration change
// that commits is recorded with its reason.
type raftRecorder struct {
	*raft.Raft
	r *reconciler
}

// AddVoter is autopilot's: a promotion (checked by allowPromotion, and
// waited for while joins are held off), or an address update of a voter.
// Autopilot decides from a state computed a round earlier: a member
// removed since (one that left at its own request) is not in the latest
// configuration, and raft's AddVoter would add it back as a voter — a
// Leave reported done while the leader keeps the node, and a voter that
// will never answer again. So only a member of the latest configuration is
// promoted or moved; the removal of a member that asked to leave reads and
// changes the configuration under voterChange too (Manager.RemoveServer),
// so none comes between this read and the add.
func (rr raftRecorder) AddVoter(id raft.ServerID, addr raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture {
	rr.r.voterChange.Lock()
	defer rr.r.voterChange.Unlock()
	f := rr.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return errorFuture{err}
	}
	servers := f.Configuration().Servers
	action, fallback := "", ""
	for _, s := range servers {
		if s.ID != id {
			continue
		}
		switch {
		case s.Address != addr:
			action, fallback = ActionUpdateAddress, "member back at a new address"
		case s.Suffrage == raft.Voter:
			return errorFuture{nil} // a round-old state: already done
		default:
			action, fallback = ActionPromote, "fewer voters than Voters"
			if !rr.r.promoter.allowPromotion(id, servers) {
				rr.r.mgr.log.Debug("reconciler: not promoting: enough voters in the latest configuration", "id", id)
				return errorFuture{nil}
			}
		}
	}
	if action == "" {
		rr.r.mgr.log.Debug("reconciler: not adding a voter that is not in the latest configuration (removed meanwhile)", "id", id)
		return errorFuture{nil}
	}
	if action == ActionUpdateAddress {
		if err := rr.removeBeforeMove(id, prevIndex, timeout); err != nil {
			return errorFuture{err}
		}
		prevIndex = 0
	}
	rf := rr.recorded(rr.Raft.AddVoter(id, addr, prevIndex, timeout), action, id, fallback)
	return errorFuture{rf.Error()}
}

// removeBeforeMove takes a member out of the configuration before it is
// added back at its new address. raft v1.7.3 changes a replicated
// server's address in place, under a lock that its replication goroutine
// does not take when it reads the server (a data race in raft); a server
// removed and added again gets a new replication goroutine instead. The
// member is briefly out of the configuration: its old address is dead
// (it is back elsewhere), so no live voter is lost.
func (rr raftRecorder) removeBeforeMove(id raft.ServerID, prevIndex uint64, timeout time.Duration) error {
	return rr.Raft.RemoveServer(id, prevIndex, timeout).Error()
}

// addJoiningVoter adds a node that asked to join as a voter; the caller
// holds voterChange.
func (rr raftRecorder) addJoiningVoter(id raft.ServerID, addr raft.ServerAddress) raft.IndexFuture {
	if s, ok := configServer(rr.Raft, id); ok && s.Address != addr {
		if err := rr.removeBeforeMove(id, 0, 0); err != nil {
			return errorFuture{err}
		}
	}
	return rr.recorded(rr.Raft.AddVoter(id, addr, 0, 0), ActionAddVoter, id, "asked to join")
}

// errorFuture is a raft.IndexFuture already answered.
type errorFuture struct{ err error }

func (f errorFuture) Error() error  { return f.err }
func (f errorFuture) Index() uint64 { return 0 }

func (rr raftRecorder) AddNonvoter(id raft.ServerID, addr raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture {
	action, fallback := ActionAddNonvoter, "alive member not in the raft configuration"
	s, ok := configServer(rr.Raft, id)
	if ok && s.Address == addr {
		// Added meanwhile by the other path (the reconciler and a join
		// request race for a new member): raft would accept it again and
		// change nothing, and no action is recorded.
		return errorFuture{nil}
	}
	if ok {
		action, fallback = ActionUpdateAddress, "member back at a new address"
		if err := rr.removeBeforeMove(id, prevIndex, timeout); err != nil {
			return errorFuture{err}
		}
		prevIndex = 0
	}
	return rr.recorded(rr.Raft.AddNonvoter(id, addr, prevIndex, timeout), action, id, fallback)
}

func (rr raftRecorder) DemoteVoter(id raft.ServerID, prevIndex uint64, timeout time.Duration) raft.IndexFuture {
	return rr.recorded(rr.Raft.DemoteVoter(id, prevIndex, timeout), ActionDemote, id, "unhealthy voter")
}

func (rr raftRecorder) RemoveServer(id raft.ServerID, prevIndex uint64, timeout time.Duration) raft.IndexFuture {
	return rr.recorded(rr.Raft.RemoveServer(id, prevIndex, timeout), ActionRemove, id, "failed or left")
}

// configServer is the server of r's latest configuration with ID id;
// false when it has none or cannot read the configuration.
func configServer(r *raft.Raft, id raft.ServerID) (raft.Server, bool) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return raft.Server{}, false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == id {
			return s, true
		}
	}
	return raft.Server{}, false
}

func (rr raftRecorder) recorded(f raft.IndexFuture, action string, id raft.ServerID, fallback string) raft.IndexFuture {
	return &recordedFuture{IndexFuture: f, done: func() { rr.r.record(action, id, fallback) }}
}

// recordedFuture records its change once, when Error first reports success.
type recordedFuture struct {
	raft.IndexFuture
	once sync.Once
	done func()
}

func (f *recordedFuture) Error() error {
	err := f.IndexFuture.Error()
	if err == nil {
		f.once.Do(f.done)
	}
	return err
}

// HeardFromLeader records the health report a leader sent with its stats
// request (nodewire.KindServerStats, which any node answers with
// OwnServerStats).
func (mgr *Manager) HeardFromLeader(req *nodewire.ServerStatsRequest) {
	mgr.reconciler.heardFromLeader(req)
}
