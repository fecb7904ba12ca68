package cluster

import (
	"time"

	"github.com/raftlock/raftlock/lock"
)

// QueuedCaller is one caller waiting for a key, as WaitersStale shows it:
// never its owner, which could release or extend in its name.
type QueuedCaller struct {
	TTL      time.Duration // the lease it asked for
	WaitLeft time.Duration // how long it will still wait at most
}

// WaitersStale lists the callers queued for key in FIFO order (the next to
// be granted first) as this node's own state machine has them, without
// asking the leader, as InspectStale reads: possibly behind, for status
// pages (the web console), not for decisions. Nil when nobody waits.
func (n *Node) WaitersStale(key string) ([]QueuedCaller, error) {
	if err := lock.ValidateKey(key); err != nil {
		return nil, err
	}
	if n.closed() {
		return nil, lock.ErrClosed
	}
	return n.sm.queued(key, n.leaderClock()), nil
}

// queued reads key's queue as seen at log time at (or the machine's own, if later).
func (s *stateMachine) queued(key string, at time.Duration) []QueuedCaller {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := max(at, s.m.Now())
	var out []QueuedCaller
	for _, w := range s.m.Queue(key) {
		out = append(out, QueuedCaller{TTL: w.TTL, WaitLeft: max(w.Deadline-now, 0)})
	}
	return out
}
