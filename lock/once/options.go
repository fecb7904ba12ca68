package once

import (
	"log"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// DefaultSkew is the clock-skew tolerance unless the Skew option says
// otherwise.
const DefaultSkew = 10 * time.Second

// Option configures PerTick.
type Option func(*config)

type config struct {
	ttl     time.Duration
	skew    time.Duration
	clock   Clock
	onError func(t Tick, err error)
}

func newConfig(opts []Option) config {
	cfg := config{ttl: lock.DefaultTTL, skew: DefaultSkew, clock: systemClock{}, onError: logError}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	return cfg
}

// OnError receives, on the loop's goroutine, what went wrong with a tick: the
// function's error, a lease lost while it ran (matching lock.ErrNotHeld), or a
// store error taking the tick's lock (the first of an outage, and the last if
// retries run out with the tick's window). The loop goes on. By default errors are
// logged through the standard log package.
func OnError(f func(t Tick, err error)) Option {
	return func(c *config) {
		if f != nil {
			c.onError = f
		}
	}
}

// TTL is how far ahead the lease is kept while the function runs
// (lock.DefaultTTL when not given): how long a replica that crashed mid-run
// keeps its tick after the tick's window. It must be in lock.MinTTL to
// lock.MaxTTL.
func TTL(d time.Duration) Option {
	return func(c *config) { c.ttl = d }
}

// Skew is the clock-skew tolerance: how long after the end of a tick's window
// the tick's lock is kept (DefaultSkew when not given; 0 or more). See the
// package documentation for what it guarantees.
func Skew(d time.Duration) Option {
	return func(c *config) { c.skew = d }
}

// WithClock replaces the host's clock, for tests.
func WithClock(c Clock) Option {
	return func(cfg *config) {
		if c != nil {
			cfg.clock = c
		}
	}
}

func logError(t Tick, err error) {
	log.Printf("once: %s: %v", t.Key, err)
}
