// Package redis is a lock.Store over Redis: the whole lock API of package
// lock (mutexes, semaphores, read/write locks, multi-key locks, sessions
// with lock-delay, metadata, force-release, listing, watches, and the
// recipes built on them: lockhttp, once, election) for applications that
// already run a Redis and want every instance of the app to share its
// locks there.
//
//	import lockredis "github.com/raftlock/raftlock/stores/redis"
//
//	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379"})
//	store := lockredis.New(rdb, lockredis.Options{})
//	defer store.Close()
//	c := lock.New(store)
//
// It is a module of its own, so that a program that does not use it never
// links a Redis client.
//
// # How
//
// Every operation is one Lua script run on the server (EVALSHA): one atomic
// step, one round trip. A key's state (its holders, each with owner, token,
// expiry and metadata, and its FIFO queue of waiters) is one Redis value; a
// step reads it, drops the holds and waiters whose time is up by the
// server's clock (TIME), acts, hands the room it made to the waiters at the
// head of the queue, and writes it back. Release and extend compare the
// owner before they act; nothing ever deletes a lock blindly.
//
// Fencing tokens come from one counter for all keys, and a token is never
// below the server's clock in microseconds: a counter that lost its last
// increments (a crash without fsync, a failover to a replica that lagged,
// FLUSHALL) still issues tokens above the ones it lost, unless the server's
// clock went back or the store averaged more than one grant a microsecond.
//
// A waiting acquire queues in the key's state and blocks on a wake-up stream
// of its own (XREAD BLOCK): the step that hands it the key (a release, a
// force-release, a waiter leaving) wakes it, so a hand-off costs one step
// and no polling. Redis has no timer to end an expired lease, so a waiter
// blocks at most until the earliest hold on its key is due to end, then
// looks again: that look ends the lease and hands the key on. A waiter also
// looks every Options.Heartbeat, which proves it alive; one that has not
// looked for three heartbeats (its process died) is dropped from the queue,
// so that the key is never handed to nobody. A Store reads the wake-ups of
// all its waiting acquires on one connection (one XREAD over all their
// streams), so waiters do not take the client's pool.
//
// Lease.Remaining and KeyInfo.Remaining are the expiry minus the server's
// clock read in the same step, counted by the caller from when it sent the
// request: they never overstate, as long as the server's clock does not
// jump forward.
//
// # What Redis does not give
//
// The embedded cluster replicates every step to a quorum before it answers,
// keeps its clock in the raft log, and never loses a committed grant. A Redis
// store is as safe as the Redis under it, and no safer:
//
//   - Replication is asynchronous. A failover (Sentinel, a managed service)
//     to a replica that had not received the last steps forgets the grants
//     they made: a second owner can take a lock its first owner still holds.
//     The fencing token is the defence: the new grant's token is above the
//     lost one (see above), so a resource that refuses lower tokens refuses
//     the first owner once it has seen the second.
//   - Without appendonly yes and appendfsync always, a crash loses the last
//     writes (up to a second with everysec, everything since the last
//     snapshot without AOF), with the same effect.
//   - Leases are counted by the server's wall clock, which Redis also
//     expires keys by: a clock step forward on the Redis host shortens every
//     lease. The cluster's log clock cannot step.
//   - A key the server loses (FLUSHALL, eviction under a maxmemory-policy
//     other than noeviction, a restart without persistence) is a lock
//     released: its holder's next Extend answers lock.ErrNotHeld, and
//     lock.Lock.Run cancels its callback. Run Redis with noeviction.
//   - Redis Cluster is not supported: the token counter and a key's state
//     live in different slots. Use one primary (with replicas and Sentinel
//     if you like), Redis 6.2 or later (tested on 7.0).
//
// Errors: an unreachable server, refused credentials, a server that is
// read-only (a replica), loading or out of memory give an error matching
// lock.ErrUnavailable that names the server; a connection that failed after
// the request was sent also matches lock.ErrUnknownOutcome (a retry with the
// same owner is safe: acquire, release and extend are idempotent per owner).
//
// # What it implements
//
// lock.Store, lock.MultiKeyStore, lock.Lister, lock.AdminStore,
// lock.SessionStore and lock.Watcher. Not lock.StaleReader: every read is
// the primary's. No quotas (lock.ErrQuotaExceeded): a key takes at most
// lock.MaxWaiters waiters, and each step costs time in the number of
// holders and waiters of the keys it touches (and each waiter takes a step
// every heartbeat), so keep queues to hundreds, not tens of thousands.
//
// A multi-key set is a hold (or a waiter) with the same token on each of
// its keys and a record of its keys: it is granted in the step that frees
// the last of its keys while it heads every queue, and keys it heads while
// another is held are kept for it (reserved), as in the cluster.
//
// Watches: the index is the store's count of changes, kept in Redis (the
// same for every Store on that Redis and prefix), and the server keeps a
// log of the last few thousand changes, so that a watch tells a change it
// missed from none; an index older than the log wakes at once. Changes are
// heard over one pub/sub subscription per Store.
//
// A session is a Redis hash with its own expiry by the server's clock; a lock
// bound to a session that has ended (expired, destroyed, or lost by the
// server) is free, after the session's lock-delay when it expired. A renew
// answers how many keys the session still holds or waits for
// (lock.SessionLease.Keys), which the session's keep-alive checks its holds
// by.
//
// Release and DestroySession are idempotent as in the cluster: the store
// remembers each release that ended its owner's own hold (under the key it
// named, for a multi-key set) and each destroy that ended a session, for 5
// minutes and at most 65,536 of them (one sorted set), so that a repeat
// answers true again and changes nothing; the owner's next acquire of the
// key (a create of the session) forgets it, and an expiry or a
// force-release is never remembered.
//
// The package's tests run the conformance suite (lock/locktest) against a
// redis-server they start: all 51 of its subtests pass. What Redis cannot
// promise (above) is outside what a conformance suite on one healthy
// server can see.
package redis
