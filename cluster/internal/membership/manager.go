package membership

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/cluster/datadir"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/internal/quietlog"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// Node is what membership asks of the raftlock node it runs in (package
// cluster's Node). Raft itself is Config.Raft: membership reads the
// configuration and changes it, and the node does the rest.
type Node interface {
	// Call sends a node RPC request (nodewire.EncodeRequest's bytes) to the
	// node at addr and decodes its reply.
	Call(ctx context.Context, addr string, body []byte) (nodewire.Reply, error)
	// LeaderChanged returns a channel closed at the next change of leader,
	// or when this node's leader term becomes ready. Take it before
	// reading the state it guards, so that a change in between is not
	// missed.
	LeaderChanged() <-chan struct{}
	// JudgingTerm is this node's leader term once the reconciler may judge
	// members in it (its first entry is committed), nil otherwise: while
	// it follows, before the term is ready, once the node closes. It is
	// compared by identity: one term, one value.
	JudgingTerm() any
	// Leading reports whether this node is in a leader term, ready or not.
	Leading() bool
}

// Config is what membership needs of the node's settings (package
// cluster's Config names each), and what it runs on.
type Config struct {
	NodeID string
	// Addr is this node's raft address as the others dial it; BindAddr and
	// AdvertiseAddr are as configured (rejoin asks none of them).
	Addr, BindAddr, AdvertiseAddr string
	APIAddr                       string
	DataDir                       string
	// Join and Peers are where rejoin asks, after the servers of the
	// latest configuration; Peers as raft servers (ID, address).
	Join  []string
	Peers []raft.Server
	// Voters is how many members vote; the timeouts are Config's.
	Voters                              int
	HeartbeatTimeout, RequestTimeout    time.Duration
	DeadVoterTimeout, DeadMemberTimeout time.Duration

	// Gossip: off when GossipBindAddr is empty. ClusterName is never empty
	// (cluster's default fills it).
	GossipBindAddr, GossipAdvertiseAddr string
	GossipKeys                          [][]byte
	ClusterName                         string
	RetryJoin                           []string
	BootstrapExpect                     int

	// Level is the highest command level this node's build reads, Version
	// its raftlock version: what it tells the other members.
	Level   int
	Version string

	Raft  *raft.Raft
	Ident *datadir.IdentityFile
	Log   hclog.Logger
	// Quiet collapses the repeated lines of autopilot, serf and memberlist.
	Quiet *quietlog.Quieter
	// Monotonic reads the node's monotonic clock.
	Monotonic func() time.Duration
	// Closing is closed when the node starts closing; every goroutine
	// membership starts is counted in WG, which the node waits for.
	Closing <-chan struct{}
	WG      *sync.WaitGroup
}

// Manager is a node's membership: who the members are and whether they
// are alive (members.go, gossip.go), how a node gets in (join.go, under
// the admission check of admission.go) and out, and, on the leader, the
// reconciler that keeps the raft configuration (reconcile.go,
// promoter.go). Its methods are safe for concurrent use.
type Manager struct {
	cfg       Config
	node      Node
	log       hclog.Logger
	raft      *raft.Raft
	ident     *datadir.IdentityFile
	quiet     *quietlog.Quieter
	closing   <-chan struct{}
	wg        *sync.WaitGroup
	monotonic func() time.Duration

	peers peerDirectory
	// gossip is the node's serf membership; nil when gossip is off.
	gossip *gossipAgent
	// heartbeats is the leader's record of members that stop answering
	// (members.go); reconciler keeps the raft configuration (reconcile.go).
	heartbeats *heartbeatWatch
	reconciler *reconciler
	// gossipView, when set, is the gossip layer's view of the nodes
	// (members.go); nil: membership is judged by raft's heartbeats alone.
	gossipView atomic.Pointer[MemberSource]
	// leaving is set while the node's Leave runs: the node is about to be
	// removed and must not ask to be added back (gossipRaftJoiner).
	leaving atomic.Bool
	// refusals limits how often a refused admission is logged (admission.go).
	refusals refusalLog
}

