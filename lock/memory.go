package lock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/watchhub"
)

// MemoryStore keeps locks in this process's memory. It runs the same state
// machine as the cluster (package fsm), so it has the same semantics: FIFO
// waiters, hand-off on release, expiry and cancel, idempotent acquire by the
// holder, fencing tokens. It excludes only callers in this process: use it for
// tests, examples and single-process programs, never to coordinate replicas.
//
// Its clock is the process's monotonic clock, and a timer armed for the
// machine's next deadline applies expiries and wait deadlines when they fall
// due, so a waiter is handed an expired lock without anyone polling.
//
// A MemoryStore is safe for concurrent use. The zero value is not usable:
// make one with NewMemoryStore, and Close it to stop its timer.
type MemoryStore struct {
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
	// index. hub is fed by the machine's OnChange with it (watch_memory.go).
	index       uint64
	hub         *watchhub.Hub
	maxWatchers int

	quotas memoryQuotas // see MemoryQuotas (memory_quota.go)
}

type waiterKey struct {
	key   string
	owner fsm.Owner
}

var (
	_ Store         = (*MemoryStore)(nil)
	_ Lister        = (*MemoryStore)(nil)
	_ SessionStore  = (*MemoryStore)(nil)
	_ AdminStore    = (*MemoryStore)(nil)
	_ Watcher       = (*MemoryStore)(nil)
	_ MultiKeyStore = (*MemoryStore)(nil)
)

// NewMemoryStore returns an empty store, configured by opts.
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	s := &MemoryStore{
		start:   time.Now(),
		done:    make(chan struct{}),
		waiters: make(map[waiterKey][]chan fsm.Event),
	}
	s.machine = fsm.New(s.observe)
	s.hub, s.maxWatchers = watchhub.New(watchRingSize, DefaultMaxWatchers, 0), DefaultMaxWatchers
	s.machine.OnChange(func(key string) { s.hub.Record(s.index, key) })
	s.timer = time.AfterFunc(time.Hour, s.tick)
	s.timer.Stop()
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Close stops the store's timer. Calls after Close, and acquires waiting when
// it is called, fail with ErrClosed. Close is idempotent.
func (s *MemoryStore) Close() error {
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

// Acquire implements Store.
func (s *MemoryStore) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	if err := req.Validate(); err != nil {
		return Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	owner := fsm.Owner(req.Owner)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Lease{}, ErrClosed
	}
	if err := s.admitLocked(req.Command()); err != nil {
		s.mu.Unlock()
		return Lease{}, err
	}
	res := s.applyLocked(req.Command())
	switch res.Status {
	case fsm.StatusKindMismatch:
		s.mu.Unlock()
		return Lease{}, req.KindMismatch(res)
	case fsm.StatusNoSession:
		s.mu.Unlock()
		return Lease{}, noSessionError(req.Session)
	case fsm.StatusGranted:
		s.mu.Unlock()
		// ExpiresAt-Now is the TTL asked for a new grant, and what the
		// lease had left for a repeat by its holder.
		lease := Lease{Token: res.Token, Remaining: res.ExpiresAt - res.Now, TTL: res.ExpiresAt - res.Now}
		if !req.Session.IsZero() {
			lease.TTL = 0 // no lease of its own
		}
		return lease, nil
	case fsm.StatusHeld:
		now := s.now()
		held := HeldResult(req, res, func(key string) fsm.KeyState { return s.machine.Lookup(key, now) })
		s.mu.Unlock()
		return Lease{}, held
	case fsm.StatusQueueFull:
		s.mu.Unlock()
		return Lease{}, fmt.Errorf("%w: %d callers already wait for %q", ErrQueueFull, res.Waiters, req.Key)
	case fsm.StatusQueued:
	default:
		s.mu.Unlock()
		return Lease{}, fmt.Errorf("lock: memory store: unexpected acquire status %v", res.Status)
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
			return Lease{Token: ev.Token, Remaining: ev.ExpiresAt - queuedAt, TTL: req.TTL}, nil
		}
		if !req.Session.IsZero() && !s.sessionLive(req.Session) {
			return Lease{}, noSessionError(req.Session) // its session ended while it waited
		}
		return Lease{}, s.heldError(req.Key)
	case <-ctx.Done():
		s.mu.Lock()
		s.forgetWaiterLocked(wk, woken)
		if !s.closed {
			// Leave the queue, or give back a grant that raced with ctx.
			s.applyLocked(fsm.Command{Op: fsm.OpCancelWait, Key: req.Key, Owner: owner})
		}
		s.mu.Unlock()
		return Lease{}, fmt.Errorf("lock: waiting for %q: %w", req.Key, ctx.Err())
	case <-s.done:
		return Lease{}, ErrClosed
	}
}

