package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// releaseTimeout bounds the release Run sends after fn returns. It runs on a
// context detached from the caller's cancellation, because fn often returns
// precisely because that context was canceled, and a release that cannot be
// sent leaves the key locked for the rest of its TTL.
const releaseTimeout = 10 * time.Second

// Run acquires the lock as Acquire does (waiting until ctx is done, or for the
// Wait option), runs fn, and always releases the lock afterwards: also when fn
// returns an error, panics (the lock is released, then the panic goes on) or
// calls runtime.Goexit. It reports ran = false, and no error, when the wait
// ran out with the key still held; an error and ran = false when the acquire
// failed otherwise; ran = true once fn was called.
//
// While fn runs, Run keeps the lease alive, extending it every TTL/3. fn's
// context is canceled as soon as the lease is or may be lost: an extend
// answered ErrNotHeld, the handle was released, or the lease's conservative
// local deadline (see Remaining) passed before an extend succeeded.
// context.Cause(ctx) then matches ErrNotHeld. fn should stop touching the
// protected resource when its context is done.
//
// The error Run returns joins fn's error with what went wrong with the lease:
// it matches ErrNotHeld when the lease was lost before fn returned (an extend
// or the final release found it gone, or no extend succeeded in time and
// then a read of the key found it gone or the release could not tell), and
// carries the release's error if it failed.
//
// fn may use the handle: Token for fencing, Extend with a longer TTL,
// Remaining. It must not Release it (Run does), and an acquire on the same
// handle inside fn fails with ErrInUse.
//
// With MaxHold(d), Run holds the lock for d at most: then fn's context is
// canceled with a cause matching ErrMaxHold and the lock released, and Run
// returns fn's error when fn returns. For a handle bound to a session
// (Client.WithSession) there is no keep-alive of the lock: fn's context is
// canceled when the session ends, with a cause matching ErrNotHeld and
// ErrNoSession, and when the session's keep-alive, which checks its holds
// on every renewal (every session TTL/3), finds this one gone (an admin
// released it, say), with a cause matching ErrNotHeld.
func (l *Lock) Run(ctx context.Context, fn func(ctx context.Context) error, opts ...RunOption) (ran bool, err error) {
	o := collect(opts, RunOption.applyRun)
	return l.run(ctx, l.waitFor(o.acquireOptions), o.maxHold, fn)
}

// TryRun is Run without waiting: it reports (false, nil) at once when another
// owner holds the key.
func (l *Lock) TryRun(ctx context.Context, fn func(ctx context.Context) error, opts ...RunOption) (ran bool, err error) {
	o := collect(opts, RunOption.applyRun)
	return l.run(ctx, 0, o.maxHold, fn)
}

func (l *Lock) run(ctx context.Context, wait, maxHold time.Duration, fn func(ctx context.Context) error) (bool, error) {
	if maxHold < 0 {
		return false, fmt.Errorf("%w: max hold must not be negative (got %v)", ErrInvalidTTL, maxHold)
	}
	g, err := l.acquire(ctx, wait)
	if err != nil {
		if errors.Is(err, ErrLocked) {
			return false, nil
		}
		return false, err
	}
	return true, l.runHeld(ctx, g, maxHold, fn)
}

// runHeld runs fn under g with the keep-alive, then releases g, whether fn
// returns, panics or exits its goroutine.
func (l *Lock) runHeld(ctx context.Context, g *grant, maxHold time.Duration, fn func(ctx context.Context) error) (err error) {
	fnCtx, cancelFn := context.WithCancelCause(ctx)
	keepAliveCtx, stopKeepAlive := context.WithCancel(context.WithoutCancel(ctx))
	stopCap := func() {}
	if maxHold > 0 {
		capDone := make(chan struct{})
		capTimer := time.AfterFunc(maxHold, func() {
			defer close(capDone)
			cancelFn(fmt.Errorf("%w (%v) on %q", ErrMaxHold, maxHold, l.key))
			stopKeepAlive()
			releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			defer cancel()
			// An error leaves g held: finish retries the release.
			_, _ = l.releaseGrant(releaseCtx, g)
		})
		stopCap = func() {
			if !capTimer.Stop() {
				<-capDone // the cap fired: let its release settle first
			}
		}
	}
	keepAliveDone := make(chan struct{})
	var mayBeLost bool // written by the keep-alive, read after keepAliveDone
	go func() {
		defer close(keepAliveDone)
		var err error
		if mayBeLost, err = l.keepAlive(keepAliveCtx, g, extendOptions{}); err != nil {
			cancelFn(err)
		}
	}()

	returned := false
	defer func() {
		stopCap()
		stopKeepAlive()
		<-keepAliveDone
		cancelFn(context.Canceled)
		endErr := l.finish(ctx, g, mayBeLost)
		if returned {
			err = errors.Join(err, endErr)
		}
		// Otherwise fn panicked or called runtime.Goexit, which goes on
		// unchanged now that the lock is released.
	}()
	err = fn(fnCtx)
	returned = true
	return err
}

