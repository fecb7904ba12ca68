package lockhttp

import (
	"log"
	"net/http"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// Option configures Middleware.
type Option func(*config)

type config struct {
	ttl          time.Duration
	ttlSet       bool
	wait         time.Duration
	waitSet      bool
	onLocked     func(w http.ResponseWriter, r *http.Request, held *lock.HeldError)
	onError      func(w http.ResponseWriter, r *http.Request, err error)
	onLeaseError func(r *http.Request, err error)
}

func newConfig(opts []Option) config {
	cfg := config{
		onLocked:     WriteLocked,
		onError:      WriteError,
		onLeaseError: logLeaseError,
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	return cfg
}

// TTL sets the lease's length (lock.DefaultTTL when not given; lock.MinTTL to
// lock.MaxTTL). The lease is kept alive while the handler runs, so this is not
// a limit on the handler: it is how long a replica that crashed mid-request
// keeps others out. Out of range, every request goes to OnError.
func TTL(d time.Duration) Option {
	return func(c *config) { c.ttl, c.ttlSet = d, true }
}

// Wait makes a request that finds the lock held queue for it up to d (or
// until the request's context is done) instead of being refused at once. The
// store hands the lock over in arrival order the moment it is released. Wait(0)
// is the default: never wait. Above lock.MaxWait, every request goes to
// OnError.
func Wait(d time.Duration) Option {
	return func(c *config) { c.wait, c.waitSet = d, true }
}

// OnLocked replaces the response to a request that found the lock held (after
// its Wait, if any): by default WriteLocked. held names the key and, when
// known, the holder's fencing token and remaining lease; it never carries the
// holder's owner.
func OnLocked(f func(w http.ResponseWriter, r *http.Request, held *lock.HeldError)) Option {
	return func(c *config) {
		if f != nil {
			c.onLocked = f
		}
	}
}

// OnError replaces the response to a request whose lock could not be taken for
// a reason other than contention: by default WriteError. err matches the lock
// package's sentinels (lock.ErrUnavailable, lock.ErrInvalidKey, ...), the
// request context's error, or ErrNilArgument.
func OnError(f func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(c *config) {
		if f != nil {
			c.onError = f
		}
	}
}

// OnLeaseError receives what went wrong with the lease after the handler ran,
// when the response can no longer change: the lease was lost while the handler
// ran (err matches lock.ErrNotHeld), or the release failed and the lease will
// end by itself after its TTL. By default it logs through the standard log
// package. The client's OnReleased hook also sees a lost lease (Lost: true).
func OnLeaseError(f func(r *http.Request, err error)) Option {
	return func(c *config) {
		if f != nil {
			c.onLeaseError = f
		}
	}
}

func logLeaseError(r *http.Request, err error) {
	log.Printf("lockhttp: %s %s: %v", r.Method, r.URL.Path, err)
}