// New makes a node's membership; it starts nothing (Start, Run). The
// node's raft runs already; New comes before the node serves requests, as
// a leader's stats request is answered by the reconciler.
func New(cfg Config, node Node) *Manager {
	mgr := &Manager{
		cfg:        cfg,
		node:       node,
		log:        cfg.Log,
		raft:       cfg.Raft,
		ident:      cfg.Ident,
		quiet:      cfg.Quiet,
		closing:    cfg.Closing,
		wg:         cfg.WG,
		monotonic:  cfg.Monotonic,
		peers:      peerDirectory{peers: map[string]peerInfo{}},
		heartbeats: newHeartbeatWatch(),
	}
	mgr.reconciler = newReconciler(mgr)
	return mgr
}

// Start starts what learns of the members: the API address exchange
// without gossip (peers.go), the leader's heartbeat watch, and serf with
// gossip on (nothing joined yet: Run). fresh says the data dir held no
// raft state.
func (mgr *Manager) Start(fresh bool) error {
	if mgr.cfg.GossipBindAddr == "" {
		// Without gossip, members learn each other's API addresses by
		// asking (peers.go); with it, each member's gossip tag says it.
		mgr.wg.Go(mgr.runPeerInfo)
	}
	mgr.watchHeartbeats()
	if mgr.cfg.GossipBindAddr != "" {
		if err := mgr.startGossip(fresh); err != nil {
			return err
		}
		// The reconciler's member source is gossip's view (members.go);
		// runGossip wakes it on every gossip event.
		src := MemberSource(func() []MemberView { return gossipViews(mgr.gossipMembers()) })
		mgr.gossipView.Store(&src)
	}
	return nil
}

// Run starts the reconciler and, with gossip on, gossip's loops:
// retry-join, raft-follows-gossip, BootstrapExpect.
func (mgr *Manager) Run(fresh bool) {
	mgr.wg.Go(mgr.reconciler.run)
	if mgr.gossip != nil {
		mgr.runGossip(fresh)
	}
}

// isLeader reports whether raft says this node leads.
func (mgr *Manager) isLeader() bool { return mgr.raft.State() == raft.Leader }

// leader is the current leader's ID as this node knows it; "" if none.
func (mgr *Manager) leader() string {
	_, id := mgr.raft.LeaderWithID()
	return string(id)
}

// Servers is the latest raft configuration r knows: IDs to addresses.
// Package cluster reads its own with it too.
func Servers(r *raft.Raft) (map[string]string, error) {
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	out := make(map[string]string)
	for _, s := range f.Configuration().Servers {
		out[string(s.ID)] = string(s.Address)
	}
	return out, nil
}

func (mgr *Manager) closed() bool {
	select {
	case <-mgr.closing:
		return true
	default:
		return false
	}
}

// closingContext is a context that ends when the node starts closing (or
// cancel is called), for work a background loop hands to calls that take a
// context.
func (mgr *Manager) closingContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-mgr.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// pause waits for d, or until changed fires, whichever comes first, and
// reports false, at once, when the node starts closing.
func (mgr *Manager) pause(d time.Duration, changed <-chan struct{}) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-mgr.closing:
		return false
	case <-changed:
	case <-timer.C:
	}
	return true
}

// waitFuture waits for a raft future, ctx or the node's closing.
func (mgr *Manager) waitFuture(ctx context.Context, f raft.Future) error {
	return WaitFuture(ctx, f, mgr.closing)
}

// WaitFuture waits for a raft future, ctx or closing (the node's closing:
// then nodewire.ErrShuttingDown). raft's futures cannot be cancelled; the
// goroutine waiting on one ends when raft answers it. Package cluster
// waits on its own futures with it too.
func WaitFuture(ctx context.Context, f raft.Future, closing <-chan struct{}) error {
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-closing:
		return nodewire.ErrShuttingDown
	}
}

// settingError is a problem with a setting the node's caller gave, named
// as package cluster's Config spells it (datadir.ConfigError says how).
func settingError(field, format string, args ...any) error {
	return &datadir.ConfigError{Field: field, Format: format, Args: args}
}
