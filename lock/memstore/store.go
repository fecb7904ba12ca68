package memstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/lockfsm"
	"github.com/raftlock/raftlock/internal/watchhub"
	"github.com/raftlock/raftlock/lock"
)

// Store keeps locks in this process's memory. It runs the same state
// machine as the cluster (package fsm), so it has the same semantics: FIFO
// waiters, hand-off on release, expiry and cancel, idempotent acquire by the
// holder, fencing tokens. It excludes only callers in this process: use it for
// tests, examples and single-process programs, never to coordinate replicas.
//
// Its clock is the process's monotonic clock, and a timer armed for the
// machine's next deadline applies expiries and wait deadlines when they fall
// due, so a waiter is handed an expired lock without anyone polling.
//
// A Store is safe for concurrent use. The zero value is not usable:
// make one with New, and Close it to stop its timer.
type Store struct {
	start time.Time     // the machine's log time is the time since start
	done  chan struct{} // closed by Close; wakes every waiter

	mu      sync.Mutex // protects the fields below, and serializes the machine
	machine *fsm.Machine
	waiters map[waiterKey][]chan fsm.Event // queued acquires, woken by the machine's events
	timer   *time.Timer                    // applies a tick at the machine's next deadline
	armed   bool                           // the timer is set for armedAt
	armedAt time.Duration
	closed  bool

	// index counts the commands applied (every applyLocked): a watch's
	// index. hub is fed by the machine's OnChange with it (watch.go).
	index       uint64
	hub         *watchhub.Hub
	maxWatchers int

	quotas quotas // see Quotas (quota.go)
}

type waiterKey struct {
	key   string
	owner fsm.Owner
}

var (
	_ lock.Store         = (*Store)(nil)
	_ lock.Lister        = (*Store)(nil)
	_ lock.SessionStore  = (*Store)(nil)
	_ lock.AdminStore    = (*Store)(nil)
	_ lock.Watcher       = (*Store)(nil)
	_ lock.MultiKeyStore = (*Store)(nil)
)

// New returns an empty store, configured by opts.
func New(opts ...Option) *Store {
	s := &Store{
		start:   time.Now(),
		done:    make(chan struct{}),
		waiters: make(map[waiterKey][]chan fsm.Event),
	}
	s.machine = fsm.New(s.observe)
	s.hub, s.maxWatchers = watchhub.New(watchRingSize, lock.DefaultMaxWatchers, 0), lock.DefaultMaxWatchers
	s.machine.OnChange(func(key string) { s.hub.Record(s.index, key) })
	s.timer = time.AfterFunc(time.Hour, s.tick)
	s.timer.Stop()
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Close stops the store's timer. Calls after Close, and acquires waiting when
// it is called, fail with lock.ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.timer.Stop()
		close(s.done)
		s.hub.Close()
	}
	return nil
}

// Acquire implements lock.Store.
func (s *Store) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if err := req.Validate(); err != nil {
		return lock.Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return lock.Lease{}, err
	}
	owner := fsm.Owner(req.Owner)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return lock.Lease{}, lock.ErrClosed
	}
	cmd := lockfsm.Acquire(req)
	if err := s.admitLocked(cmd); err != nil {
		s.mu.Unlock()
		return lock.Lease{}, err
	}
	res := s.applyLocked(cmd)
	switch res.Status {
	case fsm.StatusGranted:
		s.mu.Unlock()
		return lockfsm.Granted(req, res), nil
	case fsm.StatusQueued:
	default:
		now := s.now()
		err := lockfsm.AcquireError(req, res, func(key string) fsm.KeyState { return s.machine.Lookup(key, now) })
		s.mu.Unlock()
		return lock.Lease{}, err
	}

	// Queued: the hand-off (or the wait deadline) arrives as an event.
	wk := waiterKey{req.Key, owner}
	woken := make(chan fsm.Event, 1) // sent to under mu, so it must never block
	s.waiters[wk] = append(s.waiters[wk], woken)
	queuedAt := res.Now
	s.mu.Unlock()

	select {
	case ev := <-woken:
		if ev.Kind == fsm.EventGranted {
			// Counted from when the acquire reached the machine, which is after
			// the caller sent it: the caller's deadline comes no later than
			// ExpiresAt.
			return lock.Lease{Token: ev.Token, Remaining: ev.ExpiresAt - queuedAt, TTL: req.TTL}, nil
		}
		if !req.Session.IsZero() && !s.sessionLive(req.Session) {
			return lock.Lease{}, lockfsm.ErrNoSession // its session ended while it waited
		}
		return lock.Lease{}, s.heldError(req.Key)
	case <-ctx.Done():
		s.mu.Lock()
		s.forgetWaiterLocked(wk, woken)
		if !s.closed {
			// Leave the queue, or give back a grant that raced with ctx.
			s.applyLocked(fsm.Command{Op: fsm.OpCancelWait, Key: req.Key, Owner: owner})
		}
		s.mu.Unlock()
		return lock.Lease{}, lockfsm.WaitEnded(req.Key, ctx.Err())
	case <-s.done:
		return lock.Lease{}, lock.ErrClosed
	}
}

