package once_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the test moves by hand. Timers fire when Advance moves
// the time past them; waitForSleepers lets the test know that the loops under
// test have gone back to sleep before it moves the time again.
type fakeClock struct {
	mu       sync.Mutex // protects the fields below
	now      time.Time
	sleepers []sleeper
	changed  chan struct{} // closed and replaced when sleepers change
}

type sleeper struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1) // fired under mu: must never block
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.sleepers = append(c.sleepers, sleeper{at: c.now.Add(d), ch: ch})
	c.notifyLocked()
	return ch
}

// Advance moves the time forward by d and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.sleepers[:0]
	for _, s := range c.sleepers {
		if s.at.After(c.now) {
			kept = append(kept, s)
		} else {
			s.ch <- c.now
		}
	}
	c.sleepers = kept
	c.notifyLocked()
}

// AdvanceTo moves the time forward to t.
func (c *fakeClock) AdvanceTo(t time.Time) { c.Advance(t.Sub(c.Now())) }

func (c *fakeClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// waitForSleepers blocks until n timers are pending: n loops are asleep,
// waiting for their next tick.
func (c *fakeClock) waitForSleepers(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(patience)
	for {
		c.mu.Lock()
		pending, changed := len(c.sleepers), c.changed
		c.mu.Unlock()
		if pending == n {
			return
		}
		require.Less(t, pending, n, "more sleepers than loops")
		select {
		case <-changed:
		case <-deadline:
			require.FailNowf(t, "timed out", "waiting for %d sleepers (%d now)", n, pending)
		}
	}
}

// skewedClock is a replica's clock: the shared fake clock, off by offset.
type skewedClock struct {
	*fakeClock
	offset time.Duration
}

func (c skewedClock) Now() time.Time { return c.fakeClock.Now().Add(c.offset) }
