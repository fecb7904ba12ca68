// Package lock is raftlock's user API: named, leased, fenced locks that
// exclude callers across processes and hosts, kept by a Store.
//
//	c := lock.New(store)                            // a cluster node, an API client, or memstore.New()
//	ran, err := c.Lock("invoice:42").Run(ctx, func(ctx context.Context) error {
//		return charge(ctx, invoice)                  // only one caller at a time, anywhere
//	})
//
// Reach for a lock when doing a thing twice at once would be wrong (charging
// a card, running a migration, one cron tick across replicas), not merely
// wasteful.
//
// # Handles
//
// Client.Lock(key, opts...) returns a *Lock, a handle on one key with a TTL
// (DefaultTTL, 30s, unless given the TTL option). It touches nothing until
// used. Options are typed by the call that reads them (LockOption,
// AcquireOption, RunOption, ExtendOption, ReadOption, SessionOption), so a
// misplaced one, such as a TTL given to Acquire, does not compile:
//
//   - Run(ctx, fn, opts...) acquires (waiting until ctx is done, or for the
//     Wait option), runs fn, and always releases, also when fn returns an
//     error or panics. It keeps the lease alive while fn runs (an extend every
//     TTL/3) and cancels fn's context as soon as the lease is or may be lost.
//     TryRun never waits. Prefer these: they cannot forget the release.
//   - Acquire(ctx, opts...) and TryAcquire(ctx), then Release(ctx), when the
//     lock's lifetime does not fit one callback; KeepAlive(ctx) keeps such a
//     lease alive as Run does.
//   - Extend(ctx, opts...) pushes the expiry out (ErrNotHeld once the lease is
//     lost: never a silent no-op); IsLocked, IsExpired, Remaining, Token.
//   - Client.Inspect(ctx, key) and Client.List(ctx, req) look at keys without
//     a handle.
//   - Serialize and Client.Restore hand a held lock to another process, which
//     can then extend or release the same lease. (A lock bound to a session
//     travels without it: it still ends with the session.)
//
// # Semantics
//
// These follow what etcd, Consul and Redis lock users expect.
//
//   - A lock always expires. There is no hold-forever mode: a holder that
//     crashes blocks others for at most its TTL. Pick a TTL comfortably longer
//     than the work, or use Run, which extends it for you.
//   - Waiting. Acquire and Run wait while the key is held, until ctx is done
//     (the error matches ctx.Err()) or the Wait option runs out (Acquire:
//     *HeldError; Run: ran == false and no error). Wait(0) never waits. With
//     neither a Wait nor a context deadline, the store queues the caller for up
//     to MaxWait. Waiters are served in FIFO order, and the store hands the key
//     to the next waiter the moment it is released or expires: nobody polls.
//   - Contention is an error value, not a string: an acquire that finds the key
//     held returns a *HeldError (errors.Is(err, ErrLocked)) with the key, the
//     holder's fencing token and its remaining lease, never the holder's owner.
//   - Ownership. Each acquisition mints a random 128-bit owner, and release and
//     extend act only when the owner matches. So when A's lease expires and B
//     takes the key, A's late Release returns false and A's Extend returns
//     ErrNotHeld; neither touches B's lock.
//   - One holder per handle, and a fresh owner per acquisition, except after
//     an unknown outcome (ErrUnknownOutcome): see the Lock type.
//   - Remaining is conservative: the lease's end counted on this process's
//     monotonic clock from when the acquire or extend was sent. The store's
//     lease never ends before it, whatever the wall clocks do.
//   - Extend sets the lease to end TTL from now (which may shorten it, as
//     Redis PEXPIRE does); TTL(d) on Extend also becomes the handle's TTL.
//   - Hooks (WithHooks) observe every handle of a client: acquired, released
//     (once per acquisition, including when the loss of the lease is
//     discovered), contended. They run without any internal lock held; a
//     panicking hook is recovered and logged, and the lock carries on.
//
// # Safety: what a lease promises
//
// A lease is a promise with a deadline, not a mutex. A process that stalls
// (a GC pause, a swapped-out VM, a slow disk) can wake after its lease ended
// and another holder began, and keep writing. Run cancels its callback's
// context when the lease is or may be lost, which shortens that window but
// cannot close it. Close it at the resource: pass the fencing token (Token)
// with every write, and have the resource refuse a token lower than the
// highest it has seen. Tokens strictly increase across all keys and all
// grants of a store.
//
// Treat a serialized lock (Serialize) like the lock itself: whoever has the
// string can release it.
//
// The memory store (package lock/memstore) excludes callers in THIS PROCESS
// ONLY: it is for tests, examples and single-process programs.
//
// # Sessions, metadata, max hold
//
// A Session (Client.NewSession; etcd's concurrency.Session, Consul's
// session) is one lease, kept alive by one goroutine, that any number of
// locks are bound to (Client.WithSession): they have no lease of their own,
// so a process that crashes frees them all within the session TTL
// (DefaultSessionTTL, 15s, like Consul's; etcd's is 60s), and Session.Close
// frees them all in one step, each key handed to its next waiter. A holder's
// conservative deadline is its session's (see Session.Remaining); Done says
// when the session has ended, and Run cancels its callback then. A lock can
// also end alone while its session lives on (an operator's ForceRelease):
// the keep-alive checks the session's holds on every renewal, from the count
// of keys the renewal answers (reading a hold's key only when that count
// disagrees), so a holder learns of it about TTL/3 later, and Run cancels
// its callback as for a lost lease. A session may have a lock-delay
// (LockDelay): after it expires, its keys stay unavailable that long. Make
// one session per process, at startup, and bind the process's locks to it.
// The store must implement SessionStore (the memory store, a cluster node
// and the HTTP client do).
//
// Metadata (a LockOption, at most MaxMetadataLen bytes) travels with an
// acquisition and is shown to anyone by Inspect and List: who holds the
// lock and why. Never the owner, never a secret.
//
// MaxHold (a RunOption) caps how long Run holds a lock even while its
// keep-alive runs, on the local clock.
//
// # Semaphores and read/write locks
//
// Client.Semaphore(key, n) gives a handle on a semaphore of n: at most n
// handles, in any process, hold the key at once (like `consul lock -n`).
// Client.RWLock(key) gives a read/write lock whose Reader handles share
// the key and whose Writer handle holds it alone. Both give the same *Lock
// handle as Client.Lock (Acquire, TryAcquire, Run, Release, Extend, Token,
// sessions and metadata alike), and every holder has its own fencing token
// (larger than any the store issued before), lease and keep-alive,
// released and expired on its own.
//
// Waiting is strictly FIFO for every kind: a waiter is granted as soon as
// it fits, and one that does not fit holds up the queue behind it. So a
// semaphore waiter is never passed by a later one, and a writer waits only
// for the readers that came before it: readers that come while it waits
// queue behind it, so writers are never starved. One release may let
// several waiters in at once (several readers, several slots), each
// answered from the same step.
//
// A key's kind (and a semaphore's n) is fixed while anyone holds or waits
// for it, by the acquire that created it: an acquire of another kind or n
// meanwhile fails with a *KindMismatchError (ErrKindMismatch; the message
// says what the key is and what was asked) and changes nothing. Once
// nobody holds or waits, the key is gone and any kind takes it. n is
// 1..MaxHolders (ErrInvalidLimit), as is the number of readers. Inspect and
// List report the kind, the limit and the number of holders, never their
// owners. Serialize and Client.Restore keep a handle's kind.
//
// # Multi-key locks
//
// Client.LockAll(keys) gives a handle that takes a set of 1..MaxKeys keys
// all or nothing, in one step of the store, with one fencing token and one
// lease. While it waits, it waits on every key at once, FIFO on each, so two
// sets never deadlock and none is starved by later single-key locks; the
// price is that a key whose queue the set heads is kept for it (reserved,
// idle) until the set gets its last key. LockAll and MultiKeyStore state
// the rules.
//
// # Watches
//
// Client.Watch and Client.WatchPrefix yield a key's state (or the held keys
// under a prefix) now, then again each time it changes, without polling:
// they are loops of blocking queries, as Consul's (Client.WatchKey and
// Client.WatchList are the one-shot calls, for callers that keep the index).
// No change is missed: one applied between two calls wakes the second at
// once. A wake may be spurious, and changes that follow each other faster
// than the loop reads may be seen as one (the latest). The answer is the
// serving store's own state: a cluster follower's may lag the leader by
// its replication delay (WatchQuery.Consistent reads through the leader).
// The store must implement Watcher (the memory store, a cluster node and
// the HTTP client do). Package election's Observe is built on them.
//
// # Stores
//
// Store is the seam, as database/sql/driver is for database/sql: the memory
// store (package lock/memstore), a cluster node and the HTTP API client
// implement it, and the lock API is written once on top. The Store type
// says what a store must do; package locktest holds the conformance suite
// every store runs (locktest.TestStore). A store may also implement Lister, found by type
// assertion, to list held locks by prefix (Client.List), Watcher, to
// answer blocking queries (Client.Watch), and AdminStore, to
// release a key whoever holds it (Client.ForceRelease: an operator's tool
// for a lock whose holder is gone; it hands the key to the next waiter, and
// the former holder finds the lock not held at its next Extend or Release),
// and MultiKeyStore, to take a set of keys all or nothing (Client.LockAll).
package lock
