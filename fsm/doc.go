// Package fsm is raftlock's lock state machine: the deterministic core that
// every replica runs on the same log, and that the memory store runs on a
// local clock.
//
// # Commands and log time
//
// A Command (acquire, acquire-all, release, extend, cancel-wait, tick,
// new-term, drop-unclaimed, force-release, the session ops) carries a Stamp, the
// leader's log clock. Apply sets the machine's clock to max(now, Stamp) and
// first processes every deadline that is due by then, then the command. A
// lease is held while now < ExpiresAt. Apply reads no clock, no randomness and
// never depends on map order, so two machines fed the same commands produce
// the same Results, the same Events and byte-identical Snapshots.
//
// Due deadlines are processed one by one in (time, kind, key, owner) order,
// each judged at its own time t: wait deadlines come before lease ends at the
// same t, so a waiter whose deadline is exactly the moment the lock frees
// does not get it. When a lease ends at t, the head of the key's FIFO queue
// (whose deadline is then later than t) is granted at once with a lease of its
// requested TTL counted from the machine's now, not from t: the waiter learns
// of the grant only now.
//
// # Claims
//
// A queued waiter is granted only if someone is still there to receive it.
// In a cluster, a waiter's caller waits in a call parked at the leader; a
// leader change or a restart ends every such call, and the callers still
// there send their acquire again. So the machine keeps an epoch, bumped by
// OpNewTerm (the first command of each leader term). A waiter records the
// epoch in which it queued or last claimed its place, which an acquire by
// the owner already queued does (it keeps its place and its deadline). A
// hand-off skips and drops the waiters of an older epoch, emitting
// EventUnclaimed for each, and grants the first current one, so a lock is
// never handed to a caller that has gone. OpDropUnclaimed, proposed by a
// leader a grace period into its term, drops every waiter still unclaimed,
// key by key in key order, so they stop counting in queues. Unclaimed
// counts them in constant time. The memory store never starts a term: its
// waiters stay in epoch 0 and behave as before.
//
// # Semantic decisions
//
//   - Acquire by the live holder is idempotent: StatusGranted with the same
//     token and the same ExpiresAt; the lease is not lengthened (use extend).
//     Acquire by an owner already queued answers StatusQueued with its current
//     position and keeps its original wait deadline; it also claims its place
//     in the current epoch (see Claims).
//   - A release is idempotent too: a release by an owner that no longer
//     holds the key answers StatusReleased (Token zero, changing nothing)
//     when it repeats the release by that owner that ended its hold there,
//     as a caller whose answer was lost sends it again; otherwise (the
//     lease ran out, was force-released or canceled, or the owner acquired
//     the key again since) it answers StatusNotHeld. A session's destroy
//     likewise. The machine remembers such releases for ReleaseMemory of
//     log time, at most MaxRememberedReleases of them; releases.go says
//     why this design and what it costs.
//   - Extend sets the lease to end TTL from now, which may shorten it, as
//     Redis PEXPIRE and Consul session renewals do.
//   - Cancel-wait by an owner that was granted meanwhile releases the lock
//     (StatusReleased) and hands it on, so a caller that gave up waiting never
//     leaves a lease behind.
//   - Force-release (an operator's admin release) carries a key and no
//     owner: it ends the key's lease whoever holds it and hands the key to
//     the next claimed waiter in the same step, exactly as the holder's
//     release would. Its Result carries the ended lease's token, never the
//     owner; a key nobody holds answers StatusNotHeld. The former holder's
//     release and extend then answer StatusNotHeld.
//   - A command that fails Validate answers StatusInvalid but its stamp, if
//     within 0..MaxStamp, still moves the clock: it acts as a tick.
//   - A key exists in the machine only while held or waited for. The head
//     waiter is granted in the same step as the lease ends, so a queue
//     without a holder exists only while a multi-key waiter heads it and
//     waits for another of its keys (the key is reserved: see "Multi-key
//     locks"). Len counts the keys that are held or reserved; Waiters
//     counts the queued callers of all keys (a multi-key waiter once per
//     key), in constant time, and ExtraHolds the holds of semaphore and
//     read/write keys beyond each key's first. Growth says, without
//     changing anything, how much a command could add to these and to
//     Sessions: what a store that bounds its state checks first.
//   - Lookup, Range and RangeFrom take a read time at, for a leader whose log
//     clock has moved past the last applied stamp. They report leases that
//     have ended by then as not held, but do not play the hand-off to waiters
//     forward; the tick at that time does.
//   - Range lists held keys in byte order, like etcd's range reads and
//     Consul's KV listings. RangeFrom(prefix, after, ...) starts strictly
//     after a key, which need not be held: the last key of one page is the
//     After of the next, and a key released meanwhile does not lose the
//     caller's place.
//   - Event times: EventExpired and EventWaitExpired carry the deadline that
//     was reached; EventGranted carries the machine's now, from which the new
//     lease is counted.
//   - A not-held answer reveals nothing about the holder (Token zero); a
//     canceled answer carries the holder's token and expiry, like queued.
//   - Fencing tokens come from one counter for all keys, kept in the snapshot;
//     the first token is 1, and 0 means "no token".
//
// # Sessions
//
// A session (OpSessionCreate) is a lease with an ID minted by its client,
// a TTL and an optional lock-delay, kept alive by OpSessionRenew. An
// acquire may name a session instead of a TTL: the lock then has no lease
// of its own and lasts exactly as long as the session, so one renew keeps
// every lock bound to it. A session ends when its deadline passes (by the
// log clock, like a lease; the deadline is in NextDeadline) or by
// OpSessionDestroy; either way every lock it holds is released in that one
// command, key by key in key order, each handed to its next waiter, and its
// waiters leave their queues. After an expiry (not a destroy) with a
// lock-delay, each key it held stays unavailable (held by nobody, Delayed)
// until the delay runs out, then goes to its next waiter. Tokens work as
// for leases. An acquire may also carry metadata (at most MaxMetaLen
// bytes), kept with the holder or waiter and returned by Lookup and Range.
// Sessions and metadata appeared with snapshot version 3; versions 1 and 2
// still restore.
//
// # Semaphores and read/write keys
//
// A key's Kind is fixed while the key exists (held or waited for) and set
// by the acquire that creates it: a mutex (KindMutex, the zero value: one
// holder), a semaphore (KindSemaphore with Limit N, 1..MaxHolders: at most
// N holders; N fixed by the first acquirer) or a read/write key (KindRW:
// up to MaxHolders holders that asked Shared, or one that did not). An
// acquire of another kind, or of a semaphore with another N, while the
// key exists answers StatusKindMismatch with the key's Kind and Limit and
// changes nothing; once nobody holds or waits, the key is gone and any
// kind may create it again.
//
// Every holder of a semaphore or read/write key is on its own, as a
// mutex's holder is: its own owner, fencing token (from the one counter),
// lease or session, and metadata; released, extended, canceled and expired
// on its own, owner-checked; an acquire by a holder or waiter is its
// idempotent retry (the same grant or place) only with the same session
// and mode, and otherwise answers StatusHeld. The queue is strictly FIFO:
// a newcomer is granted at once only when nobody waits and it fits; the
// head waiter is granted as soon as it fits, and a head that does not fit
// stops the queue (nobody behind it goes first). So a writer waits only for
// the readers ahead of it, never for readers that came after it, and a
// semaphore waiter is never passed. Whatever frees room (a release, an
// expiry, a cancel, a session's end, a waiter leaving the head) grants, in
// the same command, every waiter at the head that now fits, one
// EventGranted each, in queue order: several readers, or several slots.
// A session that expires with a lock-delay keeps each slot it held taken
// (by nobody; Holders counts it) until the delay ends. Force-release ends
// every hold of such a key (the Result's token is the newest ended) and
// grants who then fits. They appeared with snapshot version 4 (versions 1
// to 3 still restore) and the op-12 acquire encoding.
//
// # Multi-key locks
//
// OpAcquireAll takes a set of 1..MaxKeys mutex keys (strictly ascending in
// the command, so a set has one encoding and is applied in one order) for
// one owner, all or nothing, with one lease (TTL; a session-bound set is
// refused with ErrKeysSession rather than tie a set's many keys to a
// session's key-by-key ending) and optional Wait and metadata. A key in
// the set that is a semaphore or read/write key answers
// StatusKindMismatch with that key's Kind and Limit, and nothing changes.
//
//   - Granted at once when every key is free: not held, not kept by a
//     lock-delay, nobody waiting. Each key then reads as a mutex held by
//     the owner, all with one fencing token (one per grant) and one lease
//     end (KeyState.SetKeys says how many keys the grant has).
//   - Otherwise, with a Wait, the owner is queued on every key of the set
//     in this one command (StatusQueued, Waiters its worst place); without
//     one, StatusHeld about the first key not free. A set's wait has one
//     deadline for all its keys.
//   - Strict FIFO per key. A waiting set at the head of a key whose holder
//     has gone keeps the key reserved for itself while another of its keys
//     is still held or has someone ahead of it: nobody behind it is granted
//     that key, a try-acquire of it answers StatusHeld, force-release
//     answers StatusNotHeld (nobody holds it), and reads show it not held,
//     KeyState.Reserved. When its last key frees, the set is granted every
//     key in that command (one EventGranted per key, in key order).
//   - Whatever ends a held set (release, extend's lease running out,
//     force-release, cancel-wait by a set that was granted meanwhile) is
//     addressed to any one of its keys and acts on all of them: a
//     Release(key, owner) of any key of the set releases the whole set and
//     hands each key to its next waiter, in key order, in this command.
//     Extend of any key extends the whole set's lease. An expiry emits
//     EventExpired for every key.
//   - Whatever ends a waiting set (its wait deadline, cancel-wait on any
//     of its keys, going unclaimed after a leader change) takes it out of
//     every queue in one command, and every key it had reserved goes at
//     once to its next waiter (a single waiter is granted; another set is
//     granted if it is now ready, else keeps the key reserved in turn).
//   - An owner has at most one multi-key acquisition. Its retry with the
//     same keys is idempotent (the same grant, or the same places claimed
//     again); an acquire-all with another set, or a single-key acquire of
//     one of its keys, answers StatusHeld and changes nothing: one
//     acquisition is one set, and a changed set is a bug the caller should
//     hear of. An acquire-all by an owner that holds or waits for one of
//     the keys singly also answers StatusHeld.
//
// Why no set ever starves and no two sets deadlock: every queue is in the
// order of the commands that enqueued its waiters, and a set joins all its
// queues in one command, so there is one global order of waiters (the log
// order) and each queue is a subsequence of it. Take the oldest waiting
// set W. On each of its keys, everything ahead of W is a single waiter or
// a holder — no set is ahead, since W is the oldest — and single waiters
// are granted as soon as their key frees and end within their lease. So
// each of W's keys reaches W at the head within finite time and then stays
// reserved for W (nobody passes a reserved key); once the last one does,
// W is granted. Then the next-oldest set is the oldest, and so on. Two
// sets that share keys are in the same order in all their shared queues,
// so neither can hold a key the other waits for while waiting for a key
// the other holds: waiting sets hold nothing, and granting is all or
// nothing. A reserved key is idle until its set is granted; this is the
// price of never starving a set, as in Consul's and ZooKeeper's fair
// locks, and it is bounded by the leases of the keys still held.
//
// Multi-key locks appeared with snapshot version 5 (versions 1 to 4 still
// restore) and the op-13 command; op codes 14 and 15 are reserved. The
// remembered releases appeared with snapshot version 6 (versions 1 to 5
// still restore, remembering none); no command changed, but a build from
// before them cannot restore version 6, so it is written only for members
// that all read ReleasesLevel (SnapshotVersionFor; SnapshotIn writes
// version 5 otherwise), and a build from before them answers a repeated
// release not held.
//
// # Encoding
//
// Commands, batches of commands (one raft entry) and snapshots have a
// versioned, compact binary form with varints in shortest form, so every value
// has exactly one encoding. Decoders bound every length by the input before
// allocating, reject trailing bytes and values beyond the limits, and never
// panic; they are fuzzed. Restore checks everything a machine could not have
// produced and leaves the machine unchanged on error. RestoreFrom does the
// same from a stream of known size, decoding through a small window as it
// reads, so that a restore never holds the whole snapshot in memory.
//
// # Using a Machine
//
// A Machine is not safe for concurrent use: its owner serializes Apply,
// the reads, Snapshot and Restore (see Machine). Apply is O(log n) in the
// keys held and NextDeadline O(1); the data structures and what each
// operation costs are described in machine.go. A Freezer (StartFreeze)
// copies a large state for a snapshot a chunk at a time with applies in
// between, and still writes exactly Snapshot's bytes of its start.
package fsm
