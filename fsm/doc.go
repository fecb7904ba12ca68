// Package fsm is raftlock's lock state machine: the deterministic core that
// every replica runs on the same log, and that the memory store runs on a
// local clock.
//
// # Commands and log time
//
// A Command (acquire, release, extend, cancel-wait, tick, new-term,
// drop-unclaimed, force-release) carries a Stamp, the
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
//   - A key exists in the machine only while held. The head waiter is granted
//     in the same step as the lease ends, so there is never a queue without a
//     holder, and Len counts held keys; Waiters counts the queued callers
//     of all keys, in constant time.
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
// # Encoding
//
// Commands, batches of commands (one raft entry) and snapshots have a
// versioned, compact binary form with varints in shortest form, so every value
// has exactly one encoding. Decoders bound every length by the input before
// allocating, reject trailing bytes and values beyond the limits, and never
// panic; they are fuzzed. Restore checks everything a machine could not have
// produced and leaves the machine unchanged on error.
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
