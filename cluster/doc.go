// Package cluster is a raftlock node: a hashicorp/raft peer whose replicated
// state machine is the lock table of package fsm, and a lock.Store that the
// application embedding it calls directly.
//
//	cfg := cluster.DefaultConfig()
//	cfg.NodeID, cfg.DataDir, cfg.BindAddr = "web-1", "/var/lib/app/raftlock", "10.0.0.1:7400"
//	cfg.Join = []string{"10.0.0.2:7400", "10.0.0.3:7400"} // or Bootstrap on the first node
//	node, err := cluster.New(cfg)
//	...
//	defer node.Close()
//	client := lock.New(node)
//
// A Node listens on one TCP port (package transport carries raft and the
// forwarding RPC on it) and keeps its raft log, snapshots and identity in
// Config.DataDir. New starts it: on a fresh DataDir it bootstraps a cluster
// or joins one, as Config says; on a DataDir with state it comes back with
// every lock, waiter and the token counter it had, and asks to be a member
// again. Ready waits until it can answer; WatchLeader reports leader changes.
// Close stops it without leaving (a restart loses nothing); Leave takes it
// out of the cluster for good. Every method of a Node is safe for concurrent
// use, and calls blocked in a closing node return lock.ErrClosed.
//
// Any node serves every call: a follower forwards commands and linearizable
// reads to the leader, and a waiting Acquire is parked at the leader until
// its grant or the end of its wait is applied. What a caller can rely on:
//   - Lock operations and Inspect and List are linearizable (InspectStale
//     and ListStale are not, by design), and fencing tokens strictly increase
//     across keys, leaders and restarts; none is issued twice.
//   - Lease time is measured on the leader's log clock (monotonic, carried
//     across leader changes), never on wall clocks, so no lease ends in the
//     cluster before its holder's own deadline: when it sent the request
//     plus the Remaining it was told.
//   - A call returns within its ctx and Config.RequestTimeout (a waiting
//     acquire: its wait): with its answer, lock.ErrUnavailable (no leader or
//     no quorum), ctx's error, or lock.ErrClosed. An error that also matches
//     lock.ErrUnknownOutcome means the command may have taken effect;
//     repeating it with the same owner is safe, as the state machine makes
//     it idempotent. ForceRelease (lock.AdminStore), which names no owner,
//     is the exception: it is never repeated, and Inspect tells whether it
//     took effect.
//   - Nothing acknowledged is lost: every log write is fsynced before raft
//     counts it, and a node whose log lost entries, or whose DataDir belongs
//     to another node or cluster, refuses to start (ErrLogDamaged,
//     ErrWrongNode, ErrWrongCluster) and says why.
//   - The state clients can make every member hold is bounded
//     (Config.MaxLocks, MaxSessions, MaxTotalWaiters): an acquire or
//     session create that would add state past a limit fails with
//     lock.ErrQuotaExceeded, refused by the leader before it is proposed,
//     from its applied state (so the state may pass a limit by the commands
//     in flight: a memory guard, not an exact count; quota.go says why);
//     nothing that frees or keeps state is ever refused.
//
// With Config.GossipBindAddr set, a node also gossips (hashicorp/serf on
// memberlist, on that second port, UDP and TCP): membership, failure
// detection and each member's raft address, API address, role and version,
// separated by Config.ClusterName and encrypted with Config.GossipKeys.
// Config.RetryJoin then finds other members by address or DNS name (a
// node started again on its DataDir also rejoins the members it knew,
// kept there), and Config.BootstrapExpect lets N identical nodes form one
// cluster as soon as they see each other, and never two: the bootstrap
// needs a promise from each of the N, a node promises one proposer at a
// time and never takes back a promise to one that bootstrapped, and no
// node with raft state, or that sees a member of a cluster, promises; so
// two bootstraps would need 2N fresh nodes in two groups that cannot see
// each other (or 2N-1 and a crash within a second of a promise, which
// lives in memory: package membership's bootstrap_expect.go has the
// details and why). A node in
// gossip but not in the raft configuration asks the members that are to
// add it. Gossip is off unless GossipBindAddr is set (it opens ports); the
// agent sets it with -bootstrap-expect, -retry-join or -gossip-bind.
//
// A node that joins is added as a voter while fewer than Config.Voters (3
// by default) exist, and as a non-voter otherwise; with gossip on, it is
// always added as a non-voter and promoted, if voters are missing, once it
// has been healthy for a few seconds (at once when that makes the number of
// voters odd). Non-voters serve every
// call but do not take part in commits, so a service can embed a node in
// each of many replicas. The leader keeps Config.Voters of the healthy
// members voting (a dead voter is replaced by a non-voter within seconds)
// and removes the members that are gone, with hashicorp/raft-autopilot.
// Readiness says whether the cluster would survive losing one more node:
// what an orchestrator waits for before taking the next replica down.
// Stats describes a node for status pages and metrics.
//
// Members may run different raftlock versions during a rolling upgrade.
// The leader proposes no command that some member's version cannot read
// (ErrMemberTooOld; levels.go; Stats shows each member's version and
// command level, and marks the members below the leader's), and a member
// that meets a committed entry or snapshot it cannot read anyway stops
// there, never skips it: it closes itself and Done and Err say why
// (ErrHalted; halt.go). So does a member whose disk failed a sync of the
// raft log (ErrLogSyncFailed): it cannot tell what is on disk. A node answers
// blocking queries (lock.Watcher: WatchKey, WatchList) from its own state,
// indexed by the raft log index, which is the same on every member.
//
// The reasons behind each of these are comments next to the code that keeps
// them: node.go and start.go (starting, restarting, stopping), leave.go
// (leaving), package datadir (the data dir: the log on disk and the checks
// that refuse a damaged one, whose data dir it is, file modes), identity.go
// (cluster IDs between members), package membership (admission.go: who may
// be added, one check on every path; reconcile.go, promoter.go and
// members.go: membership, failure tolerance, readiness; peers.go: how
// members learn each other's API addresses; gossip.go and gossip_join.go:
// gossip, retry-join; bootstrap_expect.go; join.go: joining and rejoining),
// statemachine.go (the raft FSM adapter), logclock.go (the log clock),
// forward.go (forwarding and retries), leader.go (proposal batching),
// group.go (commands of concurrent callers sent to the leader together:
// NewCommandGroup), package waiting (waiting at the leader; waiting.go
// gives it the node), package retry (retry pacing), store.go (reads),
// watch.go (watches), quota.go (limits on the state clients can make every
// member hold: Config.MaxLocks, MaxSessions, MaxTotalWaiters), levels.go
// and halt.go (mixed versions).
package cluster
