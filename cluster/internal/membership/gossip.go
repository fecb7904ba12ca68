package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	autopilot "github.com/hashicorp/raft-autopilot"
	"github.com/hashicorp/serf/serf"

	"github.com/raftlock/raftlock/cluster/datadir"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/internal/broadcast"
	"github.com/raftlock/raftlock/internal/nodestatus"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// Gossip: who is alive, and where.
//
// A node with Config.GossipBindAddr set runs serf (on memberlist) on that
// address: a second port next to BindAddr, UDP for probes and gossip, TCP
// for state exchange at the same port number. (memberlist's Transport could
// share the transport's TCP listener, but its UDP side needs a socket of its
// own anyway, and a separate port keeps gossip out of the raft stream's TLS
// and frame limits; the agent's default is -bind's port + 1.) Serf rather
// than raw memberlist: it brings member tags with updates, failed and left
// members remembered and reaped, reconnection to failed members, queries
// (used by BootstrapExpect) and a keyring.
//
// Each member tags itself with its raft address, API address, role in the
// raft configuration as it knows it (voter, nonvoter, or empty), raftlock
// version, the command level its build reads (package cluster's levels.go),
// cluster name, cluster ID (package cluster's identity.go; tagClusterID) and BootstrapExpect. Gossip is
// separated by
// ClusterName, carried as memberlist's label on every packet and stream (a
// node of another cluster name is discarded before anything is decoded) and
// checked again as a tag when members merge, by cluster ID (a node whose
// data dir belongs to another cluster is refused: the admission check,
// admission.go), and, with GossipKeys, encrypted
// with AES-GCM (the first key encrypts, every key decrypts, so keys can be
// rotated by rolling restarts: see README). A node that gossips under this
// node's ID from another address is refused (a duplicate NodeID); serf's own
// conflict resolution, which shuts down the loser's gossip, is off.
//
// Gossip is on only when GossipBindAddr is set (the agent sets it when given
// -bootstrap-expect, -retry-join or -gossip-bind): a node embedded in another
// program should not open a UDP and a TCP port it was not asked for, and a
// node with no RetryJoin has nobody to gossip with unless others join it. BootstrapExpect and RetryJoin need
// it. Close stops gossip without leaving (other members see the node as
// failed, as raft does); Leave leaves gossip too once raft removed the node.
//
// Raft follows gossip: a node that is alive in gossip but not in the raft
// configuration it knows asks the members gossip shows in a raft
// configuration (role tag set) to add it, through the join request, with
// backoff, until it is a member. That is how -retry-join alone makes a
// node a member.

// GossipStatus is what gossip knows of a member's liveness.
type GossipStatus int

const (
	GossipAlive GossipStatus = iota + 1
	GossipFailed
	GossipLeft
)

// String is the status as Stats shows it (nodestatus.GossipAlive, ...).
func (s GossipStatus) String() string {
	switch s {
	case GossipAlive:
		return nodestatus.GossipAlive
	case GossipFailed:
		return nodestatus.GossipFailed
	case GossipLeft:
		return nodestatus.GossipLeft
	}
	return ""
}

// GossipMember is one member as gossip sees it.
type GossipMember struct {
	ID       raft.ServerID
	RaftAddr raft.ServerAddress
	APIAddr  string
	Status   GossipStatus
	// Version is the member's raftlock version (its "version" tag; "" when
	// it has none).
	Version string
	// Level is the command level the member's build reads (its "level"
	// tag; 0 when it has none, and then it reads fsm.BaselineLevel: see
	// package cluster's levels.go).
	Level int
	// Role is the member's place in the raft configuration as it knows it:
	// SuffrageVoter, SuffrageNonvoter, or "" (not a member, or not yet).
	Role string
	// Expect is the member's BootstrapExpect (0 if none).
	Expect int
	// GossipAddr is where it gossips (ip:port).
	GossipAddr string
	// Leaving says the member is leaving the cluster (tagLeaving).
	Leaving bool
	// ClusterID is the cluster its data dir belongs to (tagClusterID; ""
	// if none yet); ClusterUntold says it has no such tag (an older build).
	ClusterID     string
	ClusterUntold bool
}

