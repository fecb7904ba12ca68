package cluster

import (
	"context"
	"time"
)

// closingContext is a context that ends when the node starts closing (or
// cancel is called), for work a background loop hands to calls that take a
// context.
func (n *Node) closingContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-n.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// pause waits for d, or until changed fires, whichever comes first, and
// reports false, at once, when the node starts closing: a retry loop's wait
// between attempts that a change it waits for cuts short.
func (n *Node) pause(d time.Duration, changed <-chan struct{}) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-n.closing:
		return false
	case <-changed:
	case <-timer.C:
	}
	return true
}