// AcquireAll implements lock.MultiKeyStore: Acquire of a request with Keys
// (the memory store's Acquire takes both; the set's waiter waits, and is
// canceled, under its first key, which the machine's events name first).
func (s *Store) AcquireAll(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if req.Keys == nil {
		req.Keys = []string{} // reported as an empty set
	}
	return s.Acquire(ctx, req)
}

// heldError describes key's holder now, for a waiter whose wait ran out.
func (s *Store) heldError(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.machine.Lookup(key, s.now())
	held := &lock.HeldError{Key: key, Reserved: st.Reserved}
	if st.Held {
		held.Token, held.Remaining = st.Token, st.ExpiresAt-max(s.machine.Now(), s.now())
	}
	return held
}

// locked is the frame of every call but Acquire: unless valid (the
// call's validation) is an error or the store is closed, it runs fn with
// mu held.
func locked[T any](s *Store, valid error, fn func() (T, error)) (T, error) {
	var zero T
	if valid != nil {
		return zero, valid
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return zero, lock.ErrClosed
	}
	return fn()
}

// Release implements lock.Store.
func (s *Store) Release(ctx context.Context, key string, owner lock.Owner) (bool, error) {
	return locked(s, lock.ValidateRelease(key, owner), func() (bool, error) {
		cmd := lockfsm.Release(key, owner)
		return lockfsm.Ended(cmd.Op, s.applyLocked(cmd))
	})
}

// ForceRelease implements lock.AdminStore.
func (s *Store) ForceRelease(ctx context.Context, key string) (uint64, error) {
	return locked(s, lock.ValidateKey(key), func() (uint64, error) {
		return lockfsm.ForceReleased(key, s.applyLocked(lockfsm.ForceRelease(key)))
	})
}

// Extend implements lock.Store.
func (s *Store) Extend(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error) {
	return locked(s, lock.ValidateExtend(key, owner, ttl), func() (lock.Lease, error) {
		return lockfsm.Extended(key, s.applyLocked(lockfsm.Extend(key, owner, ttl)), ttl)
	})
}

// Inspect implements lock.Store.
func (s *Store) Inspect(ctx context.Context, key string) (lock.KeyInfo, error) {
	return locked(s, lock.ValidateKey(key), func() (lock.KeyInfo, error) { return s.inspectLocked(key), nil })
}

// inspectLocked is key's state now. Called with mu held.
func (s *Store) inspectLocked(key string) lock.KeyInfo {
	// A tick first, so that a lease that has just ended is already handed to
	// its waiter rather than reported free.
	now := s.applyLocked(fsm.Command{Op: fsm.OpTick}).Now
	st := s.machine.Lookup(key, now)
	return lockfsm.KeyInfo(st, now, lockfsm.SetKeys(s.machine, st))
}

// List implements lock.Lister.
func (s *Store) List(ctx context.Context, req lock.ListRequest) ([]lock.LockInfo, error) {
	return locked(s, req.Validate(), func() ([]lock.LockInfo, error) { return s.listLocked(req, nil), nil })
}

