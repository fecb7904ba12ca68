package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lock is a handle on one key: one holder at a time (of a mutex, of a
// semaphore's slots, or a read or write hold of a read/write lock), or on
// a set of keys taken all at once (Client.LockAll: Key is the set's first,
// Keys the set). Make one with Client.Lock, Client.Semaphore, an RWLock's
// Reader or Writer, Client.LockAll, or Client.Restore.
//
// Every method is safe to call from several goroutines (Release from a signal
// handler while Run's callback works, Remaining from a progress reporter), and
// none holds an internal lock while it talks to the store. But a handle holds
// at most one acquisition: an acquire (Acquire, TryAcquire, Run, TryRun) on a
// handle that holds the lock or is acquiring it fails with ErrInUse, never
// granting two goroutines the same lease. To let goroutines take turns on a
// key, give each its own handle; handles are cheap.
//
// Each acquisition mints a fresh random owner, so after Release (or after the
// lease was lost) the handle can acquire again and gets a new fencing token;
// nothing a stale copy of the old owner does (a Restore'd handle in another
// process, a late retry) can touch the new lease. The one exception is an
// acquire whose outcome is unknown (the error matches ErrUnknownOutcome): the
// handle keeps that owner, so the next acquire is the idempotent retry the
// store promises (same grant, same token), and Release releases what may have
// been granted.
type Lock struct {
	client  *Client
	key     string
	session *Session // the session its locks are bound to; nil for leases
	kind    Kind     // what it acquires the key as (Client.Semaphore, RWLock)
	limit   int      // a semaphore's n
	shared  bool     // an RWLock's reader
	keys    []string // Client.LockAll's set, sorted (key is its first); nil for a single key

	mu        sync.Mutex // protects the fields below
	ttl       time.Duration
	meta      string        // holder metadata its acquisitions carry
	wait      time.Duration // default wait, when waitSet
	waitSet   bool
	acquiring bool
	held      *grant // the acquisition the handle holds, nil when it holds none
	pending   Owner  // owner of an acquisition whose outcome is unknown, zero when none
	token     uint64 // the last token this handle held
	lost      bool   // the last acquisition ended without this handle releasing it
}

// grant is one acquisition. Its fields other than owner, token and acquiredAt
// are protected by the handle's mu.
type grant struct {
	owner      Owner
	token      uint64
	acquiredAt time.Time // local clock; for the Released hook

	deadline   time.Time // conservative local end of the lease; zero when unknown (restored)
	deadlineAt time.Time // when the request that set deadline was sent
	ended      grantEnd
	// gone is closed when a grant bound to a session ends (nil for a
	// lease): how Run learns that its session's keep-alive found it lost.
	gone chan struct{}
}

type grantEnd uint8

const (
	stillHeld grantEnd = iota
	endReleased
	endLost
)

// Key is the locked key.
func (l *Lock) Key() string { return l.key }

// TTL is the lease length the handle asks for when it acquires or extends.
func (l *Lock) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Token is the fencing token of the handle's current lease, or of its last one
// once released or lost; 0 if it never held the lock. Pass it to the resource
// the lock protects, which should refuse a token lower than one it has seen.
func (l *Lock) Token() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token
}

// Remaining is how long the lease is sure to last: counted on the local
// monotonic clock from when the acquire or the last extend was sent, so the
// store's lease never ends before it. It reports false when the handle does
// not hold the lock, when that figure has run out (the lease may be gone), and
// for a restored handle until its first Extend.
//
// For a handle bound to a session it is the session's Remaining.
func (l *Lock) Remaining() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != nil && l.session != nil {
		return l.session.Remaining()
	}
	if l.held == nil || l.held.deadline.IsZero() {
		return 0, false
	}
	left := time.Until(l.held.deadline)
	if left <= 0 {
		return 0, false
	}
	return left, true
}

// Acquire takes the lock, waiting while another owner holds it: until ctx is
// done (the error then matches ctx.Err()) or for the Wait option, if given to
// this call or to Client.Lock (the error is then a *HeldError). Wait(0) does
// not wait. Other errors come from the store (ErrUnavailable, ErrQueueFull,
// ...) or the input (ErrInvalidKey, ErrInvalidTTL, ErrInvalidWait), and
// ErrInUse if the handle already holds the lock or is acquiring it.
//
// A nil error means the handle holds the lock; release it with Release (or
// use Run, which cannot forget to).
func (l *Lock) Acquire(ctx context.Context, opts ...AcquireOption) error {
	_, err := l.acquire(ctx, l.waitFor(collect(opts, AcquireOption.applyAcquire)))
	return err
}

