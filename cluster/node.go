package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/cluster/datadir"
	"github.com/raftlock/raftlock/cluster/internal/membership"
	"github.com/raftlock/raftlock/cluster/internal/waiting"
	"github.com/raftlock/raftlock/internal/broadcast"
	"github.com/raftlock/raftlock/internal/nodestatus"
	"github.com/raftlock/raftlock/internal/quietlog"
	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/transport"
)

// Node is one member of a raftlock cluster: a raft peer whose replicated
// state machine is the lock table, and a lock.Store that any goroutine may
// use. Create it with New; stop it with Close (or Leave, which also takes it
// out of the cluster).
//
// Every method is safe for concurrent use. A lock call (Acquire, Release,
// Extend, Inspect, List) is retried across leader changes within its ctx and
// Config.RequestTimeout, and returns its answer or an error: ctx's error,
// lock.ErrUnavailable (no leader for Config.LeaderWait, or no quorum),
// lock.ErrClosed (the node closed), or an input error of package lock. An
// error that also matches lock.ErrUnknownOutcome means the command may have
// taken effect; repeating it with the same owner is safe.
type Node struct {
	cfg   Config
	log   hclog.Logger
	clock Clock
	// quiet collapses the repeated warnings and errors of raft and the
	// transport (logquiet.go); closed last by Close, which writes the counts pending.
	quiet *quietlog.Quieter
	// levels are the command levels this node's build reads (levels.go).
	levels commandLevels
	// version is this node's raftlock version, as it tells the other
	// members (raftlockVersion; a test plays other builds with Config.version).
	version string

	tr      *transport.Transport
	store   *datadir.Store
	logKind LogStore
	// unlockDir releases the data dir for another node, once store is closed.
	unlockDir func() error
	raft      *raft.Raft
	sm        *stateMachine
	quotas    *quotas // limits on the state, checked by the leader at admission (quota.go)
	// waiters are this node's waiting acquires: its callers', and those
	// parked at it while it leads (package waiting).
	waiters *waiting.Waiters
	// membership knows the members, gossips, joins, and keeps the raft
	// configuration while this node leads (package membership); set once
	// raft runs.
	membership *membership.Manager
	// removalAsked: a Leave of this node, a member then, asked for its
	// removal. A later Leave that finds the node out of its configuration
	// knows the removal reached it (Leave).
	removalAsked atomic.Bool

	// term is this node's current leadership, nil while it follows.
	term atomic.Pointer[leaderTerm]
	// leaderChanged fires when raft reports a new leader (or none) and when
	// this node's term becomes ready: what a retry waits for.
	leaderChanged *broadcast.Broadcast
	// leaderObserver sees every leader change raft reports; its counters
	// are Stats.LeaderChanges.
	leaderObserver *raft.Observer
	// commits times raft entries this node proposed as leader, from
	// raft.Apply to raft's answer.
	commits timing
	// proposalSizes counts the entries this node proposed as leader by
	// commands per entry (sizes.go).
	proposalSizes sizeHistogram

	// ident records in DataDir whose the directory is (datadir.IdentityFile;
	// identity.go says how members agree on the cluster ID).
	ident *datadir.IdentityFile

	closing   chan struct{} // closed when Close begins
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // the node's own goroutines
}

var (
	_ lock.Store         = (*Node)(nil)
	_ lock.Lister        = (*Node)(nil)
	_ lock.StaleReader   = (*Node)(nil)
	_ lock.AdminStore    = (*Node)(nil)
	_ lock.Watcher       = (*Node)(nil)
	_ lock.MultiKeyStore = (*Node)(nil)
)

// New opens (or creates) the node's data directory, starts its listener and
// raft, and then either bootstraps a new cluster, joins a running one, or —
// when the data directory already holds raft state — simply rejoins with
// every lock and waiter it had. With Join it returns once a member added it
// (bounded by RequestTimeout); it does not wait for a leader otherwise (see
// Ready).
//
// A member restarted with the Config it was first started with (Bootstrap,
// Bootstrap with Peers, or Join) is the same member: it never bootstraps
// over existing state, and asks in the background to be added again, which
// for a member is a no-op. New refuses to start, saying why, on a Config
// error (ErrInvalidConfig), a DataDir of another node (ErrWrongNode) or
// cluster (ErrWrongCluster), or a raft log that lost entries it had stored
// (ErrLogDamaged).
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n, err := newNode(cfg)
	if err != nil {
		return nil, err
	}
	s := &startup{n: n}
	defer s.undoUnlessStarted()
	for _, step := range []func() error{s.listen, s.openDataDir, s.checkClusterState, s.startRaft, s.startServices, s.joinOrRejoin} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	s.started = true
	// A halt (an entry it cannot read, met while replaying the log or
	// later) closes the node; from here, so that New is done first.
	go n.closeOnHalt()
	return n, nil
}

