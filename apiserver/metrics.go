package apiserver

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
)

// latencyBuckets span a memory-store answer (tens of microseconds) to a
// long-poll that waited minutes.
var latencyBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
}

// batchBuckets span a batch of one operation to api.MaxBatchOps.
var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, api.MaxBatchOps}

// metrics are one Handler's, in its own registry.
type metrics struct {
	registry *prometheus.Registry
	ops      *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	waiting  prometheus.Gauge
	// watches counts blocking queries (watch long-polls) in progress.
	watches prometheus.Gauge
	// batchOps observes the operations of each POST /v1/batch.
	batchOps prometheus.Histogram
	// streams counts the Go clients' binary streams open (stream.go).
	streams prometheus.Gauge
	// unauthorized counts requests refused for a missing or wrong token:
	// a client left without its token, or someone guessing.
	unauthorized prometheus.Counter
	// answered counts lock operations answered, for the console's history.
	answered atomic.Uint64
}

func newMetrics(cluster Cluster) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftlock_api_operations_total",
			Help: "Lock operations served over HTTP, by operation and result (ok or the error code).",
		}, []string{"op", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "raftlock_api_operation_duration_seconds",
			Help:    "Time to answer a lock operation over HTTP, by operation; acquire_wait includes the wait.",
			Buckets: latencyBuckets,
		}, []string{"op"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "raftlock_api_waiting_requests",
			Help: "Acquires with a wait (long-polls) in progress on this node.",
		}),
		unauthorized: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftlock_api_unauthorized_total",
			Help: "Requests refused with 401 for a missing or wrong token.",
		}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "raftlock_api_watches_waiting",
			Help: "Blocking queries (watches: GET /v1/inspect or /v1/locks with index) waiting on this node.",
		}),
		batchOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "raftlock_api_batch_operations",
			Help:    "Operations per POST /v1/batch.",
			Buckets: batchBuckets,
		}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "raftlock_api_streams",
			Help: "Binary streams of Go clients (GET /v1/stream, upgraded) open on this node.",
		}),
	}
	m.registry.MustRegister(m.ops, m.latency, m.waiting, m.unauthorized, m.watches, m.batchOps, m.streams,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cluster != nil {
		m.registry.MustRegister(newClusterCollector(cluster))
	}
	return m
}

func (m *metrics) observe(op, result string, took time.Duration) {
	m.answered.Add(1)
	m.ops.WithLabelValues(op, result).Inc()
	m.latency.WithLabelValues(op).Observe(took.Seconds())
}

// clusterCollector turns one Cluster.Status per scrape into metrics: the
// cluster keeps plain counters, and this is the only place that knows
// Prometheus.
type clusterCollector struct {
	cluster Cluster

	hasLeader, isLeader, members                     *prometheus.Desc
	term, commitIndex, appliedIndex                  *prometheus.Desc
	leaderChanges, commitTime, applyTime, freezeTime *prometheus.Desc
	locksHeld, locksWaiters, handoffs, expirations   *prometheus.Desc
	logFault, gossipMembers                          *prometheus.Desc
	halted                                           *prometheus.Desc
	failureTolerance, healthyVoters, ready           *prometheus.Desc
	reconcileActions                                 *prometheus.Desc
	quotaLimit, quotaUsed, quotaRefused              *prometheus.Desc
	watchers, entryCommands                          *prometheus.Desc
}

// nodeCounts is an optional Cluster ability (NodeStatus has it): what a
// node counts for the metrics alone, beside its api.ClusterStatus.
type nodeCounts interface {
	// Watchers is how many watches wait on the node (its store's, the
	// HTTP API's blocking queries among them).
	Watchers() int
	// ProposalSizes counts the raft entries the node proposed as leader
	// by commands per entry.
	ProposalSizes() cluster.SizeHistogram
	// Sessions is how many sessions are live in the node's state (the
	// console shows it; the metric is raftlock_quota_used{quota="sessions"}).
	Sessions() int
}