// finish releases g after fn and says what happened to the lease.
func (l *Lock) finish(ctx context.Context, g *grant, mayBeLost bool) error {
	l.mu.Lock()
	ended := g.ended
	l.mu.Unlock()
	switch ended {
	case endReleased:
		return nil // released through the handle while fn ran; fn's ctx said so
	case endLost:
		return l.lostError()
	}
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if mayBeLost {
		// fn was told the lease may be lost, so Run must say whether it
		// was, and the release's answer cannot: the store answers true
		// also to the repeat of the owner's release that ended the lease,
		// which a copy of this handle (Restore) may have sent while fn ran.
		// The key's token tells when it is gone; a read that fails leaves
		// the release to tell what it can.
		if held, err := l.checkHold(releaseCtx, g); err == nil && !held {
			return l.lostError()
		}
	}
	ok, err := l.releaseGrant(releaseCtx, g)
	switch {
	case err != nil:
		// The handle cannot run again while it believes it holds g; keep the
		// owner instead, so that the next acquire is an idempotent retry and
		// Release can try again.
		l.mu.Lock()
		if l.held == g {
			l.held, l.pending = nil, g.owner
		}
		l.mu.Unlock()
		if mayBeLost {
			return errors.Join(l.mayBeLostError(), err)
		}
		return err
	case !ok:
		l.mu.Lock()
		ended = g.ended
		l.mu.Unlock()
		if ended == endReleased {
			return nil // a concurrent Release through the handle got there first
		}
		return l.lostError()
	}
	return nil
}

func (l *Lock) lostError() error {
	return fmt.Errorf("%w: the lease on %q was lost", ErrNotHeld, l.key)
}

func (l *Lock) mayBeLostError() error {
	return fmt.Errorf("%w: the lease on %q may have been lost: no extend succeeded before its local deadline", ErrNotHeld, l.key)
}

// KeepAlive keeps the handle's current lease alive until ctx is done, then
// returns nil. It extends the lease (to the handle's TTL, or to d with the
// TTL(d) option, which also becomes the handle's TTL) whenever less than two
// thirds of that TTL remain, so every TTL/3 after an acquire; an extend that
// fails for another reason than ErrNotHeld is retried every TTL/10 while the
// lease's conservative local deadline (see Remaining) has not passed.
//
// It returns an error matching ErrNotHeld when the handle holds no lease,
// when the lease is lost (an extend answered ErrNotHeld, or the handle was
// released meanwhile), or when it may be lost (the deadline came without a
// successful extend; an answer after it would come too late). Stop touching
// the protected resource then.
//
// Run keeps its lease alive with it while the callback runs. Call it, in a
// goroutine of its own, for a lock taken with Acquire that outlives one
// callback; cancel ctx before Release. For a restored handle, whose deadline
// is unknown until its first extend, it extends at once.
func (l *Lock) KeepAlive(ctx context.Context, opts ...ExtendOption) error {
	l.mu.Lock()
	g := l.held
	l.mu.Unlock()
	if g == nil {
		return fmt.Errorf("%w: handle for %q holds no lease to keep alive", ErrNotHeld, l.key)
	}
	_, err := l.keepAlive(ctx, g, collect(opts, ExtendOption.applyExtend))
	return err
}

// keepAlive is KeepAlive for g; mayBeLost says that it gave up because the
// local deadline came without an extend it could trust.
func (l *Lock) keepAlive(ctx context.Context, g *grant, o extendOptions) (mayBeLost bool, err error) {
	if s := l.session; s != nil {
		// The lock lasts as long as the session, whose own keep-alive runs.
		select {
		case <-ctx.Done():
			return false, nil
		case <-s.Done():
			l.lose(ctx, g)
			return true, fmt.Errorf("%w: the lock on %q ended with its session: %w", ErrNotHeld, l.key, s.Err())
		case <-g.gone:
			// Released through the handle, or found lost by the
			// session's check of its holds.
			return false, l.endedError(g)
		}
	}
	var extendedAt time.Time // the last successful extend
	for {
		l.mu.Lock()
		deadline, ended, ttl := g.deadline, g.ended, l.ttl
		l.mu.Unlock()
		if o.ttlSet {
			ttl = o.ttl
		}
		if ended != stillHeld {
			return false, l.endedError(g)
		}
		var wait time.Duration // until the next extend is due; due now when the deadline is unknown
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return true, l.mayBeLostError()
			}
			wait = left - ttl*2/3
		}
		if since := time.Since(extendedAt); wait <= 0 && since < ttl/10 {
			// The store granted less than the TTL (a lock bound to a
			// session, through a restored handle, lasts as its session
			// does): extend no more often than every TTL/10.
			wait = ttl/10 - since
		}
		if wait <= 0 {
			// An answer after the deadline comes too late: the caller may
			// already share the resource with the next holder.
			extendCtx, cancel := ctx, context.CancelFunc(func() {})
			if !deadline.IsZero() {
				extendCtx, cancel = context.WithDeadline(ctx, deadline)
			}
			err := l.extendGrant(extendCtx, g, o)
			cancel()
			switch {
			case err == nil:
				extendedAt = time.Now()
				continue
			case errors.Is(err, ErrNotHeld):
				return false, l.endedError(g)
			case ctx.Err() != nil:
				return false, nil // stopped; the extend was cut short
			}
			// Retry soon, and wake at the deadline at the latest.
			wait = ttl / 10
			if !deadline.IsZero() {
				wait = min(wait, time.Until(deadline))
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false, nil
		case <-timer.C:
		}
	}
}

// endedError is the cause given to fn's context when g has ended.
func (l *Lock) endedError(g *grant) error {
	l.mu.Lock()
	ended := g.ended
	l.mu.Unlock()
	if ended == endReleased {
		return fmt.Errorf("%w: the lock on %q was released through the handle", ErrNotHeld, l.key)
	}
	return l.lostError()
}
