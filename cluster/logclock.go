package cluster

import (
	"sync"
	"time"
)

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
// The log clock (see doc.go) is the leader's elapsed Monotonic time added to
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
	if t < c.last {
		t = c.last
	}
	c.last = t
	return t
}

// until is how long, in real time, until the log clock reaches at.
func (c *logClock) until(at time.Duration) time.Duration {
	return at - c.now()
}