func newClusterCollector(c Cluster) *clusterCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &clusterCollector{
		cluster:       c,
		hasLeader:     d("raftlock_cluster_has_leader", "1 when this node knows a leader, else 0."),
		isLeader:      d("raftlock_cluster_is_leader", "1 when this node is the leader, else 0."),
		members:       d("raftlock_cluster_members", "Servers in the raft configuration, by suffrage.", "suffrage"),
		term:          d("raftlock_raft_term", "Current raft term."),
		commitIndex:   d("raftlock_raft_commit_index", "Highest raft log index known committed."),
		appliedIndex:  d("raftlock_raft_applied_index", "Highest raft log index applied to this node's state machine."),
		leaderChanges: d("raftlock_cluster_leader_changes_total", "Times this node saw the leader change since it started."),
		commitTime:    d("raftlock_raft_commit_duration_seconds", "Time from proposing a raft entry to its commit, on the leader."),
		applyTime:     d("raftlock_raft_apply_duration_seconds", "Time to apply committed entries to the lock state machine."),
		freezeTime:    d("raftlock_snapshot_freeze_duration_seconds", "Time each snapshot holds lock operations up while it copies the lock state."),
		locksHeld:     d("raftlock_locks_held", "Keys with a live lease, as this node's state machine sees them."),
		locksWaiters:  d("raftlock_locks_waiters", "Callers queued for held keys, over all keys."),
		handoffs:      d("raftlock_locks_handoffs_total", "Locks handed to a queued waiter on release, expiry or cancel."),
		expirations:   d("raftlock_locks_expired_total", "Leases that ran out."),
		logFault:      d("raftlock_raft_log_fault", "1 while this node cannot write its raft log (a full disk, say: /healthz says why), else 0."),
		halted: d("raftlock_halted",
			"1 when this node stopped by itself: it met a committed entry or snapshot its raftlock version cannot read, or its disk failed a sync of the raft log (it closed itself; /healthz says why and what to do), else 0."),
		gossipMembers: d("raftlock_gossip_members", "Members gossip knows, raft members or not, by state (alive, failed, left); absent while gossip is off.", "state"),
		failureTolerance: d("raftlock_cluster_failure_tolerance",
			"Voters the cluster can still lose and keep a quorum, as the leader last judged it (absent while unknown)."),
		healthyVoters: d("raftlock_cluster_healthy_voters", "Healthy voters, as the leader last judged them (absent while unknown)."),
		ready:         d("raftlock_cluster_ready", "1 when /readyz would answer 200 (the cluster would survive losing one more node), else 0."),
		reconcileActions: d("raftlock_reconcile_actions_total",
			"Changes this node's reconciler made to the raft configuration while it led, by action (add-voter, add-nonvoter, promote, demote, remove, update-address).", "action"),
		quotaLimit: d("raftlock_quota_limit",
			"This node's limit on the lock state, by quota (locks: keys with a holder or waiters, and each further hold of a semaphore or read/write key; sessions; waiters: callers queued over all keys); absent when unlimited.", "quota"),
		quotaUsed: d("raftlock_quota_used", "What this node's state machine holds of each quota's count.", "quota"),
		quotaRefused: d("raftlock_quota_refused_total",
			"Acquires and session creates this node refused while leading because they would pass a quota (quota_exceeded), by quota.", "quota"),
		watchers: d("raftlock_watchers", "Watches waiting on this node's store: HTTP blocking queries and embedded watchers (election observers, lock.Watcher calls)."),
		entryCommands: d("raftlock_raft_entry_commands",
			"Commands per raft entry this node proposed while it led (concurrent commands share an entry)."),
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.hasLeader, c.isLeader, c.members, c.term, c.commitIndex, c.appliedIndex,
		c.leaderChanges, c.commitTime, c.applyTime, c.freezeTime,
		c.locksHeld, c.locksWaiters, c.handoffs, c.expirations, c.logFault, c.halted, c.gossipMembers,
		c.failureTolerance, c.healthyVoters, c.ready, c.reconcileActions,
		c.quotaLimit, c.quotaUsed, c.quotaRefused,
		c.watchers, c.entryCommands,
	} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.cluster.Status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	timing := func(d *prometheus.Desc, t api.Timing) {
		ch <- prometheus.MustNewConstSummary(d, t.Count, t.Total.Seconds(), nil)
	}
	gauge(c.hasLeader, boolFloat(st.HasLeader()))
	gauge(c.isLeader, boolFloat(st.Role == api.RoleLeader))
	bySuffrage := map[string]int{api.SuffrageVoter: 0, api.SuffrageNonvoter: 0, api.SuffrageStaging: 0}
	for _, m := range st.Members {
		bySuffrage[m.Suffrage]++
	}
	for suffrage, n := range bySuffrage {
		gauge(c.members, float64(n), suffrage)
	}
	gauge(c.term, float64(st.Term))
	gauge(c.commitIndex, float64(st.CommitIndex))
	gauge(c.appliedIndex, float64(st.AppliedIndex))
	counter(c.leaderChanges, float64(st.LeaderChanges))
	timing(c.commitTime, st.Commit)
	timing(c.applyTime, st.Apply)
	timing(c.freezeTime, st.Freeze)
	gauge(c.logFault, boolFloat(st.LogFault != ""))
	gauge(c.halted, boolFloat(st.Halted != ""))
	for state, n := range st.GossipMembers {
		gauge(c.gossipMembers, float64(n), state)
	}
	for action, n := range st.ReconcileCounts {
		ch <- prometheus.MustNewConstMetric(c.reconcileActions, prometheus.CounterValue, float64(n), action)
	}
	if h := st.Health; h != nil {
		gauge(c.failureTolerance, float64(h.FailureTolerance))
		gauge(c.healthyVoters, float64(h.HealthyVoters))
	}
	if r := st.Readiness; r != nil {
		gauge(c.ready, boolFloat(r.Ready))
	}
	if l := st.Locks; l != nil {
		gauge(c.locksHeld, float64(l.Held))
		gauge(c.locksWaiters, float64(l.Waiters))
		counter(c.handoffs, float64(l.Handoffs))
		counter(c.expirations, float64(l.Expired))
	}
	if q := st.Quotas; q != nil {
		for name, u := range map[string]api.Quota{"locks": q.Locks, "sessions": q.Sessions, "waiters": q.Waiters} {
			if u.Limit > 0 {
				gauge(c.quotaLimit, float64(u.Limit), name)
			}
			gauge(c.quotaUsed, float64(u.Used), name)
			ch <- prometheus.MustNewConstMetric(c.quotaRefused, prometheus.CounterValue, float64(u.Refused), name)
		}
	}
	if nc, ok := c.cluster.(nodeCounts); ok {
		gauge(c.watchers, float64(nc.Watchers()))
		sizes := nc.ProposalSizes()
		buckets := make(map[float64]uint64, len(sizes.Bounds))
		for i, b := range sizes.Bounds {
			buckets[float64(b)] = sizes.Buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(c.entryCommands, sizes.Count, float64(sizes.Sum), buckets)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
