package once

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// keepAlive keeps l's lease at least two thirds of ttl ahead until ctx is
// done (lock.Lock.KeepAlive with TTL(ttl): the tick's first lease may be
// longer, to cover its window, and is not extended before it must be). When
// the lease is or may be lost it calls lost and returns.
//
// lock.Lock.Run keeps its lease alive the same way, but Run releases the
// lock when the function returns, which a tick must not do before its
// window has passed.
func keepAlive(ctx context.Context, l *lock.Lock, ttl time.Duration, lost context.CancelCauseFunc) {
	if err := l.KeepAlive(ctx, lock.TTL(ttl)); err != nil {
		lost(fmt.Errorf("once: %w", err))
	}
}
