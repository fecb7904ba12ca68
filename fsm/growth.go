package fsm

// Growth is how much state one command could add to a machine: what a
// store that bounds the machine's memory (package cluster's quotas) checks
// before it lets a command in.
type Growth struct {
	Keys     int // keys it would add to Len
	Holds    int // holds it would add to ExtraHolds (a newcomer to a semaphore or read/write key)
	Waiters  int // callers it would add to Waiters (a multi-key wait is one per key)
	Sessions int // sessions it would add to Sessions
}

// Growth reports what applying c now, at the machine's log time, would
// add to its state, at most. It is zero for every command that frees or
// keeps state (release, extend, cancel-wait, force-release, session renew
// and destroy, ticks), for a retry by an owner the key already has (its
// holder, or a queued waiter claiming its place), for a session that
// exists, and for an acquire the machine would refuse (another kind, no
// such session). It is an upper bound, not a prediction: a lease that has
// ended but not yet been expired by a command still counts as holding its
// key, so an acquire that would be granted may be counted as a waiter.
// Growth changes nothing.
func (m *Machine) Growth(c Command) Growth {
	switch c.Op {
	case OpSessionCreate:
		if m.sessions[c.Session] == nil {
			return Growth{Sessions: 1}
		}
	case OpAcquire:
		return m.acquireGrowth(c)
	case OpAcquireAll:
		return m.acquireAllGrowth(c)
	}
	return Growth{}
}

func (m *Machine) acquireGrowth(c Command) Growth {
	if !c.Session.IsZero() && m.sessions[c.Session] == nil {
		return Growth{} // answered StatusNoSession
	}
	e := m.keys.get(c.Key)
	switch {
	case e == nil:
		return Growth{Keys: 1}
	case m.waitQueue(e).find(c.Owner) != nil:
		return Growth{} // a waiter's retry
	}
	if kind, limit := m.kind(e); kind != c.Kind || limit != c.Limit {
		return Growth{} // answered StatusKindMismatch
	}
	if g := m.group(e); g != nil {
		switch {
		case g.holders.find(c.Owner) != nil:
			return Growth{} // a holder's retry
		case m.waitQueue(e) == nil && g.fits(c.Shared):
			return Growth{Holds: 1} // a new hold the group has room for
		case c.Wait <= 0:
			return Growth{} // answered held
		}
		return Growth{Waiters: 1}
	}
	if e.owner == c.Owner || c.Wait <= 0 {
		return Growth{} // the holder's retry, or answered held
	}
	return Growth{Waiters: 1}
}

func (m *Machine) acquireAllGrowth(c Command) Growth {
	if m.sets[c.Owner] != nil {
		return Growth{} // a retry of its set, or answered held
	}
	var g Growth
	for _, k := range c.Keys {
		e := m.keys.get(k)
		if e == nil {
			g.Keys++
			continue
		}
		if kind, _ := m.kind(e); kind != KindMutex || e.owner == c.Owner || m.waitQueue(e).find(c.Owner) != nil {
			return Growth{} // answered kind-mismatch or held
		}
		g.Waiters = len(c.Keys) // not every key is free: the set would wait on each
	}
	if g.Waiters > 0 && c.Wait <= 0 {
		return Growth{} // answered held
	}
	return g
}

// MaxGrowth bounds Growth(c) whatever the state: each field is at least
// that of Growth(c) on any machine. A caller that finds its limits far
// enough away checks against this without reading the machine.
func MaxGrowth(c Command) Growth {
	switch c.Op {
	case OpSessionCreate:
		return Growth{Sessions: 1}
	case OpAcquire:
		return Growth{Keys: 1, Holds: 1, Waiters: 1}
	case OpAcquireAll:
		return Growth{Keys: len(c.Keys), Waiters: len(c.Keys)}
	}
	return Growth{}
}

// ExtraHolds is the number of holds of semaphore and read/write keys
// beyond each key's first: Len plus ExtraHolds is the number of locks held
// (each hold of a semaphore or read/write key one lock), and of keys kept
// for waiters only.
func (m *Machine) ExtraHolds() int { return m.extraHolds }
