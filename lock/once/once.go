package once

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// Errors PerTick returns at once, before running anything; match them with
// errors.Is.
var (
	// ErrInvalid: a nil client or function, an empty or too long job name,
	// or an option out of range.
	ErrInvalid = errors.New("once: invalid argument")
	// ErrSchedule: the schedule is nil, or it gave a tick that is not after the
	// time it was asked about (Every with a period that is not positive does).
	// PerTick also returns it, and stops, if that happens later on.
	ErrSchedule = errors.New("once: bad schedule")
)

// releaseTimeout bounds the release of a tick's lock after its window, on a
// context detached from the loop's (which may be done by then).
const releaseTimeout = 10 * time.Second

// PerTick runs fn at most once per tick of sched across all the replicas
// that call it with the same job name on the same store (see the package
// documentation), until ctx is done. It runs on the caller's goroutine, one
// tick at a time, and returns when ctx is done and fn has returned
// (ctx.Err()), when the schedule has no more ticks (nil), or at once with an
// error matching ErrInvalid or ErrSchedule. Errors of fn and of the store go
// to OnError and never stop the loop.
//
// fn gets the tick (its time, its lock's key and fencing token) and a context
// that is canceled when ctx is done or when the tick's lease is or may be
// lost (context.Cause then matches lock.ErrNotHeld).
func PerTick(ctx context.Context, c *lock.Client, job string, sched Schedule, fn func(ctx context.Context, t Tick) error, opts ...Option) error {
	cfg := newConfig(opts)
	if err := validate(c, job, sched, fn, cfg); err != nil {
		return err
	}
	r := &runner{config: cfg, client: c, job: job, sched: sched, fn: fn}
	return r.loop(ctx)
}

func validate(c *lock.Client, job string, sched Schedule, fn func(context.Context, Tick) error, cfg config) error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: nil client", ErrInvalid)
	case fn == nil:
		return fmt.Errorf("%w: nil function", ErrInvalid)
	case job == "":
		return fmt.Errorf("%w: empty job name", ErrInvalid)
	case sched == nil:
		return fmt.Errorf("%w: nil schedule", ErrSchedule)
	case cfg.ttl < lock.MinTTL || cfg.ttl > lock.MaxTTL:
		return fmt.Errorf("%w: %w: TTL must be in %v..%v (got %v)", ErrInvalid, lock.ErrInvalidTTL, lock.MinTTL, lock.MaxTTL, cfg.ttl)
	case cfg.skew < 0:
		return fmt.Errorf("%w: negative skew %v", ErrInvalid, cfg.skew)
	}
	// The longest key a tick can have: nanoseconds written out in full.
	longest := key(job, time.Date(2006, 1, 2, 15, 4, 5, 999999999, time.UTC))
	if err := lock.ValidateKey(longest); err != nil {
		return fmt.Errorf("%w: job name of %d bytes makes keys too long: %w", ErrInvalid, len(job), err)
	}
	return nil
}

type runner struct {
	config
	client *lock.Client
	job    string
	sched  Schedule
	fn     func(ctx context.Context, t Tick) error
}

