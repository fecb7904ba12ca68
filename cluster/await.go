package cluster

import "time"

// A waiting acquire is parked at the leader (waitAtLeader), which answers
// it when its own state machine applies the grant. Applying means
// committed, so nobody is told of an uncommitted grant. The answer carries
// the lease left at the leader's log clock.
//
// Why no VerifyLeader is needed for these answers, unlike a read: the grant
// is known committed (applied), and the owner cannot have lost the key since
// except by expiry (only it could release or extend, and it has not been
// told yet). For expiry, any leader's log clock, even a deposed one's, is at
// least every later leader's: a new leader starts from the last committed
// stamp, which no earlier leader's clock was behind, and all advance at the
// rate of real time. So the lease left by this node's clock never overstates.

// awaitLeaseLeft is what the leader answers a parked waiter granted the
// lock: the lease left by the term's log clock, counted
// from received (the node's monotonic time when the question arrived, or
// any earlier time) rather than from now. Drift margin: a clock that ran
// 0.1% fast while the request was parked is still not overstated.
// ok is false when the lease has already run out.
func (t *leaderTerm) awaitLeaseLeft(expiresAt, received time.Duration) (left time.Duration, ok bool) {
	parked := max(t.n.clock.Monotonic()-received, 0)
	left = expiresAt - t.clock.now() // read after parked: later, so smaller
	if left <= 0 {
		return 0, false
	}
	return left + parked - parked/1024, true
}
