package lock

import "time"

// Option is a per-call knob. Client.Lock reads both TTL and Wait (as the
// handle's defaults); Acquire and Run read Wait; Extend reads TTL. A call
// ignores the options it does not read. Out-of-range values are reported by
// the first call that uses them, as ErrInvalidTTL or ErrInvalidWait.
type Option func(*options)

type options struct {
	ttl     time.Duration
	ttlSet  bool
	wait    time.Duration
	waitSet bool
}

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// TTL sets the lease length: MinTTL..MaxTTL, DefaultTTL when not given. Given
// to Client.Lock, it is the handle's TTL; given to Extend, the lease ends d
// from now and d becomes the handle's TTL for every later extend (Run's
// keep-alive included).
func TTL(d time.Duration) Option {
	return func(o *options) { o.ttl, o.ttlSet = d, true }
}

// Wait bounds how long Acquire or Run queue for a held key: 0..MaxWait. Wait(0)
// never queues. Without it they wait until the context is done (queueing at
// most MaxWait). When the wait runs out, Acquire returns a *HeldError and Run
// returns (false, nil). Given to Client.Lock, it is the handle's default.
func Wait(d time.Duration) Option {
	return func(o *options) { o.wait, o.waitSet = d, true }
}
