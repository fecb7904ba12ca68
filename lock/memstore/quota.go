package memstore

import (
	"fmt"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// Option configures a Store (New).
type Option func(*Store)

// Quotas bounds the state a Store keeps, as a cluster's quotas
// do (package cluster, Config.MaxLocks, MaxSessions, MaxTotalWaiters):
// locks bounds the locks (keys with a holder or waiters, and each further
// hold of a semaphore or read/write key), sessions the sessions,
// waiters the callers queued over all keys (a multi-key wait counts once
// per key); 0 or less means no limit. An acquire or session create that
// would pass one fails with lock.ErrQuotaExceeded, and nothing that frees or
// keeps state (release, extend, cancel, session renew and destroy, an
// acquire repeated by the key's holder or by a caller queued for it) is
// ever refused. Without this option a Store has no limits: it serves
// one process, whose own memory it spends; the option lets a program's
// tests see how it handles lock.ErrQuotaExceeded.
func Quotas(locks, sessions, waiters int) Option {
	return func(s *Store) {
		s.quotas = quotas{locks: max(locks, 0), sessions: max(sessions, 0), waiters: max(waiters, 0)}
	}
}

// quotas are a Store's limits; 0: none.
type quotas struct{ locks, sessions, waiters int }

// admitLocked refuses c with lock.ErrQuotaExceeded if it could add state past
// one of the store's quotas (fsm.Machine.Growth, at the machine's time).
// Called with mu held.
func (s *Store) admitLocked(c fsm.Command) error {
	q := s.quotas
	if q == (quotas{}) {
		return nil
	}
	g, m := s.machine.Growth(c), s.machine
	for _, l := range []struct {
		limit, adds, used int
		what, option      string
	}{
		{q.locks, g.Keys + g.Holds, m.Len() + m.ExtraHolds(), "locks (keys with a holder or waiters, and each further hold of a semaphore or read/write key)", "locks"},
		{q.sessions, g.Sessions, m.Sessions(), "sessions", "sessions"},
		{q.waiters, g.Waiters, m.Waiters(), "callers queued over all keys", "waiters"},
	} {
		if l.limit > 0 && l.adds > 0 && l.used+l.adds > l.limit {
			return fmt.Errorf("%w: this store keeps at most %d %s (memstore.Quotas' %s), and holds %d: release locks, destroy sessions or stop waiting, or raise the limit",
				lock.ErrQuotaExceeded, l.limit, l.what, l.option, l.used)
		}
	}
	return nil
}