// watchLeadership starts a leader term when raft makes this node leader and
// ends it when raft says leadership is lost.
func (n *Node) watchLeadership(observations <-chan raft.Observation) {
	defer n.endTerm()
	for {
		select {
		case leading := <-n.raft.LeaderCh():
			// Two trues in a row mean leadership was lost and regained in
			// between (raft keeps only the latest signal): a new term either way.
			n.endTerm()
			if leading {
				// Grants answered in an earlier term are not this term's
				// to know: their holds may have ended under other leaders.
				n.waiters.NewTerm()
				t := newLeaderTerm(n)
				n.term.Store(t)
				t.start()
			}
			n.leaderChanged.Fire()
		case <-observations:
			n.leaderChanged.Fire()
		case <-n.closing:
			return
		}
	}
}

func (n *Node) endTerm() {
	if t := n.term.Swap(nil); t != nil {
		t.end()
	}
}

func (n *Node) pokeExpiryTimer() {
	if t := n.term.Load(); t != nil {
		t.pokeExpiryTimer()
	}
}

// Close stops the node without leaving the cluster: raft, the listener and
// every goroutine of the node. Calls blocked in it (a waiting Acquire, a
// command in flight) return lock.ErrClosed. The data directory keeps the
// node's state for a restart. Close is idempotent.
//
// Other members count a closed node as down until it returns. This is what
// a stop should be (the agent's SIGINT/SIGTERM, as Consul's servers do):
// stopping every member and starting them again loses nothing and shrinks
// nothing. Leave is the explicit, permanent exit (the agent's `raftlock
// leave` and -leave-on-terminate).
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.closing)
		n.sm.hub.Close() // blocking queries return lock.ErrClosed
		// Wake WatchLeader's callers, which then see the node closed.
		n.leaderChanged.Fire()
		n.membership.StopGossip(false)
		n.store.Abandon() // a term write waiting for a full disk must not hold Shutdown
		var errs []error
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: raft shutdown: %w", err))
		}
		n.wg.Wait()
		if err := n.tr.Close(); err != nil && !errors.Is(err, transport.ErrClosed) {
			errs = append(errs, fmt.Errorf("cluster: closing transport: %w", err))
		}
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: closing raft store: %w", err))
		}
		if err := n.unlockDir(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: unlocking data dir: %w", err))
		}
		n.closeErr = errors.Join(errs...)
		n.quiet.Close()
	})
	return n.closeErr
}

func (n *Node) closed() bool {
	select {
	case <-n.closing:
		return true
	default:
		return false
	}
}

// ID is the node's NodeID.
func (n *Node) ID() string { return n.cfg.NodeID }

// Addr is the address peers dial to reach this node (raft and forwarding).
func (n *Node) Addr() string { return n.tr.Addr().String() }

// Leader returns the current leader's ID and address as this node knows
// them; empty while no leader is known.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// State is the node's raft state: Follower, Candidate, Leader or Shutdown.
func (n *Node) State() raft.RaftState { return n.raft.State() }

// IsLeader reports whether raft says this node leads.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Stats describes a node for status pages and metrics. Counters are this
// node's own, cumulative since New (not replicated, so they differ between
// nodes), and include entries replayed from the log at start-up; Handoffs
// and Expired do not count what a snapshot installed from the leader
// skipped. Keys and Waiters are counted by the state machine as it goes,
// without a walk.
type Stats struct {
	ID, Addr   string
	State      string // raft state: Follower, Candidate, Leader or Shutdown
	LeaderID   string
	LeaderAddr string
	// Members is the raft configuration, by ID; nil if raft could not
	// tell. Each member's Status and Health are the leader's judgement:
	// on another node as the leader last reported it, with Health.
	Members      []Member
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64 // last entry the lock state machine applied
	// LeaderChanges counts the leader changes raft reported to this node:
	// to another leader, or to none (an election began).
	LeaderChanges uint64

	// Quotas are this node's limits on the state (Config.MaxLocks,
	// MaxSessions, MaxTotalWaiters), what its state machine holds of each,
	// and what it refused while leading.
	Quotas Quotas

	Keys         int           // keys held (each may have waiters)
	Waiters      int           // callers queued, over all keys (wherever they wait)
	Handoffs     uint64        // keys this node's state machine granted to a queued waiter (on release, expiry or cancel)
	Expired      uint64        // leases this node's state machine saw run out
	LastToken    uint64        // highest fencing token granted
	LogTime      time.Duration // the state machine's log time (the leader's clock runs ahead of it between commands)
	WallTime     time.Time     // the node's wall clock when Stats was read, next to LogTime
	LocalWaiters int           // callers of this node blocked in a waiting Acquire
	Restores     uint64        // snapshots restored since New (at start-up, or sent by the leader)
	LogStore     LogStore      // the raft log's format in DataDir
	// LogFault says why writes of the raft log fail (a full disk, say) while
	// they do; "" once one succeeds. The node cannot commit or vote meanwhile.
	LogFault string
	// Halted says why this node stopped by itself (see Node.Err): its state
	// machine met a committed entry or snapshot its build cannot read, or
	// its disk failed a sync of the raft log; "" while it runs. The node has
	// closed itself then.
	Halted string

	// Health is the leader's latest judgement of the cluster (its failure
	// tolerance, healthy voters, and this node's health): the leader's own,
	// or on another node the leader's last report, if recent.
	Health ClusterHealth
	// ReconcileActions are the last changes (at most 16, oldest first) this
	// node's reconciler made to the raft configuration while it led, with
	// their reasons; a node that never led has none.
	ReconcileActions []ReconcileAction
	// ReconcileCounts counts the changes of each kind (ActionAddVoter, ...,
	// every one listed, zero included) this node's reconciler made while it
	// led, since New: for a metric, where ReconcileActions keeps only the
	// last few.
	ReconcileCounts map[string]uint64

	// Commit times the raft entries this node proposed while leading (each
	// carries a batch of commands), from raft.Apply until raft answered:
	// replication, the quorum's fsync and the leader's own apply.
	Commit Timing
	// Apply times this node's state machine applying committed entries:
	// one observation per batch raft hands it.
	Apply Timing
	// Freeze times, per snapshot, how long the copy of the lock state held
	// the state machine's lock, summed over its chunks of at most 4096 keys
	// (the encoding and the write happen beside applies): an apply waits for
	// one chunk at most.
	Freeze Timing

	Raft map[string]string // raft's own statistics, for people to read

	// GossipMembers counts the members gossip knows by state (GossipAlive,
	// GossipFailed, GossipLeft), raft members or not; nil when gossip is off.
	GossipMembers map[string]int
}

