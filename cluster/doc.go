// Package cluster is a raftlock node: a hashicorp/raft peer whose replicated
// state machine is the lock table of package fsm, and a lock.Store that the
// application embedding it calls directly.
//
//	cfg := cluster.DefaultConfig()
//	cfg.NodeID, cfg.DataDir, cfg.BindAddr = "web-1", "/var/lib/app/raftlock", "10.0.0.1:7400"
//	cfg.Join = []string{"10.0.0.2:7400", "10.0.0.3:7400"} // or Bootstrap on the first node
//	node, err := cluster.New(cfg)
//	...
//	client := lock.New(node)
//
// Every method of a Node is safe for concurrent use.
//
// # Starting, restarting, stopping
//
// New (there is no separate Open) listens on one TCP port (package
// transport carries raft and the forwarding RPC on it), opens the raft log and
// stable store (fsync on every write; a 512-entry cache in front) and the
// file snapshot store in DataDir, and starts raft. On a fresh DataDir it must
// be told to Bootstrap a new cluster (alone or with Peers) or to Join running
// members; both, or neither, is a config error. On a DataDir with raft state it does neither: it comes back with every
// lock, waiter and the token counter from its snapshot and log (a waiter is
// granted only once its caller claims it again; see "Waiting"), and never
// bootstraps over existing state. So a member restarted with the same Config
// it was first started with (Bootstrap, Bootstrap with Peers, or Join) is the
// same member.
//
// On existing state New also asks, in the background, to be added again:
// the other servers of the latest configuration it knows, then Join, then
// Peers, in turn and with backoff until one says yes (through the leader)
// or the node closes. A node that left or was removed is not in the leader's
// configuration and would otherwise wait forever for a leader that never
// contacts it; after every member of a cluster left in turn, the last one
// would lead alone with the others orphaned. Its own configuration may not
// show its removal (the leader stops replicating to a removed server once it
// appends the change), so a node that still finds itself a member asks too,
// which for a member is a no-op. The request does not hold New up, since
// after a full-cluster restart no leader exists until enough members are back.
//
// Close stops the node without leaving: other members count it as down until
// it returns. This is what a stop should be (the agent's SIGINT/SIGTERM, as
// Consul's servers do): stopping every member and starting them again loses
// nothing and shrinks nothing. Leave is the explicit, permanent exit (the
// agent's `raftlock leave` and -leave-on-terminate): a leader first transfers
// leadership, then the leader removes the node from the configuration, then
// it closes. Only a leader can remove a member, so Leave fails with
// lock.ErrUnavailable once no leader has been known for a few election
// timeouts, leaving the node open and a member, instead of holding a
// stopping process for its whole context. Calls blocked in a closing node
// return lock.ErrClosed.
//
// # The log on disk
//
// DESIGN.md names raft-boltdb/v2; the default is hashicorp/raft-wal instead
// (Config.LogStore), a decision made on measurements. hashicorp/raft writes a
// new entry to the leader's log before it replicates it, so a commit waits
// for two log writes in turn (leader, then a follower) and the cost of one
// write is most of a lock operation's latency. BoltDB pays two fdatasyncs
// and B+tree page rewrites per write; the WAL appends to a preallocated
// segment with one fdatasync. On the 2-core development VM a 3-node
// acquire+release through a follower went from 2.9 to 1.4 ms (p50) and a
// 64-way parallel load from 5,300 to 10,000-11,600 ops/s. Both fsync every
// write before raft counts it, so the safety argument is unchanged.
// LogStoreBoltDB stays available, and a DataDir keeps the format it was
// created with (naming the other one is a config error rather than an empty
// log). The WAL preallocates 64 MiB segment files (Config.WALSegmentSize).
// To move a member to the other format, take it out and bring it back
// empty: Leave (`raftlock leave` for an agent), remove its DataDir, start it
// with Join and the new LogStore; it is added again and sent a snapshot.
// Wiping a member without leaving first would erase its vote in the current
// term, which it could then cast twice, and the entries it had helped
// commit: so when a node with an empty DataDir joins under the ID of a
// member, the leader removes that member and adds the node again as a new
// server (committing the removal needs the others to hold the whole log).
//
// A log that lost or corrupted entries it had stored makes New fail with
// ErrLogDamaged, naming the file and what to do: a mark file in DataDir
// (log-mark) records how far the log reached, written after each write of
// the log returned and lowered before raft deletes entries; the CRC of every
// committed WAL batch is checked at start (walcheck.go says what raft-wal
// recovers by itself and what it does not). A write that fails (a full
// disk) is retried in place; the WAL is opened again from disk when raft-wal
// cannot append after one, and Stats.LogFault says why while it lasts.
//
// # Whose data dir: identity and file modes
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
// members, so the same Peers make the same ID. A node that joins first asks
// the member it asks to add it for that member's IDs (kindIdentity, which
// any member answers), refuses itself if both know their clusters and they
// differ (ErrWrongCluster; New fails on a fresh data dir, the background
// rejoin of an existing one stops and says why in the log; the member logs
// it too), and records the cluster ID once added. The authority is thus each
// member's own file, equal across a cluster because every member got it at
// bootstrap or from a member that added it; it is not replicated in the
// log. A data dir from a version without the file (raft state, no file) is
// not refused: the configured NodeID is adopted and recorded, and the
// cluster ID is learned at the node's next join. A cluster made by such a
// version has no cluster ID: its members are checked by node ID only.
//
// The log and the snapshots hold every owner token, the proof of
// ownership, so everything in DataDir is private to the user the node runs
// as: directories 0700, files 0600, whatever the parent's mode or the
// umask, which the node, embedded in other programs, leaves alone. New
// removes group and other permissions from the data dir and what the node
// keeps in it (files it does not know are left alone); snapshots
// (which raft creates 0755/0644) are made private as each is created,
// before raft writes the state into them, and raft-wal's new segments
// (0644) as each is created.
//
// # Membership: a bounded number of voters
//
// Join asks the listed addresses in turn to add this node; a member that
// does not lead answers with the leader's address and Join asks that one. The
// leader adds it as a voter while fewer than Config.Voters (3 by default)
// voters exist, and as a non-voter otherwise. Non-voters replicate every
// lock, serve and forward calls like any node, but do not vote or acknowledge commits, so embedding a node in 30 replicas
// of a service keeps a 3-voter quorum and 3 fsyncs per commit.
//
// Every node runs a voter keeper; only the leader's acts. It learns from
// raft's heartbeat observations which members stop answering. A voter that
// leaves is replaced at once; a voter that has missed heartbeats for
// DeadVoterTimeout (30s) is replaced by a reachable non-voter (lowest ID
// first, so the choice is deterministic) and then demoted, never before its
// replacement votes, so the count of live voters never drops on the keeper's
// account. A demoted member that returns stays a non-voter until a voter is
// needed. Members named in Peers at bootstrap are all voters, however many.
//
// A non-voter (or demoted voter) that misses heartbeats for
// DeadMemberTimeout (72h, like Consul's reconnect_timeout) is removed from
// the configuration: replicas of a service that crash rather than leave and
// come back under new names would otherwise stay members forever, each a
// replication stream the leader keeps trying. DESIGN.md removes members only
// when they leave gracefully; this is the one exception, and it never
// touches a voter. A removed member that returns asks to join again (see
// above), and is added as a non-voter.
//
// # The state machine adapter
//
// One raft LogCommand entry carries one fsm batch (fsm.AppendBatch). The
// adapter is a raft.BatchingFSM: ApplyBatch applies each entry's commands in
// order and answers each entry with its []fsm.Result; configuration entries
// only advance the applied index, and raft's no-op and barrier entries never
// reach it. A mutex serializes the machine between raft's FSM goroutine and
// the node's reads. Snapshot only starts an fsm.Freezer under that mutex;
// Persist copies 4096 keys per hold of it and encodes and writes each chunk
// outside it, so an apply waits for one chunk at most, however large the
// state (Stats.Freeze sums the holds). A snapshot is a version byte, the
// applied index, and the bytes fsm.Machine.Snapshot would have given when it
// started.
//
// The machine's events (a queued owner granted on hand-off, dropped at its
// wait deadline, or dropped unclaimed) go to the leader's registry of
// waiting acquires parked at it; followers keep none.
//
// # The log clock
//
// Only the leader stamps commands. When raft makes a node leader, it waits for
// a barrier (every earlier entry applied), takes a base no earlier than the
// machine's log time (see below), and from then on stamps base + the
// monotonic time elapsed since, never less than its previous stamp. Stamps
// are taken by one goroutine per term, so they are non-decreasing in log
// order. Until the barrier completes the term answers nothing: queued
// commands wait for it.
//
// The Clock seam has two readings, because a host has two clocks: a wall
// clock (Now) that may step and differs between hosts, and a monotonic one
// (Monotonic) whose readings only mean something subtracted from each other.
// The log clock uses differences of Monotonic readings only; Now is merely
// reported (Stats.WallTime). So a leader's wall clock stepping by an hour, or
// a new leader whose clocks read hours apart from the old one's, neither ends a
// lease early nor shortens a remaining time.
//
// Across outages (an election, or no quorum for minutes) leases keep counting
// down, by this argument: a node's real time since it applied an entry is at
// least what its own monotonic clock measured since, and that entry was
// stamped before it was applied. So a new leader starts its clock at the last
// stamp its node applied (the last in the log: stamps never decrease) plus
// the monotonic time since it applied it — or the best such measure over the
// entries of that raft term, or the machine's log time if later. Its clock
// then lags real time at least as much as the clock that stamped the entry,
// and so, term after term, as the one that granted any lease: no lease ends
// before its holder's deadline. A node that has applied nothing since it
// started has no such measurement (monotonic readings mean nothing across
// processes): its clock starts at the log time, and leases get longer by
// the outage, never shorter.
//
// The leader keeps a timer for the machine's next deadline (a lease end or a
// wait deadline) on the log clock, re-armed after every apply, and proposes a
// tick when it is due, so an expired lock passes to its next waiter without
// anyone polling. A new leader whose node restarted counts from the last
// stamp it applied, so the time since it was stamped is added to leases;
// while any lease or wait is pending, the leader therefore also ticks when
// the committed log time lags its clock by a second.
//
// # Commands, forwarding and retries
//
// A command on the leader joins the term's proposal queue. A command on a
// follower is sent over transport.Call to the leader, which stamps, proposes
// and answers with the fsm.Result. The RPC's messages are this package's own
// compact binary encoding with a version byte (wire.go); decoding garbage
// gives an error, never a panic, and a leader answers a malformed or
// forbidden request (a tick, a stamped command) with a bad-request reply.
// A new kind of request (the list, added after the first) keeps the version:
// a leader that does not know it answers bad request, and every other kind
// keeps working, so a cluster can be upgraded one node at a time. The one
// exception is claims (see "Waiting"): a node from before them cannot read
// the new-term and drop-unclaimed log entries or a version 2 snapshot, and
// would grant waiters the others skip, so across that change every member
// is stopped, upgraded and started again together.
//
// Proposal batching (group commit): one goroutine per term drains the queue
// into a single raft entry (up to 512 commands) and keeps up to two entries
// in flight; what arrives while they commit goes out together next. Under
// load one fsync carries many lock operations, local and forwarded alike.
// (More entries in flight measured slower: raft's leader writes each
// dispatch to its own disk before replicating it, so a third entry only
// splits batches.) One exception to "propose at once": while the queue holds
// nothing but acquires that will certainly be queued (they may wait, and
// the leader's state machine shows another owner holding the key), it is
// held back for up to 2ms. Under contention the holder's release arrives
// meanwhile and both share one entry, so a hand-off costs one commit rather
// than a commit stuck behind a waiter's own entry; the waiters lose nothing,
// since they would wait anyway.
//
// A command is retried across leader changes within the caller's context and
// Config.RequestTimeout:
//   - rejected before it could take effect (no leader known, not the leader,
//     transport.ErrNotSent, raft.ErrNotLeader): retried at once against the
//     leader a member names, or as soon as raft reports a leader change (a
//     short, growing pause of 5–100ms is the fallback);
//   - outcome unknown (raft.ErrLeadershipLost or the leader shutting down
//     after proposing, transport.ErrConnLost): retried the same way with the
//     same owner, which the state machine makes idempotent;
//   - still waiting for the leader's answer when raft here reports another
//     leader (one that froze stops sending heartbeats and is replaced): the
//     call is cancelled, so the transport drops an answer that comes later,
//     and the command goes to the new leader at once, as an unknown outcome
//     — not after RequestTimeout. The old leader cannot commit it any more:
//     a later term has begun. While raft here knows no leader at all, the
//     call goes on (a leader that comes back still answers it) for up to
//     Config.LeaderWait.
//
// While no leader is known the call waits for one at most Config.LeaderWait
// (four election timeouts by default; a waiting acquire at least its wait),
// then gets lock.ErrUnavailable saying there is no leader. When retries run
// out otherwise the caller gets lock.ErrUnavailable (no quorum), or ctx's
// error when its ctx ended (also matching ErrUnavailable if the last attempt
// found no leader) — within its context, never a hang. If
// any attempt's outcome was unknown, the error also matches
// lock.ErrUnknownOutcome: retrying with the same owner is safe.
//
// Release after an unknown outcome: if the retry finds the owner no longer
// holding the key, Release reports true — the first attempt most likely
// released it, and a release is idempotent, as an etcd or Consul unlock is.
// Whether the lease had already run out just before cannot be known then;
// the holder's own deadline (lock.Lock.Remaining) tells it.
//
// # Waiting
//
// An Acquire with Wait is one request to the leader (served in-process on
// the leader itself, kindWaitAcquire from a follower), not cut by
// RequestTimeout: it lasts the wait. The leader registers (key, owner) with
// its waiter registry and proposes the acquire; if queued, the request is
// parked until the leader's own state machine applies the owner's grant —
// applied means committed — or the end of its wait. A grant is answered
// with the lease left by the leader's log clock, counted from when the
// request reached it (less 0.1% of the time parked, for a clock running a
// little fast), or the TTL if that is larger (the grant was applied after
// the request arrived, so neither overstates); the caller reports it counted
// from when Acquire was called. An immediate grant (a free key, or the
// idempotent repeat of an earlier grant to the same owner) is answered with
// the lease left at its stamp, never the TTL. These answers need no leadership check: the grant is
// committed, only expiry can take the key from an owner not yet told, and
// no later leader's log clock is ahead of this one's. The end of the wait
// is answered with a *lock.HeldError describing the holder.
//
// A waiter is granted only while someone is there to receive it:
//   - the caller goes away while queued: its ctx ends, its connection
//     breaks or its node dies, and the transport ends the request's ctx at
//     the leader, which withdraws the waiter (cancel-wait, which also
//     releases a grant applied meanwhile, as it does for a grant whose
//     answer finds the ctx already ended). The withdrawal is proposed in
//     the leader's own term only, and only if no newer call by the same
//     owner has parked since: the registry queues "register and acquire"
//     and "check and cancel-wait" under one lock, and the proposer keeps
//     queue order, so a withdrawal never cancels a newer claim. A caller
//     whose ctx ends also withdraws itself, to confirm it; if that cannot
//     be confirmed within twice the election timeout, its error also
//     matches lock.ErrUnknownOutcome. The leader holds such a cancel-wait
//     back while a call by the same owner is parked: that call withdraws
//     itself when its caller goes, and the cancel-wait follows; or it is a
//     newer one, sent again through another node by a client that gave up
//     on the first, whose claim the cancel-wait must not take.
//   - the leader changes (the parked call fails: not leader, leadership
//     lost, connection lost; or this node hears of a new leader while the
//     call is parked, which cuts it): the caller sends the same acquire,
//     with the same owner and the wait left, to the new leader. The state
//     machine makes that idempotent: an owner already queued keeps its
//     place and deadline, one already granted gets its grant.
//   - claims (package fsm): the leader's first command of each term is
//     new-term, after which a waiter queued earlier is granted only once
//     its caller's acquire has claimed it again; a hand-off skips and drops
//     unclaimed waiters. Four election timeouts into its term the leader
//     drops every waiter still unclaimed. So after a leader change or a
//     restart, waiters whose callers have gone are never handed the lock.
//   - no leader answers before the wait ends (no quorum, so no tick): the
//     caller gives up on its own clock two election timeouts after the
//     wait, withdraws, and returns a *lock.HeldError (or ErrUnavailable
//     when it cannot read the holder either).
//
// Two windows remain, as in any lock service: an answer "granted" that the
// leader hands to the transport just as the caller's connection dies is
// lost with it, and the lease lives out its TTL; and a caller's node cut
// off by a partition, rather than dead, keeps its connection open until TCP
// gives up on it (keepalives), so its waiter may be granted meanwhile.
//
// # Reads
//
// Inspect is linearizable: it is answered by the leader, which notes its
// commit index, confirms it still leads with a round of heartbeats
// (VerifyLeader), waits until its state machine has applied up to that
// index, and reads the key at its log clock. (Entries up to the term's ready
// barrier are known applied; every later entry is one the adapter counts.) A
// follower forwards the read. Remaining is the leader's figure and counts from
// when the question was sent. InspectStale reads the local state machine
// without asking anyone: fast and available without a quorum, but it may be
// behind, and its Remaining may overstate.
//
// List (lock.Lister) takes the same path: the leader confirms its leadership,
// waits for its state machine, and lists the held keys at its log clock, in
// byte order, never their owners; a lease that has run out by then is not
// listed even if no tick has removed it yet. On the leader a listing is one
// read. A follower forwards it, and the leader answers at most 4096 keys per
// request (a page of the longest keys stays near 2 MB, well under the
// transport's 16 MB frame); List follows the pages until it has req.Limit
// keys, or all of them when Limit is 0, as the lock.Lister contract says. A
// listing of several pages is not one snapshot, like any paged listing (etcd's
// range with a limit, Consul's blocking KV list), and each page's Remaining is
// counted from when List was called, which for later pages understates.
// ListStale is the local, possibly stale twin, like InspectStale.
//
// # Visibility
//
// ID, Addr, Leader, State, IsLeader, Servers and Stats describe the node for
// the HTTP API and metrics (package api's NodeStatus maps Stats to them).
// Stats reads local state only and never waits for raft or the network:
//   - the raft configuration's members with their suffrage (voter,
//     nonvoter) and their APIAddr: each member's Config.APIAddr, which
//     members tell each other directly (a small RPC, asked when a member
//     appears or changes address and every 30s, carrying the asker's own
//     address, so a restarted node is known at once); DESIGN.md has this
//     ride on memberlist gossip, which is not built: joins are by address
//     and health comes from raft's heartbeats, so this exchange is what
//     lets a client given one node find the others;
//   - raft's indexes and term, and LeaderChanges: every change of
//     leader raft reported to this node, to another node or to none;
//   - the lock table: keys held and callers queued over all keys (counted by
//     the machine without a walk), and Handoffs and Expired: how many grants
//     to a queued waiter and how many lease ends this node's state machine
//     applied. These are per-node counters, not replicated state: they start
//     at zero with the process, include log entries replayed at start-up,
//     and do not count what a snapshot installed from the leader skipped;
//   - Commit: on the leader, each raft entry it proposed, from raft.Apply
//     until raft answered (replication, the quorum's fsync, and the
//     leader's own apply); Apply: each batch of entries the state machine
//     applied. Both are a cumulative count and total, as a Prometheus
//     summary without quantiles.
package cluster