// TryAcquire takes the lock if nobody holds it, without waiting. It reports
// (false, nil) when another owner holds it.
func (l *Lock) TryAcquire(ctx context.Context) (bool, error) {
	if _, err := l.acquire(ctx, 0); err != nil {
		if errors.Is(err, ErrLocked) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// Release gives the lock up and hands it to the next waiter. It reports false,
// and no error, when the handle does not hold the lock (never acquired,
// already released) or the store says the lease was lost. After an error the
// handle still holds the lock as far as it knows: retry, or let it expire.
func (l *Lock) Release(ctx context.Context) (bool, error) {
	l.mu.Lock()
	g := l.held
	if g == nil && !l.pending.IsZero() {
		owner := l.pending
		l.mu.Unlock()
		if l.session != nil {
			defer l.session.moveBegins()()
		}
		ok, err := l.client.store.Release(ctx, l.key, owner)
		if err == nil {
			l.mu.Lock()
			if l.pending == owner {
				l.pending = Owner{}
			}
			l.mu.Unlock()
		}
		return ok, err
	}
	l.mu.Unlock()
	if g == nil {
		return false, nil
	}
	return l.releaseGrant(ctx, g)
}

// releaseGrant releases g if the handle still holds it, and fires OnReleased
// once for g, whoever ends it.
func (l *Lock) releaseGrant(ctx context.Context, g *grant) (bool, error) {
	l.mu.Lock()
	if l.held != g {
		l.mu.Unlock()
		return false, nil
	}
	l.mu.Unlock()
	if l.session != nil {
		defer l.session.moveBegins()()
	}
	ok, err := l.client.store.Release(ctx, l.key, g.owner)
	if err != nil {
		return false, err
	}
	end := endReleased
	if !ok {
		end = endLost
	}
	if l.end(g, end) {
		l.client.released(ctx, ReleasedEvent{Key: l.key, Token: g.token, Held: time.Since(g.acquiredAt), Lost: !ok})
	}
	return ok, nil
}

// end records that g ended, if the handle still held it, and reports whether
// this call was the one to end it.
func (l *Lock) end(g *grant, how grantEnd) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != g {
		return false
	}
	l.held = nil
	g.ended = how
	l.lost = how == endLost
	if g.gone != nil {
		l.session.unbind(g)
		close(g.gone)
	}
	return true
}

// lose records that the store no longer has g, and fires OnReleased.
func (l *Lock) lose(ctx context.Context, g *grant) {
	if l.end(g, endLost) {
		l.client.released(ctx, ReleasedEvent{Key: l.key, Token: g.token, Held: time.Since(g.acquiredAt), Lost: true})
	}
}

// Extend makes the lease end the handle's TTL from now, or d from now with the
// TTL(d) option, which also becomes the handle's TTL. It returns ErrNotHeld if
// the handle does not hold the lock or the lease was lost: never a silent
// no-op. After another error the lease is unchanged as far as the handle
// knows, and Remaining still counts down the old deadline.
//
// A handle bound to a session has no lease of its own: Extend sends
// nothing, and returns nil while the session is live and an error
// matching ErrNotHeld and ErrNoSession once it has ended.
func (l *Lock) Extend(ctx context.Context, opts ...ExtendOption) error {
	o := collect(opts, ExtendOption.applyExtend)
	l.mu.Lock()
	g := l.held
	l.mu.Unlock()
	if g == nil {
		return fmt.Errorf("%w: handle for %q holds no lease to extend", ErrNotHeld, l.key)
	}
	if l.session != nil {
		if err := l.session.Err(); err != nil {
			l.lose(ctx, g)
			return fmt.Errorf("%w: %w", ErrNotHeld, err)
		}
		return nil
	}
	return l.extendGrant(ctx, g, o)
}

func (l *Lock) extendGrant(ctx context.Context, g *grant, o extendOptions) error {
	l.mu.Lock()
	ttl := l.ttl
	if o.ttlSet {
		ttl = o.ttl
	}
	if l.held != g {
		l.mu.Unlock()
		return fmt.Errorf("%w: the lease on %q ended", ErrNotHeld, l.key)
	}
	l.mu.Unlock()
	if err := ValidateExtend(l.key, g.owner, ttl); err != nil {
		return err
	}
	sent := time.Now()
	lease, err := l.client.store.Extend(ctx, l.key, g.owner, ttl)
	switch {
	case errors.Is(err, ErrNotHeld):
		l.lose(ctx, g)
		return err
	case err != nil:
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == g {
		if o.ttlSet {
			l.ttl = ttl
		}
		// Concurrent extends may answer out of order: the one sent last wins.
		if !sent.Before(g.deadlineAt) {
			g.deadline, g.deadlineAt = sent.Add(lease.Remaining), sent
		}
	}
	return nil
}

// IsLocked reports whether anyone (this handle or another owner) holds the key.
func (l *Lock) IsLocked(ctx context.Context) (bool, error) {
	info, err := l.client.Inspect(ctx, l.key)
	if err != nil {
		return false, err
	}
	return info.Locked, nil
}

// IsExpired reports whether the handle held the lock and lost it: its lease
// ran out or was released elsewhere with the serialized owner. It asks the
// store whether the key's current fencing token is still the handle's (tokens
// are unique per grant). It reports false for a handle that never held the
// lock or released it itself.
func (l *Lock) IsExpired(ctx context.Context) (bool, error) {
	l.mu.Lock()
	g, lost := l.held, l.lost
	l.mu.Unlock()
	if g == nil {
		return lost, nil
	}
	held, err := l.checkHold(ctx, g)
	if err != nil {
		return false, err
	}
	return !held, nil
}

// checkHold reads g's key and reports whether the store still has g,
// ending g as lost when it has not; a read that fails changes nothing.
// It is how the handle learns of a loss that no answer to its own calls
// tells: a lease released by a copy of the handle (Restore) with the same
// owner, whose later releases the store answers as repeats of that one.
func (l *Lock) checkHold(ctx context.Context, g *grant) (bool, error) {
	held, err := l.readHold(ctx, g)
	if err != nil || held {
		return held, err
	}
	l.lose(ctx, g)
	return false, nil
}

// readHold reads g's key and reports whether the store still has g,
// changing nothing.
func (l *Lock) readHold(ctx context.Context, g *grant) (bool, error) {
	info, err := l.client.store.Inspect(ctx, l.key)
	if err != nil {
		return false, err
	}
	return holdsToken(info, g.token), nil
}

// holdsToken reports whether info shows the hold granted with token (tokens
// are unique per grant): a mutex's holder, or one of a semaphore's or
// read/write lock's holds. A store may cut Holds short (Holders counts them
// all): a token not among them then counts as held, as the answer cannot
// tell.
func holdsToken(info KeyInfo, token uint64) bool {
	if !info.Locked || info.Delayed {
		return false
	}
	if info.Holds == nil {
		return info.Token == token
	}
	for _, h := range info.Holds {
		if h.Token == token {
			return !h.Delayed
		}
	}
	return len(info.Holds) < info.Holders
}

// waitFor is how long an acquire with opts may wait: the call's Wait, else the
// handle's, else until ctx is done (as long as the store lets anyone queue).
func (l *Lock) waitFor(o acquireOptions) time.Duration {
	if o.waitSet {
		return o.wait
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waitSet {
		return l.wait
	}
	return MaxWait
}

// acquire takes the lock, queueing up to wait, and returns the new grant.
func (l *Lock) acquire(ctx context.Context, wait time.Duration) (*grant, error) {
	req := AcquireRequest{Key: l.key, Owner: NewOwner(), Wait: wait, Kind: l.kind, Limit: l.limit, Shared: l.shared, Keys: l.keys}
	l.mu.Lock()
	req.TTL, req.Metadata = l.ttl, l.meta
	if l.session != nil {
		req.TTL, req.Session = 0, l.session.id
	}
	if err := req.Validate(); err != nil {
		l.mu.Unlock()
		return nil, err
	}
	if l.session != nil {
		if err := l.session.Err(); err != nil {
			l.mu.Unlock()
			return nil, err
		}
	}
	if l.held != nil || l.acquiring {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w (key %q)", ErrInUse, l.key)
	}
	if !l.pending.IsZero() {
		req.Owner = l.pending // the retry of an acquire with an unknown outcome
	}
	l.acquiring = true
	l.mu.Unlock()

	if l.session != nil {
		defer l.session.moveBegins()()
	}
	g, err := l.ask(ctx, req)

	l.mu.Lock()
	l.acquiring = false
	switch {
	case err == nil:
		l.held, l.pending, l.token, l.lost = g, Owner{}, g.token, false
		if l.session != nil {
			g.gone = make(chan struct{})
			l.session.bind(l, g)
		}
	case errors.Is(err, ErrUnknownOutcome):
		l.pending = req.Owner
	default:
		// The store answered: the owner holds nothing and waits nowhere.
		l.pending = Owner{}
	}
	l.mu.Unlock()

	if err != nil {
		return nil, err
	}
	l.client.acquired(ctx, AcquiredEvent{Key: l.key, Token: g.token, TTL: req.TTL})
	return g, nil
}

// ask sends req to the store: first without waiting when the OnContended hook
// wants to hear of contention before the wait, then queueing for what is left
// of the wait.
func (l *Lock) ask(ctx context.Context, req AcquireRequest) (*grant, error) {
	if req.Wait > 0 && l.client.hooks.OnContended != nil {
		start := time.Now()
		try := req
		try.Wait = 0
		g, err := l.send(ctx, try)
		var held *HeldError
		if !errors.As(err, &held) {
			return g, err
		}
		l.client.contended(ctx, held)
		req.Wait -= time.Since(start)
		if req.Wait <= 0 {
			return nil, err
		}
		return l.send(ctx, req)
	}
	g, err := l.send(ctx, req)
	var held *HeldError
	if errors.As(err, &held) && req.Wait == 0 {
		l.client.contended(ctx, held)
	}
	return g, err
}

func (l *Lock) send(ctx context.Context, req AcquireRequest) (*grant, error) {
	sent := time.Now()
	var lease Lease
	var err error
	if req.Keys != nil {
		lease, err = l.client.acquireAll(ctx, req)
	} else {
		lease, err = l.client.store.Acquire(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &grant{
		owner:      req.Owner,
		token:      lease.Token,
		acquiredAt: now,
		deadline:   sent.Add(lease.Remaining),
		deadlineAt: sent,
	}, nil
}
