// Package waiting is how a raftlock node serves an acquire that waits:
// parked at the leader until the leader's own state machine applies the
// owner's grant or the end of its wait, and withdrawn when its caller goes,
// so that no lock is handed to nobody.
//
// Package cluster runs it for each Node (New, with Config: the node's
// timeouts and clock): cluster's Acquire hands a waiting acquire to
// Waiters.Acquire, which sends it to whoever leads and again after a leader
// change; the leader serves it with AtLeader (in-process, or the node RPC's
// KindWaitAcquire) and a caller's cancel-wait with CancelWait; its state
// machine tells Deliver of every grant and end of a wait. What waiting asks
// of the node is Node (its leader, the node RPC, its state) and Term (the
// leader term a waiter parks in: its proposal queue and log clock). The new
// term's claims (below) are cluster's: its leader term proposes them.
//
// A multi-key acquire (cluster's Node.AcquireAll: fsm.OpAcquireAll, sent in
// the same nodewire.KindCommand and KindWaitAcquire requests, whose fsm
// encoding carries it)
// waits exactly like a single key's, parked and withdrawn under the set's
// first key (waitKey): the events of its grant and of its wait's end name
// that key first, and a cancel-wait of it withdraws the whole set.
//
// An Acquire with Wait is one request to the leader (served in-process on
// the leader itself, nodewire.KindWaitAcquire from a follower), not cut by
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
//     matches lock.ErrUnknownOutcome. A withdrawal never ends a grant the
//     leader answered to a call of the owner in the four RequestTimeouts
//     before it (a newer call, answered before a slow link brought the
//     older call's withdrawal, may hold it): the leader does not propose
//     that cancel-wait, and the caller's error matches
//     lock.ErrUnknownOutcome (registry.go says how, and why four). The
//     leader holds such a cancel-wait back while a call by the same owner
//     is parked: that call withdraws itself when its caller goes, and the
//     cancel-wait follows; or it is a newer one, sent again through
//     another node by a client that gave up on the first, whose claim the
//     cancel-wait must not take.
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
//     when it cannot read the holder either); if the withdrawal cannot be
//     confirmed, an error matching lock.ErrUnknownOutcome instead, as an
//     answer lost on its way may have been a grant.
//
// Two windows remain, as in any lock service: an answer "granted" that the
// leader hands to the transport just as the caller's connection dies is
// lost with it, and the lease lives out its TTL; and a caller's node cut
// off by a partition, rather than dead, keeps its connection open until TCP
// gives up on it (keepalives), so its waiter may be granted meanwhile.
package waiting
