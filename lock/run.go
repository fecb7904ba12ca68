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
// or the final release found it gone, or no extend succeeded in time and the
// release could not tell), and carries the release's error if it failed.
//
// fn may use the handle: Token for fencing, Extend with a longer TTL,
// Remaining. It must not Release it (Run does), and an acquire on the same
// handle inside fn fails with ErrInUse.
func (l *Lock) Run(ctx context.Context, fn func(ctx context.Context) error, opts ...AcquireOption) (ran bool, err error) {
	return l.run(ctx, l.waitFor(collectAcquire(opts)), fn)
}

// TryRun is Run without waiting: it reports (false, nil) at once when another
// owner holds the key.
func (l *Lock) TryRun(ctx context.Context, fn func(ctx context.Context) error) (ran bool, err error) {
	return l.run(ctx, 0, fn)
}

func (l *Lock) run(ctx context.Context, wait time.Duration, fn func(ctx context.Context) error) (bool, error) {
	g, err := l.acquire(ctx, wait)
	if err != nil {
		if errors.Is(err, ErrLocked) {
			return false, nil
		}
		return false, err
	}
	return true, l.runHeld(ctx, g, fn)
}

// runHeld runs fn under g with the keep-alive, then releases g, whether fn
// returns, panics or exits its goroutine.
func (l *Lock) runHeld(ctx context.Context, g *grant, fn func(ctx context.Context) error) (err error) {
	fnCtx, cancelFn := context.WithCancelCause(ctx)
	keepAliveCtx, stopKeepAlive := context.WithCancel(context.WithoutCancel(ctx))
	keepAliveDone := make(chan struct{})
	var mayBeLost bool // written by the keep-alive, read after keepAliveDone
	go func() {
		defer close(keepAliveDone)
		mayBeLost = l.keepAlive(keepAliveCtx, g, cancelFn)
	}()

	returned := false
	defer func() {
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
	return fmt.Errorf("%w: the lease on %q was lost while the callback ran", ErrNotHeld, l.key)
}

func (l *Lock) mayBeLostError() error {
	return fmt.Errorf("%w: the lease on %q may have been lost: no extend succeeded before its local deadline", ErrNotHeld, l.key)
}

// keepAlive extends g every TTL/3 until ctx is done. When the lease is or may
// be lost it cancels fn's context and returns; it reports true when it gave up
// because the local deadline came without an extend it could trust.
func (l *Lock) keepAlive(ctx context.Context, g *grant, cancelFn context.CancelCauseFunc) (mayBeLost bool) {
	timer := time.NewTimer(l.TTL() / 3)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
		}
		l.mu.Lock()
		deadline, ended := g.deadline, g.ended
		l.mu.Unlock()
		if ended != stillHeld {
			cancelFn(l.endedError(g))
			return false
		}
		if !time.Now().Before(deadline) {
			cancelFn(l.mayBeLostError())
			return true
		}
		// An answer after the deadline comes too late: fn may already share
		// the resource with the next holder.
		extendCtx, cancel := context.WithDeadline(ctx, deadline)
		err := l.extendGrant(extendCtx, g, extendOptions{})
		cancel()
		ttl := l.TTL()
		switch {
		case err == nil:
			timer.Reset(ttl / 3)
		case errors.Is(err, ErrNotHeld):
			cancelFn(l.endedError(g))
			return false
		case ctx.Err() != nil:
			return false // Run is finishing; the extend was cut short
		default:
			// Retry soon, and wake at the deadline at the latest.
			timer.Reset(min(ttl/10, time.Until(deadline)))
		}
	}
}

// endedError is the cause given to fn's context when g has ended.
func (l *Lock) endedError(g *grant) error {
	l.mu.Lock()
	ended := g.ended
	l.mu.Unlock()
	if ended == endReleased {
		return fmt.Errorf("%w: the lock on %q was released while the callback ran", ErrNotHeld, l.key)
	}
	return l.lostError()
}
