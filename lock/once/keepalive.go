package once

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// keepAlive keeps l's lease at least two thirds of ttl ahead until ctx is
// done: it extends the lease to ttl whenever less remains (so every ttl/3 once
// the tick's window has passed, and not at all before if the window is longer
// than the run). When the lease is or may be lost it calls lost and returns.
//
// lock.Lock.Run has the same keep-alive, but Run releases the lock when the
// function returns, which a tick must not do before its window has passed.
func keepAlive(ctx context.Context, l *lock.Lock, ttl time.Duration, lost context.CancelCauseFunc) {
	for {
		left, ok := l.Remaining()
		if !ok {
			lost(fmt.Errorf("once: %w: the lease on %q may have been lost: no extend succeeded before it ran out", lock.ErrNotHeld, l.Key()))
			return
		}
		wait := left - ttl*2/3
		if wait <= 0 {
			// An answer after the lease's deadline comes too late.
			extendCtx, cancel := context.WithTimeout(ctx, left)
			err := l.Extend(extendCtx, lock.TTL(ttl))
			cancel()
			switch {
			case err == nil:
				continue
			case errors.Is(err, lock.ErrNotHeld):
				lost(fmt.Errorf("once: %w", err))
				return
			case ctx.Err() != nil:
				return
			}
			wait = min(ttl/10, left) // retry soon; Remaining runs out at the latest
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}