// Serf tags a member sets.
const (
	tagRaft    = "raft"
	tagAPI     = "api"
	tagRole    = "role"
	tagVersion = "version"
	tagCluster = "cluster"
	tagExpect  = "expect"
	// tagClusterID is the ID of the cluster the member's data dir belongs
	// to, or clusterIDNone. Short, as every tag is: serf refuses tags whose
	// encoding passes memberlist.MetaMaxSize (512 bytes), and a 200-byte
	// ClusterName and two DNS-named addresses already take much of that.
	tagClusterID = "cid"
	// tagLeaving is "1" while the member's Leave runs: a leader (any
	// leader, also one elected meanwhile) must not add it back while
	// gossip still shows it alive.
	tagLeaving = "leaving"
)

// clusterIDNone is tagClusterID's value while the data dir belongs to no
// cluster (a fresh one, or one made before identity files).
const clusterIDNone = "none"

// clusterIDTag is the value of tagClusterID for a cluster ID.
func clusterIDTag(id string) string {
	if id == "" {
		return clusterIDNone
	}
	return id
}

// gossipAgent is a node's serf instance and what the node derives from it.
type gossipAgent struct {
	serf    *serf.Serf
	events  chan serf.Event
	changed *broadcast.Broadcast // fires on every member event
	notify  chan struct{}        // gossipEvents: size one, coalescing
	cluster string

	tagsMu sync.Mutex // protects tags (SetTags replaces them all)
	tags   map[string]string

	self atomic.Pointer[string] // this node's gossip address, ip:port, once known

	expect *expectState // BootstrapExpect's promise; nil without it
}

// GossipAddr is where this node gossips (ip:port), "" when gossip is off.
func (mgr *Manager) GossipAddr() string {
	if mgr.gossip == nil {
		return ""
	}
	return *mgr.gossip.self.Load()
}

// gossipMembers lists the members gossip knows, sorted by ID; nil when gossip is off.
func (mgr *Manager) gossipMembers() []GossipMember {
	if mgr.gossip == nil {
		return nil
	}
	return mgr.gossip.members()
}

// gossipEvents is told (coalesced: one pending signal at most) whenever a
// member joins, fails, leaves, is reaped or changes its tags; nil when
// gossip is off. One reader only: a second would take the first's signals.
func (mgr *Manager) gossipEvents() <-chan struct{} {
	if mgr.gossip == nil {
		return nil
	}
	return mgr.gossip.notify
}