func (r *runner) loop(ctx context.Context) error {
	t, err := r.next(r.clock.Now())
	for ; err == nil && !t.IsZero(); t, err = r.next(r.clock.Now()) {
		if err := r.sleepUntil(ctx, t); err != nil {
			return err
		}
		end, err := r.next(t)
		if err != nil {
			return err
		}
		// Only inside the tick's window: a replica that overslept (a long
		// pause, a run that outlasted the window) skips the tick, since the
		// winner's lock may already be gone.
		if end.IsZero() || r.clock.Now().Before(end) {
			r.runTick(ctx, t, end)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return err
}

// next is the schedule's first tick after after, checked.
func (r *runner) next(after time.Time) (time.Time, error) {
	t := r.sched(after)
	if !t.IsZero() && !t.After(after) {
		return time.Time{}, fmt.Errorf("%w: it gave %v as the tick after %v", ErrSchedule, t, after)
	}
	return t, nil
}

func (r *runner) sleepUntil(ctx context.Context, t time.Time) error {
	for {
		d := t.Sub(r.clock.Now())
		if d <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.clock.After(d):
			// Check the time again: the clock may have been stepped back.
		}
	}
}

// runTick tries the lock of the tick at t, whose window ends at end (zero:
// never), and runs fn if it got it.
func (r *runner) runTick(ctx context.Context, t, end time.Time) {
	tick := Tick{Time: t, Key: key(r.job, t)}
	// One handle for every attempt: after an unknown outcome it keeps its
	// owner, so a retry finds the lock the first attempt may have taken.
	l := r.client.Lock(tick.Key, lock.TTL(r.holdTTL(end)))
	if !r.acquire(ctx, l, tick, end) {
		return
	}
	tick.Token = l.Token()
	if err := r.run(ctx, l, tick); err != nil {
		r.onError(tick, err)
	}
	r.letGo(ctx, l, tick, end)
}

// Retries of a tick's lock after a store error (a leader election, a
// network blip): from retryFirst, doubling up to retryMax, until the tick's
// window ends. Without them a short outage at tick time would make every
// replica miss the tick.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 5 * time.Second
)

// acquire tries l until it is won, another replica has it, ctx ends, or the
// tick's window (ending at end; zero: never) runs out on store errors. It
// reports the first store error at once and, should it give up, the last.
func (r *runner) acquire(ctx context.Context, l *lock.Lock, tick Tick, end time.Time) bool {
	backoff := retryFirst
	for attempt := 0; ; attempt++ {
		won, err := l.TryAcquire(ctx)
		switch {
		case err == nil:
			return won // !won: another replica has this tick
		case ctx.Err() != nil:
			return false // stopping
		}
		if !end.IsZero() && !r.clock.Now().Add(backoff).Before(end) {
			r.onError(tick, fmt.Errorf("once: taking the lock %s: gave up as the tick's window ends: %w", tick.Key, err))
			return false
		}
		if attempt == 0 {
			r.onError(tick, fmt.Errorf("once: taking the lock %s (retrying until the tick's window ends): %w", tick.Key, err))
		}
		select {
		case <-ctx.Done():
			return false
		case <-r.clock.After(backoff):
		}
		backoff = min(2*backoff, retryMax)
	}
}

// holdTTL is the lease a tick's lock starts with: to the end of its window
// plus the skew tolerance, and at least the run's TTL.
func (r *runner) holdTTL(end time.Time) time.Duration {
	if end.IsZero() {
		return lock.MaxTTL
	}
	d := end.Add(r.skew).Sub(r.clock.Now())
	return min(max(d, r.ttl), lock.MaxTTL)
}

// run calls fn under l, keeping the lease alive while it runs.
func (r *runner) run(ctx context.Context, l *lock.Lock, tick Tick) (err error) {
	fnCtx, cancelFn := context.WithCancelCause(ctx)
	keepAliveCtx, stopKeepAlive := context.WithCancel(context.WithoutCancel(ctx))
	keepAliveDone := make(chan struct{})
	go func() {
		defer close(keepAliveDone)
		keepAlive(keepAliveCtx, l, r.ttl, cancelFn)
	}()
	defer func() {
		stopKeepAlive()
		<-keepAliveDone
		if cause := context.Cause(fnCtx); errors.Is(cause, lock.ErrNotHeld) {
			err = errors.Join(err, cause)
		}
		cancelFn(context.Canceled)
	}()
	return r.fn(fnCtx, tick)
}

// letGo ends a tick's lease after its run: never before the window and the
// skew tolerance have passed (a replica whose clock is behind could take the
// tick again); after that, the key is no use to anyone and is released.
func (r *runner) letGo(ctx context.Context, l *lock.Lock, tick Tick, end time.Time) {
	if end.IsZero() || r.clock.Now().Before(end.Add(r.skew)) {
		return // the lease runs out by itself after the window
	}
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, err := l.Release(releaseCtx); err != nil {
		r.onError(tick, fmt.Errorf("once: releasing %s after its window (it runs out by itself): %w", tick.Key, err))
	}
}