// AcquireAll implements MultiKeyStore: Acquire of a request with Keys
// (the memory store's Acquire takes both; the set's waiter waits, and is
// canceled, under its first key, which the machine's events name first).
func (s *MemoryStore) AcquireAll(ctx context.Context, req AcquireRequest) (Lease, error) {
	if req.Keys == nil {
		req.Keys = []string{} // reported as an empty set
	}
	return s.Acquire(ctx, req)
}

// heldError describes key's holder now, for a waiter whose wait ran out.
func (s *MemoryStore) heldError(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.machine.Lookup(key, s.now())
	held := &HeldError{Key: key, Reserved: st.Reserved}
	if st.Held {
		held.Token, held.Remaining = st.Token, st.ExpiresAt-max(s.machine.Now(), s.now())
	}
	return held
}

// Release implements Store.
func (s *MemoryStore) Release(ctx context.Context, key string, owner Owner) (bool, error) {
	if err := ValidateRelease(key, owner); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, ErrClosed
	}
	res := s.applyLocked(fsm.Command{Op: fsm.OpRelease, Key: key, Owner: fsm.Owner(owner)})
	return res.Status == fsm.StatusReleased, nil
}

// ForceRelease implements AdminStore.
func (s *MemoryStore) ForceRelease(ctx context.Context, key string) (uint64, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	res := s.applyLocked(fsm.Command{Op: fsm.OpForceRelease, Key: key})
	if res.Status != fsm.StatusReleased {
		return 0, fmt.Errorf("%w: nobody holds %q", ErrNotHeld, key)
	}
	return res.Token, nil
}

// Extend implements Store.
func (s *MemoryStore) Extend(ctx context.Context, key string, owner Owner, ttl time.Duration) (Lease, error) {
	if err := ValidateExtend(key, owner, ttl); err != nil {
		return Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Lease{}, ErrClosed
	}
	res := s.applyLocked(fsm.Command{Op: fsm.OpExtend, Key: key, Owner: fsm.Owner(owner), TTL: ttl})
	if res.Status != fsm.StatusExtended {
		return Lease{}, fmt.Errorf("%w (key %q)", ErrNotHeld, key)
	}
	return Lease{Token: res.Token, Remaining: res.ExpiresAt - res.Now, TTL: ttl}, nil
}

// Inspect implements Store.
func (s *MemoryStore) Inspect(ctx context.Context, key string) (KeyInfo, error) {
	if err := ValidateKey(key); err != nil {
		return KeyInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return KeyInfo{}, ErrClosed
	}
	// A tick first, so that a lease that has just ended is already handed to
	// its waiter rather than reported free.
	now := s.applyLocked(fsm.Command{Op: fsm.OpTick}).Now
	st := s.machine.Lookup(key, now)
	info := keyInfo(st, now)
	info.SetKeys = s.setKeys(st)
	return info, nil
}

// setKeys is KeyInfo.SetKeys of st: the keys of its holder's multi-key
// grant, nil if it holds no set.
func (s *MemoryStore) setKeys(st fsm.KeyState) []string {
	if st.SetKeys == 0 || st.Owner.IsZero() {
		return nil
	}
	return s.machine.SetKeys(st.Owner)
}

// List implements Lister.
func (s *MemoryStore) List(ctx context.Context, req ListRequest) ([]LockInfo, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	now := s.applyLocked(fsm.Command{Op: fsm.OpTick}).Now
	var out []LockInfo
	s.machine.RangeFrom(req.Prefix, req.After, now, func(key string, st fsm.KeyState) bool {
		info := keyInfo(st, now)
		info.SetKeys = s.setKeys(st)
		out = append(out, LockInfo{Key: key, KeyInfo: info})
		return req.Limit == 0 || len(out) < req.Limit
	})
	return out, nil
}

func keyInfo(st fsm.KeyState, now time.Duration) KeyInfo {
	if !st.Held {
		return KeyInfo{Waiters: st.Waiters, Reserved: st.Reserved}
	}
	return KeyInfo{Locked: true, Token: st.Token, Remaining: st.ExpiresAt - now, Waiters: st.Waiters, Metadata: st.Meta, Delayed: st.Delayed,
		Kind: Kind(st.Kind), Limit: st.Limit, Holders: KeyHolders(st), Shared: st.Shared, Holds: HoldInfos(st.Holds, now)}
}

// HoldInfos is KeyInfo.Holds of a key's holds read at now: nil for none.
func HoldInfos(holds []fsm.Hold, now time.Duration) []HoldInfo {
	if len(holds) == 0 {
		return nil
	}
	out := make([]HoldInfo, len(holds))
	for i, h := range holds {
		out[i] = HoldInfo{Token: h.Token, Remaining: h.ExpiresAt - now, Metadata: h.Meta, Shared: h.Shared, Delayed: h.Delayed}
	}
	return out
}