// listLocked appends to out the keys req lists, after a tick as
// inspectLocked. Called with mu held.
func (s *Store) listLocked(req lock.ListRequest, out []lock.LockInfo) []lock.LockInfo {
	now := s.applyLocked(fsm.Command{Op: fsm.OpTick}).Now
	s.machine.RangeFrom(req.Prefix, req.After, now, func(key string, st fsm.KeyState) bool {
		out = append(out, lock.LockInfo{Key: key, KeyInfo: lockfsm.KeyInfo(st, now, lockfsm.SetKeys(s.machine, st))})
		return req.Limit == 0 || len(out) < req.Limit
	})
	return out
}

// CreateSession implements lock.SessionStore.
func (s *Store) CreateSession(ctx context.Context, req lock.SessionRequest) (lock.SessionLease, error) {
	return locked(s, req.Validate(), func() (lock.SessionLease, error) {
		create := lockfsm.CreateSession(req)
		if err := s.admitLocked(create); err != nil {
			return lock.SessionLease{}, err
		}
		res := s.applyLocked(create)
		return lockfsm.SessionCreated(res, s.machine.Session(create.Session, 0))
	})
}

// RenewSession implements lock.SessionStore.
func (s *Store) RenewSession(ctx context.Context, id lock.SessionID) (lock.SessionLease, error) {
	return locked(s, lock.ValidateSessionID(id), func() (lock.SessionLease, error) {
		return lockfsm.SessionRenewed(s.applyLocked(lockfsm.RenewSession(id)))
	})
}

// DestroySession implements lock.SessionStore.
func (s *Store) DestroySession(ctx context.Context, id lock.SessionID) (bool, error) {
	return locked(s, lock.ValidateSessionID(id), func() (bool, error) {
		destroy := lockfsm.DestroySession(id)
		return lockfsm.Ended(destroy.Op, s.applyLocked(destroy))
	})
}

// InspectSession implements lock.SessionStore.
func (s *Store) InspectSession(ctx context.Context, id lock.SessionID) (lock.SessionInfo, error) {
	return locked(s, lock.ValidateSessionID(id), func() (lock.SessionInfo, error) {
		now := s.applyLocked(fsm.Command{Op: fsm.OpTick}).Now
		st := s.machine.Session(fsm.Owner(id), now)
		if !st.Live {
			return lock.SessionInfo{}, nil
		}
		return lock.SessionInfo{Live: true, TTL: st.TTL, Remaining: st.ExpiresAt - now, LockDelay: st.LockDelay, Keys: st.Keys}, nil
	})
}

func (s *Store) sessionLive(id lock.SessionID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.machine.Session(fsm.Owner(id), s.now()).Live
}

// now is the machine's clock: the monotonic time since the store was made.
func (s *Store) now() time.Duration { return time.Since(s.start) }

// applyLocked stamps c with the clock, applies it, and re-arms the timer for
// the machine's next deadline. Called with mu held.
func (s *Store) applyLocked(c fsm.Command) fsm.Result {
	c.Stamp = s.now()
	s.index++
	res := s.machine.Apply(c)
	next, ok := s.machine.NextDeadline()
	switch {
	case !ok:
		if s.armed {
			s.timer.Stop()
			s.armed = false
		}
	case !s.armed || next != s.armedAt:
		s.timer.Reset(max(next-s.now(), 0))
		s.armed, s.armedAt = true, next
	}
	return res
}

// tick runs on the timer: it applies the deadlines that are due (handing
// expired locks to waiters, dropping waiters whose wait ran out).
func (s *Store) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.armed = false
	s.applyLocked(fsm.Command{Op: fsm.OpTick})
}

// observe receives the machine's events during Apply, with mu held, and wakes
// the waiters they concern.
func (s *Store) observe(ev fsm.Event) {
	if ev.Kind != fsm.EventGranted && ev.Kind != fsm.EventWaitExpired {
		return
	}
	wk := waiterKey{ev.Key, ev.Owner}
	for _, woken := range s.waiters[wk] {
		woken <- ev // buffered, and each waiter is woken at most once
	}
	delete(s.waiters, wk)
}

// forgetWaiterLocked unregisters one waiting call. Called with mu held.
func (s *Store) forgetWaiterLocked(wk waiterKey, woken chan fsm.Event) {
	list := s.waiters[wk]
	if i := slices.Index(list, woken); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(s.waiters, wk)
	} else {
		s.waiters[wk] = list
	}
}