func (g *gossipAgent) members() []GossipMember {
	all := g.serf.Members()
	out := make([]GossipMember, 0, len(all))
	for _, m := range all {
		if m.Tags[tagCluster] != g.cluster {
			continue
		}
		var st GossipStatus
		switch m.Status {
		case serf.StatusAlive:
			st = GossipAlive
		case serf.StatusFailed:
			st = GossipFailed
		case serf.StatusLeft, serf.StatusLeaving:
			st = GossipLeft
		default:
			continue
		}
		expect, _ := strconv.Atoi(m.Tags[tagExpect])
		cid, told := m.Tags[tagClusterID]
		if cid == clusterIDNone {
			cid = ""
		}
		out = append(out, GossipMember{
			ID:            raft.ServerID(m.Name),
			RaftAddr:      raft.ServerAddress(m.Tags[tagRaft]),
			APIAddr:       m.Tags[tagAPI],
			Status:        st,
			Version:       m.Tags[tagVersion],
			Level:         parseLevel(m.Tags[tagLevel]),
			Role:          m.Tags[tagRole],
			Expect:        expect,
			GossipAddr:    net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port))),
			Leaving:       m.Tags[tagLeaving] == "1",
			ClusterID:     cid,
			ClusterUntold: !told,
		})
	}
	slices.SortFunc(out, func(a, b GossipMember) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// SplitGossipAddr splits a gossip address (host:port; the host may be
// empty: every interface) and checks its port.
func SplitGossipAddr(addr string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	return h, port, nil
}

// startGossip starts serf on Config.GossipBindAddr; fresh says the data dir
// held no raft state. Nothing is joined yet: retry-join and the loops start
// in runGossip.
func (mgr *Manager) startGossip(fresh bool) error {
	cfg := mgr.cfg
	host, port, err := SplitGossipAddr(cfg.GossipBindAddr)
	if err != nil {
		return settingError("GossipBindAddr", "{GossipBindAddr} %q: %v", cfg.GossipBindAddr, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	g := &gossipAgent{
		events:  make(chan serf.Event, 256),
		changed: broadcast.New(),
		notify:  make(chan struct{}, 1),
		cluster: cfg.ClusterName,
	}
	if cfg.BootstrapExpect > 0 && fresh {
		g.expect = &expectState{}
	}
	g.tags = map[string]string{
		tagRaft:      mgr.cfg.Addr,
		tagAPI:       cfg.APIAddr,
		tagVersion:   mgr.cfg.Version,
		tagCluster:   g.cluster,
		tagRole:      mgr.localRole(),
		tagLevel:     strconv.Itoa(mgr.cfg.Level),
		tagClusterID: clusterIDTag(mgr.ident.ClusterID()),
	}
	if cfg.BootstrapExpect > 0 {
		g.tags[tagExpect] = strconv.Itoa(cfg.BootstrapExpect)
	}

	stdlog := log.New(gossipLogWriter{mgr.quiet.Wrap(mgr.log.Named("gossip"))}, "", 0)
	sc := serf.DefaultConfig()
	sc.NodeName = cfg.NodeID
	sc.Tags = g.tags
	sc.EventCh = g.events
	sc.Logger = stdlog
	sc.EnableNameConflictResolution = false // see gossipDelegate: a duplicate is refused, not voted on
	sc.Merge = &gossipDelegate{mgr: mgr, g: g}
	sc.ReapInterval = 5 * time.Second
	sc.TombstoneTimeout = time.Hour
	sc.ReconnectTimeout = max(cfg.DeadMemberTimeout, time.Minute)
	// The members this node knew, kept in its data dir: started again on
	// it, the node rejoins them by itself (serf tries each once, at start),
	// so gossip comes back even when RetryJoin is empty or its names no
	// longer resolve. RejoinAfterLeave: a node that left and is started
	// again asks to be a member again (see rejoin), in gossip as in raft.
	// serf writes the file 0644; it sits in a 0700 directory, and
	// datadir.MakePrivate makes the tree private at the next start.
	dir := filepath.Join(cfg.DataDir, datadir.GossipDirName)
	if err := os.Mkdir(dir, datadir.PrivateDirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cluster: gossip snapshot directory: %w", err)
	}
	sc.SnapshotPath = filepath.Join(dir, "members.snapshot")
	sc.RejoinAfterLeave = true
	sc.MemberlistConfig = memberlist.DefaultLANConfig()
	mc := sc.MemberlistConfig
	mc.Name = cfg.NodeID
	mc.BindAddr = host
	mc.BindPort = port
	mc.AdvertisePort = port
	mc.Logger = stdlog
	mc.Label = "raftlock/" + g.cluster
	// A member back under its ID at a new address (a pod restarted with a
	// new IP) replaces its failed entry once that has been dead this long.
	mc.DeadNodeReclaimTime = 10 * time.Second
	if adv, err := mgr.gossipAdvertise(); err != nil {
		return err
	} else if adv != "" {
		mc.AdvertiseAddr = adv
	}
	if a := cfg.GossipAdvertiseAddr; a != "" {
		if _, p, err := SplitGossipAddr(a); err == nil && p != 0 {
			mc.AdvertisePort = p
		}
	}
	if len(cfg.GossipKeys) > 0 {
		kr, err := memberlist.NewKeyring(cfg.GossipKeys, cfg.GossipKeys[0])
		if err != nil {
			return settingError("GossipKeys", "{GossipKeys}: %v", err)
		}
		mc.Keyring = kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	s, err := serf.Create(sc)
	if err != nil {
		return fmt.Errorf("cluster: gossip on %s: %w", cfg.GossipBindAddr, err)
	}
	g.serf = s
	local := s.LocalMember()
	self := net.JoinHostPort(local.Addr.String(), strconv.Itoa(int(local.Port)))
	g.self.Store(&self)
	mgr.gossip = g
	return nil
}

// gossipAdvertise is the IP memberlist tells others: GossipAdvertiseAddr's,
// else AdvertiseAddr's host (resolved) when gossip binds a wildcard, else ""
// (memberlist picks the bound or a private address).
func (mgr *Manager) gossipAdvertise() (string, error) {
	if a := mgr.cfg.GossipAdvertiseAddr; a != "" {
		host, _, err := SplitGossipAddr(a)
		if err != nil {
			return "", settingError("GossipAdvertiseAddr", "{GossipAdvertiseAddr} %q: %v", a, err)
		}
		return host, nil
	}
	bindHost, _, _ := SplitGossipAddr(mgr.cfg.GossipBindAddr)
	if bindHost != "" && !net.ParseIP(bindHost).IsUnspecified() {
		return "", nil
	}
	advHost, _, err := net.SplitHostPort(mgr.cfg.Addr)
	if err != nil {
		return "", nil
	}
	if ip := net.ParseIP(advHost); ip != nil && !ip.IsUnspecified() {
		return ip.String(), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", advHost)
	if err != nil || len(ips) == 0 {
		return "", nil
	}
	return ips[0].String(), nil
}

// runGossip starts the node's gossip goroutines: the event loop, the role
// tag keeper, raft-follows-gossip, retry-join and BootstrapExpect.
func (mgr *Manager) runGossip(fresh bool) {
	mgr.wg.Go(mgr.wakeReconcilerOnGossip)
	mgr.wg.Go(mgr.gossipEventLoop)
	mgr.wg.Go(mgr.gossipRoleKeeper)
	mgr.wg.Go(func() { mgr.gossipRaftJoiner(fresh) })
	if len(mgr.cfg.RetryJoin) > 0 {
		mgr.wg.Go(mgr.retryJoin)
	}
	if mgr.gossip.expect != nil {
		mgr.wg.Go(mgr.bootstrapExpect)
	}
}

// StopGossip stops serf; leave says whether to leave first (Leave does,
// Close does not: a stopped member is failed, as in raft).
func (mgr *Manager) StopGossip(leave bool) {
	if mgr.gossip == nil {
		return
	}
	if leave {
		if err := mgr.gossip.serf.Leave(); err != nil {
			mgr.log.Warn("leaving gossip failed; the others see this node as failed", "error", err)
		}
	}
	if err := mgr.gossip.serf.Shutdown(); err != nil {
		mgr.log.Warn("stopping gossip", "error", err)
	}
}

func (mgr *Manager) gossipEventLoop() {
	g := mgr.gossip
	for {
		select {
		case <-mgr.closing:
			return
		case ev := <-g.events:
			switch e := ev.(type) {
			case serf.MemberEvent:
				for _, m := range e.Members {
					mgr.log.Debug("gossip member event", "event", e.EventType().String(), "member", m.Name, "addr", m.Addr, "status", m.Status.String())
				}
				g.changed.Fire()
				select {
				case g.notify <- struct{}{}:
				default:
				}
			case *serf.Query:
				// Not in this loop: serf sends member events while holding
				// the member lock that answering (Members) takes.
				mgr.wg.Go(func() { mgr.answerGossipQuery(e) })
			}
		}
	}
}

// localRole is this node's suffrage in the raft configuration it knows, or "".
func (mgr *Manager) localRole() string {
	if mgr.raft == nil {
		return ""
	}
	if s, ok := configServer(mgr.raft, raft.ServerID(mgr.cfg.NodeID)); ok {
		return strings.ToLower(s.Suffrage.String())
	}
	return ""
}

// gossipRoleKeeper keeps the role tag equal to this node's suffrage.
func (mgr *Manager) gossipRoleKeeper() {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-mgr.closing:
			return
		case <-tick.C:
		}
		select {
		case <-mgr.closing: // select picks at random among ready cases
			return
		default:
		}
		mgr.setGossipTag(tagRole, mgr.localRole())
	}
}

func (mgr *Manager) setGossipTag(key, value string) {
	g := mgr.gossip
	g.tagsMu.Lock()
	defer g.tagsMu.Unlock()
	if g.tags[key] == value {
		return
	}
	// Once gossip is leaving or stopped, SetTags waits BroadcastTimeout
	// (5 s) for a broadcast that never goes out, and Close waits for it:
	// a leaving node's role changes (it was just removed), so without this
	// every leave took 5 to 15 s longer.
	if g.serf.State() != serf.SerfAlive {
		return
	}
	tags := make(map[string]string, len(g.tags))
	maps.Copy(tags, g.tags)
	tags[key] = value
	if err := g.serf.SetTags(tags); err != nil {
		mgr.log.Debug("updating gossip tags", "error", err)
		return
	}
	g.tags = tags
}

// gossipRaftJoiner makes raft follow gossip for this node: while it is not
// in the raft configuration it knows (or has not learned the cluster's ID),
// it asks the members gossip shows in a raft configuration to add it.
// fresh: the data dir held no raft state at start, so the first request
// says so (nodewire.KindJoinEmpty: an old member of this ID is replaced).
func (mgr *Manager) gossipRaftJoiner(fresh bool) {
	backoff := 500 * time.Millisecond
	for {
		changed := mgr.gossip.changed.Wait()
		if mgr.leaving.Load() || (mgr.localRole() != "" && mgr.ident.ClusterID() != "") {
			backoff = 500 * time.Millisecond
		} else if addrs := mgr.gossipRaftAddrs(); len(addrs) > 0 && !mgr.awaitingBootstrap() {
			kind := nodewire.KindJoin
			if fresh && !mgr.hasRaftState() {
				kind = nodewire.KindJoinEmpty
			}
			ctx, cancel := context.WithTimeout(context.Background(), mgr.cfg.RequestTimeout)
			via, err := mgr.Join(ctx, kind, addrs, func(error) {})
			cancel()
			switch {
			case err == nil:
				fresh = false
				mgr.log.Info("joined the raft cluster through a member gossip shows", "via", via)
			case errors.Is(err, nodewire.ErrWrongCluster):
				mgr.log.Error("a member gossip shows belongs to another raft cluster: it does not add this node, and this node does not join it", "error", err,
					"what_to_do", "give each cluster its own -cluster-name, or empty this node's -data-dir to join that cluster")
			case !mgr.closed():
				mgr.log.Debug("asking a gossip member to add this node to raft failed; retrying", "error", err)
			}
		}
		if !mgr.pause(backoff, changed) {
			return
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// gossipRaftAddrs are the raft addresses of the other alive members that
// are in a raft configuration, voters first.
func (mgr *Manager) gossipRaftAddrs() []string {
	var voters, others []string
	for _, m := range mgr.gossipMembers() {
		if m.Status != GossipAlive || string(m.ID) == mgr.cfg.NodeID || m.RaftAddr == "" || m.Role == "" {
			continue
		}
		if m.Role == nodestatus.SuffrageVoter {
			voters = append(voters, string(m.RaftAddr))
		} else {
			others = append(others, string(m.RaftAddr))
		}
	}
	return append(voters, others...)
}

// hasRaftState reports whether raft holds any entry or configuration.
func (mgr *Manager) hasRaftState() bool {
	if mgr.raft.LastIndex() > 0 {
		return true
	}
	f := mgr.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// gossipViews turns gossip's members into the reconciler's member source
// (members.go); nil stays nil (gossip off).
func gossipViews(ms []GossipMember) []MemberView {
	if ms == nil {
		return nil
	}
	out := make([]MemberView, 0, len(ms))
	for _, m := range ms {
		status := autopilot.NodeUnknown
		switch m.Status {
		case GossipAlive:
			status = autopilot.NodeAlive
		case GossipFailed:
			status = autopilot.NodeFailed
		case GossipLeft:
			status = autopilot.NodeLeft
		}
		out = append(out, MemberView{ID: m.ID, Addr: m.RaftAddr, APIAddr: m.APIAddr, Status: status, Version: m.Version, Leaving: m.Leaving,
			ClusterID: m.ClusterID, ClusterUntold: m.ClusterUntold})
	}
	return out
}

// wakeReconcilerOnGossip wakes the reconciler at every gossip event, so that
// a join, failure or leave is acted on at once rather than at its next
// interval. It is gossipEvents' one reader.
func (mgr *Manager) wakeReconcilerOnGossip() {
	events := mgr.gossipEvents()
	for {
		select {
		case <-mgr.closing:
			return
		case <-events:
			mgr.reconciler.wake()
		}
	}
}

// gossipByID is what gossip knows of each member, by ID; nil when gossip is off.
func (mgr *Manager) gossipByID() map[string]GossipMember {
	if mgr.gossip == nil {
		return nil
	}
	out := map[string]GossipMember{}
	for _, m := range mgr.gossip.members() {
		out[string(m.ID)] = m
	}
	return out
}

// gossipDelegate refuses members of another cluster (another cluster
// name, or a data dir of another cluster: the admission check) and a
// second node under this node's ID. serf calls NotifyMerge when states
// merge (a join either way) and for every alive message of a member
// (memberlist's Alive delegate), before memberlist takes it in.
type gossipDelegate struct {
	mgr *Manager
	g   *gossipAgent
}

func (d *gossipDelegate) NotifyMerge(members []*serf.Member) error {
	for _, m := range members {
		if err := d.check(m); err != nil {
			return err
		}
	}
	return nil
}

func (d *gossipDelegate) check(m *serf.Member) error {
	mgr := d.mgr
	addr := net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port)))
	if c := m.Tags[tagCluster]; c != d.g.cluster {
		mgr.refusals.log(mgr.log, hclog.Error, "cluster:"+addr, "refusing a gossip member of another cluster", "member", m.Name, "addr", addr, "its_cluster", c, "cluster", d.g.cluster,
			"what_to_do", "give both clusters' nodes the -cluster-name of the cluster they belong to")
		return fmt.Errorf("member %s (%s) is of cluster %q, not %q", m.Name, addr, c, d.g.cluster)
	}
	if err := nodewire.CheckNodeID(m.Name); err != nil {
		mgr.refusals.log(mgr.log, hclog.Error, "id:"+addr, "refusing a gossip member whose node ID is not valid", "member", m.Name, "addr", addr, "error", err.Error(),
			"what_to_do", "give that node a -node-id of letters, digits, '-', '_' and '.'")
		return fmt.Errorf("member %q (%s): node ID %v", m.Name, addr, err)
	}
	if cid, told := m.Tags[tagClusterID]; told && cid != clusterIDNone {
		them := Candidate{ID: raft.ServerID(m.Name), Addr: raft.ServerAddress(m.Tags[tagRaft]), ClusterID: cid}
		if _, err := checkAdmission(mgr.ident.ClusterID(), nil, them); err != nil {
			mgr.refusals.log(mgr.log, hclog.Error, "cluster-id:"+addr, "refusing a gossip member whose data dir belongs to another raft cluster: neither is added to the other's",
				"member", m.Name, "addr", addr, "its_cluster_id", cid, "cluster_id", mgr.ident.ClusterID(), "error", err)
			return fmt.Errorf("member %s (%s) belongs to raft cluster %s, not %s", m.Name, addr, cid, mgr.ident.ClusterID())
		}
	}
	self := d.g.self.Load()
	if m.Name == mgr.cfg.NodeID && self != nil && addr != *self && m.Status != serf.StatusLeft {
		mgr.refusals.log(mgr.log, hclog.Error, "dup:"+addr, "refusing a gossip member that claims this node's ID from another address: node IDs must be unique", "id", m.Name, "its_addr", addr, "this_addr", *self,
			"what_to_do", "give that node its own -node-id")
		return fmt.Errorf("node ID %s is already in use at %s (this node), not %s: node IDs must be unique", m.Name, *self, addr)
	}
	return nil
}

// gossipQueryReply is the answer to a raftlock serf query.
type gossipQueryReply struct {
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

func (mgr *Manager) answerGossipQuery(q *serf.Query) {
	var rep gossipQueryReply
	switch q.Name {
	case queryBootstrapClaim:
		rep = mgr.answerBootstrapClaim(q.Payload)
	case queryBootstrapRelease:
		mgr.releaseBootstrapPromise(q.Payload)
		rep.OK = true
	default:
		return
	}
	b, _ := json.Marshal(rep)
	if err := q.Respond(b); err != nil {
		mgr.log.Debug("answering a gossip query", "query", q.Name, "error", err)
	}
}

// gossipLogWriter takes serf's and memberlist's log lines ("[LEVEL] text")
// into the node's logger at their level. A stop without a leave is what
// Close means to do, so it is no warning; a member that cannot be reached
// says what to do, as raft's lines do.
type gossipLogWriter struct{ log hclog.Logger }

func (w gossipLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := hclog.Info
	for prefix, l := range map[string]hclog.Level{"[TRACE]": hclog.Trace, "[DEBUG]": hclog.Debug, "[INFO]": hclog.Info, "[WARN]": hclog.Warn, "[ERR]": hclog.Error, "[ERROR]": hclog.Error} {
		if strings.HasPrefix(msg, prefix) {
			level, msg = l, strings.TrimSpace(strings.TrimPrefix(msg, prefix))
			break
		}
	}
	var args []any
	switch {
	case strings.Contains(msg, "Shutdown without a Leave"):
		level = hclog.Debug
	case level >= hclog.Warn && (strings.Contains(msg, "connection refused") || strings.Contains(msg, "i/o timeout") || strings.Contains(msg, "Failed to send") || strings.Contains(msg, "failed to join")):
		args = append(args, "what_to_do", "that member is down or unreachable: start it again, or check the network (UDP and TCP) to its gossip port")
	case strings.Contains(msg, "decrypt") || strings.Contains(msg, "unacceptable label"):
		args = append(args, "what_to_do", "a node with another -gossip-key-file or -cluster-name tried to gossip with this one: give it this cluster's, or keep it off this network")
	}
	w.log.Log(level, msg, args...)
	return len(p), nil
}
