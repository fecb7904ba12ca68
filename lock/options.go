package lock

import "time"

// Options are typed by the call that takes them, so that an option a call
// would not read does not compile with it:
//
//	c.Lock(key, lock.TTL(time.Minute), lock.Wait(time.Second)) // LockOption: the handle's defaults
//	c.Lock(key, lock.Metadata("host=a"))                       // LockOption
//	l.Acquire(ctx, lock.Wait(0))                               // AcquireOption: this acquire only
//	l.Run(ctx, fn, lock.Wait(time.Second), lock.MaxHold(d))    // RunOption
//	c.NewSession(ctx, lock.SessionTTL(d), lock.LockDelay(d))   // SessionOption
//	l.Extend(ctx, lock.TTL(time.Hour))                         // ExtendOption
//	c.Inspect(ctx, key, lock.Stale())                          // ReadOption
//	l.Acquire(ctx, lock.TTL(time.Minute))                      // does not compile: an acquire takes the handle's TTL
//	l.Acquire(ctx, lock.MaxHold(time.Minute))                  // does not compile: only Run keeps a cap
//
// Out-of-range values are reported by the first call that uses them, as
// ErrInvalidTTL or ErrInvalidWait. A nil option is ignored.

// LockOption sets a default of the handle Client.Lock returns. TTL and Wait
// are LockOptions.
type LockOption interface {
	applyLock(*Lock)
}

// AcquireOption configures one Lock.Acquire. Wait is an AcquireOption.
type AcquireOption interface {
	applyAcquire(*acquireOptions)
}

// ExtendOption configures one Lock.Extend. TTL is an ExtendOption.
type ExtendOption interface {
	applyExtend(*extendOptions)
}

// ReadOption configures one read: Client.Inspect or Client.List. Stale is a
// ReadOption.
type ReadOption interface {
	applyRead(*readOptions)
}

type readOptions struct {
	stale bool
}

// StaleOption is the option Stale returns; it is a ReadOption, and nothing
// else.
type StaleOption struct{}

// Stale lets a read be answered from the store's local state when the store
// has one (it implements StaleReader, as a cluster node does): fast, and
// available without a quorum, but possibly behind. It may report a lock that
// has since been released or expired, miss a new one, and overstate
// Remaining. Use it for status pages, never for decisions. A store without
// local state answers the read as it always does (linearizably).
func Stale() StaleOption { return StaleOption{} }

func (StaleOption) applyRead(r *readOptions) { r.stale = true }

// applyOptions applies opts to target in order through apply, skipping nil
// options (a nil option does nothing, whatever the call).
func applyOptions[Opt comparable, T any](target *T, opts []Opt, apply func(Opt, *T)) {
	var none Opt
	for _, opt := range opts {
		if opt != none {
			apply(opt, target)
		}
	}
}

// collect is the options opts set, applied to T's zero value as
// applyOptions does.
func collect[Opt comparable, T any](opts []Opt, apply func(Opt, *T)) T {
	var o T
	applyOptions(&o, opts, apply)
	return o
}

type acquireOptions struct {
	wait    time.Duration
	waitSet bool
}

// RunOption configures one Lock.Run or TryRun. Wait and MaxHold are
// RunOptions.
type RunOption interface {
	applyRun(*runOptions)
}

type runOptions struct {
	acquireOptions
	maxHold time.Duration // 0: no cap
}

// MaxHoldOption is the option MaxHold returns; it is a RunOption, and
// nothing else.
type MaxHoldOption struct{ d time.Duration }

// MaxHold caps how long Run holds the lock, keep-alive or not: d after the
// grant, the callback's context is canceled (context.Cause matches
// ErrMaxHold) and the lock is released at once, whether or not the
// callback has returned. The cap is kept by Run, on the local clock, not
// by the store: a process that dies keeps nothing anyway (its lease or
// session ends), and the store's state machine needs no change for it. d
// must be positive; 0 means no cap.
func MaxHold(d time.Duration) MaxHoldOption { return MaxHoldOption{d: d} }

func (o MaxHoldOption) applyRun(r *runOptions) { r.maxHold = o.d }

// MetadataOption is the option Metadata returns; it is a LockOption, and
// nothing else.
type MetadataOption struct{ meta string }

// Metadata sets what the handle's acquisitions carry as holder metadata
// (see AcquireRequest.Metadata): at most MaxMetadataLen bytes, shown by
// Inspect and List. An oversized value is reported by the first acquire,
// as ErrInvalidMetadata.
func Metadata(meta string) MetadataOption { return MetadataOption{meta: meta} }

func (o MetadataOption) applyLock(l *Lock) { l.meta = o.meta }

type extendOptions struct {
	ttl    time.Duration
	ttlSet bool
}

// TTLOption is the option TTL returns; it is a LockOption and an
// ExtendOption, and nothing else.
type TTLOption struct{ ttl time.Duration }

// TTL sets the lease length: MinTTL..MaxTTL, DefaultTTL when not given. Given
// to Client.Lock, it is the handle's TTL; given to Extend, the lease ends d
// from now and d becomes the handle's TTL for every later extend (Run's
// keep-alive included). Acquire and Run take no TTL: they ask for the
// handle's.
func TTL(d time.Duration) TTLOption { return TTLOption{ttl: d} }

func (o TTLOption) applyLock(l *Lock)            { l.ttl = o.ttl }
func (o TTLOption) applyExtend(e *extendOptions) { e.ttl, e.ttlSet = o.ttl, true }

// WaitOption is the option Wait returns; it is a LockOption and an
// AcquireOption, and nothing else.
type WaitOption struct{ wait time.Duration }

// Wait bounds how long Acquire or Run queue for a held key: 0..MaxWait. Wait(0)
// never queues. Without it they wait until the context is done (queueing at
// most MaxWait). When the wait runs out, Acquire returns a *HeldError and Run
// returns (false, nil). Given to Client.Lock, it is the handle's default;
// given to Acquire or Run, it overrides that default for the call.
func Wait(d time.Duration) WaitOption { return WaitOption{wait: d} }

func (o WaitOption) applyLock(l *Lock)              { l.wait, l.waitSet = o.wait, true }
func (o WaitOption) applyAcquire(a *acquireOptions) { a.wait, a.waitSet = o.wait, true }
func (o WaitOption) applyRun(r *runOptions)         { r.wait, r.waitSet = o.wait, true }
