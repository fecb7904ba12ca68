package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/cluster/internal/membership"
	"github.com/raftlock/raftlock/internal/nodestatus"
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
		changed := n.leaderChanged.Wait()
		if n.closed() {
			return n.closedError(false)
		}
		if id, _ := n.Leader(); id == "" {
			lastErr = errors.New("no leader known")
		} else {
			_, err := n.read(ctx, readyProbeKey, nil)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, lock.ErrClosed) || n.closed():
				return n.closedError(false)
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
			return n.closedError(false)
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
	changed = n.leaderChanged.Wait()
	if n.closed() {
		return "", "", nil, lock.ErrClosed
	}
	id, addr = n.Leader()
	return id, addr, changed, nil
}

// Readiness says whether this node is ready in the sense an orchestrator
// needs before it takes another replica down: the cluster would survive
// losing one more node. See Node.Readiness. Ready is true when this node
// knows a leader, can write its raft log, and the leader's reports have
// said for a while (a failure detection and three health checks: 4 s with
// DefaultConfig) that it is healthy and that the cluster's failure
// tolerance is at least one (at least zero when Config.Voters is 1: such a
// cluster tolerates no failure by design). The wait covers a member that
// died just before: by the end of it the leader has seen that death.
type Readiness = nodestatus.Readiness

// Readiness reports, without waiting and without a round trip, whether the
// cluster would survive losing one more node, as the leader last judged it
// (it checks every member every autopilotInterval, 1 s with DefaultConfig,
// and tells each member the result): a rollout that waits for the new
// replica's Readiness before stopping the next one never takes two voters
// before the first is replaced. The leader's judgement is believed for a
// few checks; a node that hears nothing from its leader for longer is not
// ready.
//
// Ready (the method) is the other signal: it waits until this node can
// serve lock calls. A node can serve while not ready (one voter of three
// down: the cluster has a quorum, but tolerates no further failure).
func (n *Node) Readiness() Readiness {
	r := Readiness{}
	if n.closed() {
		r.Reason = "node closed"
		if err := n.Err(); err != nil {
			r.Reason = err.Error()
		}
		return r
	}
	r.LeaderID, _ = n.Leader()
	r.Health = n.membership.Health()
	h := r.Health
	want := n.membership.WantTolerance()
	switch {
	case r.LeaderID == "":
		r.Reason = "no leader known"
	case n.store.Fault() != "":
		r.Reason = "cannot write the raft log: " + n.store.Fault()
	case !h.Known:
		r.Reason = fmt.Sprintf("no health report from leader %s yet", r.LeaderID)
	case !h.Healthy:
		r.Reason = fmt.Sprintf("leader %s judges this node unhealthy (out of contact, on another term, or more than %d entries behind)", r.LeaderID, membership.MaxTrailingLogs)
	case h.FailureTolerance < want:
		r.Reason = fmt.Sprintf("failure tolerance %d: %d of %d voters healthy, losing one more would stop the cluster", h.FailureTolerance, h.HealthyVoters, h.Voters)
	default:
		if good, hold := n.membership.GoodFor(), n.membership.ReadyHold(); good < hold {
			r.Reason = fmt.Sprintf("healthy with failure tolerance %d for %v of the %v it takes to be sure no failure is still undetected", h.FailureTolerance, good.Truncate(time.Millisecond), hold)
			break
		}
		r.Ready = true
	}
	return r
}

// FailureTolerance is how many more voters the cluster can lose and keep a
// quorum, as the leader last judged it; known is false when this node has
// no recent judgement (no leader, or none reported yet).
func (n *Node) FailureTolerance() (tolerance int, known bool) {
	h := n.membership.Health()
	return h.FailureTolerance, h.Known
}
