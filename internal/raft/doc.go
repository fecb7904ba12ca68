// Package raft is hashicorp/raft's engine at the version go.mod requires
// (v1.7.3), copied into raftlock so that its leader can write a new entry
// to its own log while it replicates it (README.md says how to rebase it;
// fork.patch, written by forkdiff.sh, is every change to upstream's files).
//
// # What is copied and what is upstream's
//
// Only the engine is copied: Raft and NewRaft, the main loops (raft.go),
// replication, commitment, the FSM runner, futures, observers, snapshots'
// bookkeeping, configuration changes, Config. Everything a store, a state
// machine or a transport implements or exchanges (Log, LogStore,
// StableStore, SnapshotStore, FSM, Transport, the RPC types,
// Configuration, Server, the futures' interfaces, the errors) is an alias
// of upstream's (upstream.go), so that raft-wal, raft-boltdb, raft-autopilot
// and raftlock's transport work with this package unchanged and errors.Is
// matches either package's errors. Config, Observer and Observation stay
// the fork's own: Config and Observer have unexported fields the engine
// sets, and Observation names the fork's *Raft.
//
// # The change: the leader writes while it replicates
//
// Upstream's leader stores a new batch with its fsync (dispatchLogs calls
// LogStore.StoreLogs) and only then tells the replicators, so a commit waits
// for two fsyncs in turn, the leader's and then a follower's, plus a round
// trip. Raft does not need that order (Ongaro's thesis, §10.2.1): the leader
// may send entries before they are durable on its own disk, provided it
// counts itself in the commit quorum only for entries that are.
//
// With Config.LeaderWritesInParallel set and a log store that can split a
// write (SyncSplitLogStore), dispatchLogs appends the batch without its
// sync (StoreLogsNoSync: readable by GetLog at once, so the replicators can
// send it), notifies the replicators, and hands the sync to a goroutine of
// the leader's term (leaderSync), which calls SyncLogs and then counts the
// leader as holding everything written before that sync began. Followers
// are unchanged: they store with StoreLogs, durable before they answer.
// A store that cannot split (raft-boltdb, or the option off) is used as
// upstream uses it: StoreLogs is durable when it returns.
//
// The invariant: a server is counted in a commit quorum for index i only
// once its copy of i is durable. For the leader, that is a SyncLogs that
// began after i was written returned without error; for a follower, a
// success answer to an AppendEntries that carried i. Two paths keep it:
//
//   - A failed SyncLogs steps the leader down, as a failed StoreLogs does
//     upstream; the futures of its uncommitted entries fail with
//     ErrLeadershipLost.
//   - A node that was leader may still hold entries it never synced when a
//     new leader sends them again; upstream answers success without storing
//     an entry it already has, which would count an entry that is not on
//     disk. Here, an AppendEntries whose entries are all already in the log
//     syncs the log before it answers success (a no-op when nothing is
//     pending).
//
// raftlock's log store (cluster/datadir, walsync.go) splits raft-wal's write
// by deferring the segment file's Sync: raft-wal makes a batch readable
// only once Sync returned, so a deferred one is readable at once. It keeps
// at most the last batch unsynced (raft-wal's recovery at open drops a
// torn final batch, not an earlier one) and syncs before every metadata
// commit; with raft-boltdb, StoreLogsNoSync is a whole write.
//
// Votes still compare the whole log, synced or not: an entry only the
// leader's unsynced write holds was never counted, so a longer claim can
// only make a node refuse a vote it could have given, never elect a leader
// that lacks a committed entry.
package raft
