package fsm

import "time"

// WaiterState is one caller queued for a key as a status page may show it:
// what it asked for, never its owner (an owner may release and extend).
type WaiterState struct {
	TTL      time.Duration // the lease it asked for, granted when its turn comes
	Deadline time.Duration // log time at which it stops waiting
}

// Queue lists the callers queued for key in FIFO order, the next to be
// granted first; nil when nobody waits. A read: it changes nothing, costs
// one step per waiter, and must be serialized with Apply like every read.
func (m *Machine) Queue(key string) []WaiterState {
	e := m.keys.get(key)
	if e == nil || m.waitQueue(e) == nil {
		return nil
	}
	out := make([]WaiterState, 0, m.waitQueue(e).len())
	for w := m.waitQueue(e).first(); w != nil; w = w.next {
		out = append(out, WaiterState{TTL: w.ttl, Deadline: w.deadline})
	}
	return out
}
