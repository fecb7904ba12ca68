package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// readyProbeKey is the key Ready reads. Any valid key would do: a read
// changes nothing and reveals no owner.
const readyProbeKey = "raftlock/ready"

// Ready returns nil once this node can serve linearizable requests: it knows
// a leader (itself or another node), and that leader has answered a read, so
// its term is ready (every earlier entry applied, its log clock running). It
// waits until then, across elections, for as long as ctx lets it: the error is
// then ctx's (errors.Is(err, context.DeadlineExceeded) or context.Canceled)
// and says what the last attempt found. It returns lock.ErrClosed once the
// node is closed.
//
// Ready is for embedders and tests that want to wait, after New, until lock
// calls will not merely queue behind an election; lock calls themselves never
// need it (each waits for a leader up to Config.LeaderWait). It costs one
// read at the leader per attempt, and is safe to call from any goroutine, as
// often as wanted.
func (n *Node) Ready(ctx context.Context) error {
	var lastErr error
	for {
		// Taken before the attempt, so that a change during it is not missed.
		changed := n.leaderChanged.wait()
		if n.closed() {
			return lock.ErrClosed
		}
		if id, _ := n.Leader(); id == "" {
			lastErr = errors.New("no leader known")
		} else {
			_, err := n.read(ctx, readyProbeKey, nil)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, lock.ErrClosed) || n.closed():
				return lock.ErrClosed
			case ctx.Err() != nil:
				return n.notReadyError(ctx, err)
			}
			lastErr = err
		}
		// Try again at the next leader change, or soon: a leader that was
		// known but did not answer may answer without any change seen here.
		retry := time.NewTimer(n.cfg.HeartbeatTimeout)
		select {
		case <-changed:
		case <-retry.C:
		case <-ctx.Done():
			retry.Stop()
			return n.notReadyError(ctx, lastErr)
		case <-n.closing:
			retry.Stop()
			return lock.ErrClosed
		}
		retry.Stop()
	}
}

func (n *Node) notReadyError(ctx context.Context, last error) error {
	return fmt.Errorf("cluster: node %q not ready (last attempt: %v): %w", n.cfg.NodeID, last, ctx.Err())
}

// WatchLeader returns the leader this node knows now (id and address empty
// while it knows none) and a channel that is closed at the next change this
// node sees: raft reporting a new leader or none, this node's own term
// becoming ready, or the node closing. The channel may also be closed when
// the leader turns out to be the same one, so compare; it is never closed
// before a change. Because the channel is taken with the leader it
// describes, no change between two calls is missed. Once the node is closed
// it returns lock.ErrClosed and nothing else:
//
//	for {
//		id, addr, changed, err := node.WatchLeader()
//		if err != nil {
//			return // the node closed
//		}
//		report(id, addr) // "" while no leader is known
//		select {
//		case <-changed:
//		case <-ctx.Done():
//			return
//		}
//	}
//
// Each call costs nothing beyond a mutex; nothing is sent or buffered for a
// watcher that stops reading, and it is safe from any goroutine.
func (n *Node) WatchLeader() (id, addr string, changed <-chan struct{}, err error) {
	changed = n.leaderChanged.wait()
	if n.closed() {
		return "", "", nil, lock.ErrClosed
	}
	id, addr = n.Leader()
	return id, addr, changed, nil
}