// HeldResult is the *HeldError of a StatusHeld answer res to req. The
// machine answers held with token 0 only for a key nobody holds, which a
// multi-key waiter at the head of its queue keeps (tokens start at 1):
// that is a Reserved error, with no token or time to report. For a
// multi-key acquire the answer is about the first of its keys that is not
// free, which lookup (a read of the store's own state, nil for none) finds
// by that token; the error names it, or req.Key when lookup cannot tell.
func HeldResult(req AcquireRequest, res fsm.Result, lookup func(key string) fsm.KeyState) *HeldError {
	held := &HeldError{Key: req.Key, Reserved: res.Token == 0}
	if !held.Reserved {
		held.Token, held.Remaining = res.Token, max(res.ExpiresAt-res.Now, 0)
	}
	if len(req.Keys) > 1 && lookup != nil {
		for _, k := range req.Keys {
			st := lookup(k)
			if (held.Reserved && st.Reserved) || (!held.Reserved && st.Held && st.Token == res.Token) {
				held.Key = k
				break
			}
		}
	}
	return held
}

// KeyHolders is KeyInfo.Holders of a held key's state: a mutex's one
// holder (none while a lock-delay keeps it), or a group's count.
func KeyHolders(st fsm.KeyState) int {
	if st.Kind == fsm.KindMutex {
		if st.Held && !st.Delayed {
			return 1
		}
		return 0
	}
	return st.Holders
}

// CreateSession implements SessionStore.
func (s *MemoryStore) CreateSession(ctx context.Context, req SessionRequest) (SessionLease, error) {
	if err := req.Validate(); err != nil {
		return SessionLease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return SessionLease{}, ErrClosed
	}
	create := fsm.Command{Op: fsm.OpSessionCreate, Session: fsm.Owner(req.ID), TTL: req.TTL, LockDelay: req.LockDelay}
	if err := s.admitLocked(create); err != nil {
		return SessionLease{}, err
	}
	res := s.applyLocked(create)
	if res.Status != fsm.StatusGranted {
		return SessionLease{}, fmt.Errorf("lock: memory store: unexpected session-create status %v", res.Status)
	}
	return SessionLease{Remaining: res.ExpiresAt - res.Now, TTL: s.machine.Session(fsm.Owner(req.ID), 0).TTL}, nil
}

// RenewSession implements SessionStore.
func (s *MemoryStore) RenewSession(ctx context.Context, id SessionID) (SessionLease, error) {
	if err := ValidateSessionID(id); err != nil {
		return SessionLease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return SessionLease{}, ErrClosed
	}
	res := s.applyLocked(fsm.Command{Op: fsm.OpSessionRenew, Session: fsm.Owner(id)})
	if res.Status != fsm.StatusExtended {
		return SessionLease{}, noSessionError(id)
	}
	return SessionLease{Remaining: res.ExpiresAt - res.Now, TTL: res.ExpiresAt - res.Now, Keys: res.Waiters}, nil
}

// DestroySession implements SessionStore.
func (s *MemoryStore) DestroySession(ctx context.Context, id SessionID) (bool, error) {
	if err := ValidateSessionID(id); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, ErrClosed
	}
	res := s.applyLocked(fsm.Command{Op: fsm.OpSessionDestroy, Session: fsm.Owner(id)})
	return res.Status == fsm.StatusReleased, nil
}

// InspectSession implements SessionStore.
func (s *MemoryStore) InspectSession(ctx context.Context, id SessionID) (SessionInfo, error) {
	if err := ValidateSessionID(id); err != nil {
		return SessionInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return SessionInfo{}, ErrClosed
	}
	now := s.applyLocked(fsm.Command{Op: fsm.OpTick}).Now
	st := s.machine.Session(fsm.Owner(id), now)
	if !st.Live {
		return SessionInfo{}, nil
	}
	return SessionInfo{Live: true, TTL: st.TTL, Remaining: st.ExpiresAt - now, LockDelay: st.LockDelay, Keys: st.Keys}, nil
}

func (s *MemoryStore) sessionLive(id SessionID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.machine.Session(fsm.Owner(id), s.now()).Live
}

func noSessionError(id SessionID) error {
	return fmt.Errorf("%w: the session has ended or does not exist", ErrNoSession)
}

// now is the machine's clock: the monotonic time since the store was made.
func (s *MemoryStore) now() time.Duration { return time.Since(s.start) }

// applyLocked stamps c with the clock, applies it, and re-arms the timer for
// the machine's next deadline. Called with mu held.
func (s *MemoryStore) applyLocked(c fsm.Command) fsm.Result {
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
func (s *MemoryStore) tick() {
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
func (s *MemoryStore) observe(ev fsm.Event) {
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
func (s *MemoryStore) forgetWaiterLocked(wk waiterKey, woken chan fsm.Event) {
	list := s.waiters[wk]
	for i, c := range list {
		if c == woken {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(s.waiters, wk)
	} else {
		s.waiters[wk] = list
	}
}
