// Package retry paces the attempts of a raftlock node's retry loops: a
// request sent to whoever leads (package cluster's forwarding), and a
// waiting acquire sent again after a leader change (package waiting).
package retry

import (
	"context"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// Retry pacing when no leader change is signalled: a leader that is known
// but does not answer (it is dying, or its term is not ready yet) is asked
// again after a short, growing pause. Normally a retry waits for raft to
// report a new leader instead.
const (
	MinBackoff = 5 * time.Millisecond
	MaxBackoff = 100 * time.Millisecond
)

// Node is the node a retry loop runs on: a leader hint naming its own
// address is not followed.
type Node interface{ Addr() string }

// Pacer spaces the attempts of one retry loop.
type Pacer struct {
	node    Node
	closing <-chan struct{} // closed when the node starts closing
	backoff time.Duration   // the next pause
	hops    int             // hints followed in a row without a pause
	timer   *time.Timer     // made by the first pause: most calls never retry
}

// NewPacer paces a retry loop of node, which closes closing when it starts
// closing.
func NewPacer(node Node, closing <-chan struct{}) *Pacer {
	return &Pacer{node: node, closing: closing, backoff: MinBackoff}
}

// Stop releases the pacer's timer.
func (p *Pacer) Stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}

// Pause returns when the next attempt may go: at once when hint (from a
// "not leader" reply) names a leader other than the one just tried, at most
// twice in a row; else as soon as changed reports a leader change, or after
// a short pause that grows while nothing changes (at most limit). Its
// errors are ctx's when ctx ends first, and lock.ErrClosed when the node
// closes.
func (p *Pacer) Pause(ctx context.Context, changed <-chan struct{}, hint, tried string, limit time.Duration) error {
	if hint != "" && hint != tried && hint != p.node.Addr() && p.hops < 2 {
		p.hops++
		return nil
	}
	p.hops = 0
	if p.timer == nil {
		p.timer = time.NewTimer(min(p.backoff, limit))
	} else {
		p.timer.Reset(min(p.backoff, limit))
	}
	defer p.timer.Stop()
	select {
	case <-changed:
		p.backoff = MinBackoff
	case <-p.timer.C:
		p.backoff = min(2*p.backoff, MaxBackoff)
	case <-ctx.Done():
		return ctx.Err()
	case <-p.closing:
		return lock.ErrClosed
	}
	return nil
}
