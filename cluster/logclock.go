package cluster

import (
	"sync"
	"time"
)

// The log clock.
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

// Clock is a node's source of time. It has two readings because hosts have
// two clocks, and only one of them may decide when a lease ends:
//
//   - Now is the wall clock. It may step (NTP, an operator, a VM resume)
//     and differs between hosts. The node never derives log time from it;
//     it only reports it (Stats.WallTime), next to the log time.
//   - Monotonic is a clock that never steps. Only the difference of two
//     readings on the same node means anything; its origin may be anything
//     and differ between nodes.
//
// The log clock (see above) is the leader's elapsed Monotonic time added to
// the state machine's log time, so a wall clock that steps, or a new leader
// whose wall clock is an hour ahead of the old one, can neither end a lease
// early nor shorten a reported remaining time. Tests inject a Clock to show
// exactly that.
type Clock interface {
	Now() time.Time
	Monotonic() time.Duration
}

// hostClock is the real Clock: Go's time.Now, whose monotonic reading makes
// time.Since immune to wall-clock steps.
type hostClock struct{ origin time.Time }

var processClock = hostClock{origin: time.Now()}

func (c hostClock) Now() time.Time { return time.Now() }

func (c hostClock) Monotonic() time.Duration { return time.Since(c.origin) }

// logClock is the leader's stamp source for one term. It starts at base, the
// state machine's log time once every entry of earlier terms is applied, and
// advances with the Monotonic clock from then on. Readings never decrease.
type logClock struct {
	clock Clock
	base  time.Duration // machine log time when the term became ready
	start time.Duration // clock.Monotonic() at that moment

	mu   sync.Mutex    // protects last
	last time.Duration // the highest reading handed out
}

func newLogClock(clock Clock, base time.Duration) *logClock {
	return &logClock{clock: clock, base: base, start: clock.Monotonic(), last: base}
}

// now returns the current log time: base plus the monotonic time elapsed
// since the term began, and never less than an earlier reading (a Monotonic
// that goes backwards makes the clock stand still, never run back).
func (c *logClock) now() time.Duration {
	t := c.base + (c.clock.Monotonic() - c.start)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = max(t, c.last)
	return c.last
}

// until is how long, in real time, until the log clock reaches at.
func (c *logClock) until(at time.Duration) time.Duration {
	return at - c.now()
}