// Member is one server of the raft configuration, as Stats shows it: the
// type GET /v1/cluster serves (api.Member is the same).
type Member = nodestatus.Member

// Health of a Member.
const (
	HealthHealthy   = nodestatus.HealthHealthy
	HealthUnhealthy = nodestatus.HealthUnhealthy
)

// Suffrages of a Member, as raft names them, in lower case. Raft no longer
// makes staging members; a configuration an old version wrote may hold one.
const (
	SuffrageVoter    = nodestatus.SuffrageVoter
	SuffrageNonvoter = nodestatus.SuffrageNonvoter
	SuffrageStaging  = nodestatus.SuffrageStaging
)

// Timing is a cumulative count of events and their total duration, as a
// Prometheus summary without quantiles.
type Timing = nodestatus.Timing

// timing accumulates a Timing; safe for concurrent use.
type timing struct {
	mu sync.Mutex // protects t
	t  Timing
}

func (t *timing) observe(d time.Duration) {
	t.mu.Lock()
	t.t.Count++
	t.t.Total += d
	t.mu.Unlock()
}

func (t *timing) read() Timing {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t
}

// Stats returns the node's current figures. It reads local state only and
// never waits for raft or the network.
func (n *Node) Stats() Stats {
	c := n.sm.counts()
	applied, _ := n.sm.appliedIndex()
	lid, laddr := n.Leader()
	s := Stats{
		ID:            n.ID(),
		Addr:          n.Addr(),
		State:         n.raft.State().String(),
		LeaderID:      lid,
		LeaderAddr:    laddr,
		Members:       n.membership.Members(lid),
		Term:          n.raft.CurrentTerm(),
		CommitIndex:   n.raft.CommitIndex(),
		AppliedIndex:  applied,
		LeaderChanges: n.leaderObserver.GetNumObserved() + n.leaderObserver.GetNumDropped(),
		Keys:          c.keys,
		Waiters:       c.waiters,
		Handoffs:      n.sm.handoffs.Load(),
		Expired:       n.sm.expired.Load(),
		LastToken:     c.lastToken,
		LogTime:       c.logTime,
		WallTime:      n.clock.Now(),
		LocalWaiters:  n.waiters.Local(),
		Restores:      n.sm.restores.Load(),
		LogStore:      n.logKind,
		LogFault:      n.store.Fault(),
		Halted:        errorText(n.Err()),
		Commit:        n.commits.read(),
		Apply:         n.sm.applies.read(),
		Freeze:        n.sm.freezes.read(),
		Raft:          n.raft.Stats(),

		Health:           n.membership.Health(),
		ReconcileActions: n.membership.RecentActions(),
		ReconcileCounts:  n.membership.ActionCounts(),
		GossipMembers:    n.membership.GossipCounts(),
	}
	if at := n.leaderClock(); at > 0 {
		s.LogTime = max(s.LogTime, at)
	}
	s.Quotas = Quotas{
		Locks:    n.quotas.locks.usage(c.locks),
		Sessions: n.quotas.sessions.usage(c.sessions),
		Waiters:  n.quotas.waiters.usage(c.waiters),
	}
	return s
}

// Servers returns the raft configuration as this node knows it: IDs to addresses.
func (n *Node) Servers() (map[string]string, error) {
	out, err := membership.Servers(n.raft)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return out, nil
}

// waitFuture waits for a raft future, ctx or the node's closing.
func (n *Node) waitFuture(ctx context.Context, f raft.Future) error {
	return membership.WaitFuture(ctx, f, n.closing)
}
