package once

import "time"

// Clock is the loop's view of time: when ticks are due and whether a window
// has passed. Tests substitute one that they advance by hand. It must be safe
// for concurrent use. Lease durations are counted by the store and the lock
// handle on the real monotonic clock whatever the Clock says.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed on this clock.
	After(d time.Duration) <-chan time.Time
}

// systemClock is the host's clock.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
