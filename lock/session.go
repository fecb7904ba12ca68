package lock

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultSessionTTL is the session TTL NewSession asks for unless given
// SessionTTL: Consul's (its lock command's session TTL; Consul allows 10s
// to 24h), rather than etcd's 60s, because the TTL is how long a crashed
// process keeps its locks, and a keep-alive every TTL/3 (5s) costs one
// small command per process.
const DefaultSessionTTL = 15 * time.Second

// MaxLockDelay is the longest lock-delay a session may have.
const MaxLockDelay = time.Minute

// MaxMetadataLen is the most bytes of metadata a holder may carry.
const MaxMetadataLen = 1024

// Session errors.
var (
	// ErrNoSession: the session has ended (expired, or closed) or never
	// existed; a lock bound to it is released, and an acquire under it fails.
	ErrNoSession = errors.New("lock: session ended")
	// ErrInvalidSession: a zero session ID, a session TTL outside
	// MinTTL..MaxTTL or a lock-delay outside 0..MaxLockDelay.
	ErrInvalidSession = errors.New("lock: invalid session")
	// ErrInvalidMetadata: metadata longer than MaxMetadataLen bytes.
	ErrInvalidMetadata = errors.New("lock: invalid metadata")
	// ErrMaxHold: the cause given to Run's callback context when the MaxHold
	// cap is reached.
	ErrMaxHold = errors.New("lock: held for its max hold")
)

// SessionID identifies a session: 128 random bits minted by the client.
// Whoever knows it can renew, bind locks to, or destroy the session: treat
// it as a secret, like an Owner.
type SessionID [16]byte

// NewSessionID returns a fresh random session ID.
func NewSessionID() SessionID { return SessionID(NewOwner()) }

// IsZero reports whether id is the zero (invalid) session ID.
func (id SessionID) IsZero() bool { return id == SessionID{} }

// String is the ID's 32-digit lowercase hex form.
func (id SessionID) String() string { return hex.EncodeToString(id[:]) }

// ParseSessionID parses the form String writes.
func ParseSessionID(s string) (SessionID, error) {
	id, err := parseID(s, "session", ErrInvalidSession)
	return SessionID(id), err
}

// SessionStore is an optional Store ability, found by type assertion:
// sessions. Client.NewSession needs it and reports errors.ErrUnsupported
// for a store without it. Like Store's, its methods validate first and
// change nothing on bad input; every method may be called concurrently.
type SessionStore interface {
	// CreateSession starts session req.ID. A create of a live session is
	// an idempotent retry: its state, not lengthened, whatever TTL req
	// asks (see SessionLease.TTL).
	CreateSession(ctx context.Context, req SessionRequest) (SessionLease, error)
	// RenewSession makes the session end its TTL from now. It returns an
	// error matching ErrNoSession when the session has ended.
	RenewSession(ctx context.Context, id SessionID) (SessionLease, error)
	// DestroySession ends the session and releases every lock bound to
	// it, in one step, each key to its next waiter; no lock-delay applies.
	// It returns false, and changes nothing, when the session has already
	// ended. Like Release it is idempotent: repeated after a destroy that
	// ended the session (its answer lost), it returns true again and
	// changes nothing; after the session expired, false.
	DestroySession(ctx context.Context, id SessionID) (bool, error)
	// InspectSession reports the session's state, linearizably like
	// Inspect: Live false once it has ended (or if it never existed).
	InspectSession(ctx context.Context, id SessionID) (SessionInfo, error)
}

// SessionInfo is what InspectSession reports.
type SessionInfo struct {
	Live      bool
	TTL       time.Duration
	Remaining time.Duration // counted from when the request was sent
	LockDelay time.Duration
	Keys      int // keys the session holds or waits for
}

// SessionRequest asks a SessionStore for a session.
type SessionRequest struct {
	ID  SessionID
	TTL time.Duration
	// LockDelay: after the session expires (not after a destroy), the keys
	// it held stay unavailable this long, so that a holder that was only
	// slow has time to notice before the next one starts (Consul's
	// lock-delay). 0..MaxLockDelay.
	LockDelay time.Duration
}

// Validate checks a session request. The error matches ErrInvalidSession.
func (r SessionRequest) Validate() error {
	switch {
	case r.ID.IsZero():
		return fmt.Errorf("%w: session is zero", ErrInvalidSession)
	case r.TTL < MinTTL || r.TTL > MaxTTL:
		return fmt.Errorf("%w: session ttl must be between %v and %v (got %v)", ErrInvalidSession, MinTTL, MaxTTL, r.TTL)
	case r.LockDelay < 0 || r.LockDelay > MaxLockDelay:
		return fmt.Errorf("%w: lock delay must be between 0 and %v (got %v)", ErrInvalidSession, MaxLockDelay, r.LockDelay)
	}
	return nil
}

// ValidateSessionID checks a session ID: not zero. The error matches
// ErrInvalidSession.
func ValidateSessionID(id SessionID) error {
	if id.IsZero() {
		return fmt.Errorf("%w: session is zero", ErrInvalidSession)
	}
	return nil
}

// SessionLease is a created or renewed session.
type SessionLease struct {
	Remaining time.Duration // session left, counted from when the request was sent
	// TTL is the session's TTL as the store holds it: for a create's
	// retry, the TTL of the session the first create made, never the one
	// the retry asked, or, from a store that cannot tell, the session's
	// time left (never more than its TTL). A keep-alive paced by a TTL
	// longer than the session's would renew too late.
	TTL time.Duration
	// Keys, for a renew: the keys the session holds or waits for, as the
	// store counted them in answering (SessionInfo.Keys). The keep-alive
	// checks its holds with it; a store that does not count them (0, as
	// from an older server) costs a read of each hold's key per renewal.
	Keys int
}

// SessionOption configures Client.NewSession. SessionTTL and LockDelay
// are SessionOptions.
type SessionOption interface {
	applySession(*SessionRequest)
}

// SessionTTLOption is the option SessionTTL returns.
type SessionTTLOption struct{ ttl time.Duration }

// SessionTTL sets the session's TTL: MinTTL..MaxTTL, DefaultSessionTTL when
// not given. The keep-alive renews it every TTL/3.
func SessionTTL(d time.Duration) SessionTTLOption { return SessionTTLOption{ttl: d} }

func (o SessionTTLOption) applySession(r *SessionRequest) { r.TTL = o.ttl }

// LockDelayOption is the option LockDelay returns.
type LockDelayOption struct{ delay time.Duration }

// LockDelay sets the session's lock-delay (see SessionRequest.LockDelay):
// 0..MaxLockDelay, 0 when not given (Consul defaults to 15s; fencing
// tokens already protect a resource from a holder that was only slow, so
// raftlock does not make every crash cost the delay too).
func LockDelay(d time.Duration) LockDelayOption { return LockDelayOption{delay: d} }

func (o LockDelayOption) applySession(r *SessionRequest) { r.LockDelay = o.delay }

// Session is a live session and its keep-alive. Make one with
// Client.NewSession, bind locks to it with Client.WithSession, and Close
// it when done. It is safe for concurrent use.
//
//	s, err := c.NewSession(ctx) // DefaultSessionTTL; SessionTTL(d) to change it
//	if err != nil { ... }
//	defer s.Close(context.Background())
//	sc := c.WithSession(s)
//	ran, err := sc.Lock("jobs/42").Run(ctx, work) // work's ctx ends if the session does
type Session struct {
	store SessionStore
	id    SessionID
	ttl   time.Duration

	done     chan struct{} // closed when the session has ended (or may have)
	stop     context.CancelFunc
	loopDone chan struct{}

	checks     chan int // the Keys of a renewal, for the hold checker; size 1: a round not yet taken is replaced
	checksDone chan struct{}

	mu         sync.Mutex
	deadline   time.Time // conservative local end of the session
	deadlineAt time.Time // when the request that set deadline was sent
	err        error     // why it ended; nil while live
	closed     bool      // Close was called
	gone       bool      // the store said the session has ended
	holds      map[*grant]*Lock
	moving     int    // acquires and releases under the session not yet answered
	moves      uint64 // acquires and releases under the session begun
}

// NewSession creates a session in the client's store and starts its
// keep-alive, which renews it every TTL/3 until Close or until the store
// says it has ended; Done is then closed. It fails with errors.ErrUnsupported
// when the store has no sessions (it does not implement SessionStore).
func (c *Client) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	ss, ok := c.store.(SessionStore)
	if !ok {
		return nil, fmt.Errorf("lock: %T has no sessions: %w", c.store, errors.ErrUnsupported)
	}
	req := SessionRequest{ID: NewSessionID(), TTL: DefaultSessionTTL}
	applyOptions(&req, opts, SessionOption.applySession)
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var lease SessionLease
	var sent time.Time
	for {
		sent = time.Now()
		var err error
		lease, err = ss.CreateSession(ctx, req)
		if err == nil {
			break
		}
		// A create is idempotent per ID: retry one whose outcome is
		// unknown, as long as the caller waits.
		if !errors.Is(err, ErrUnknownOutcome) || ctx.Err() != nil {
			return nil, err
		}
	}
	// The keep-alive is paced by the TTL the store holds: a retried
	// create reports the session the first one made, and a store may hold
	// another TTL than the one asked (SessionLease.TTL).
	ttl := req.TTL
	if lease.TTL > 0 {
		ttl = lease.TTL
	}
	loopCtx, stop := context.WithCancel(context.Background())
	s := &Session{
		store: ss, id: req.ID, ttl: ttl,
		done: make(chan struct{}), stop: stop, loopDone: make(chan struct{}),
		checks: make(chan int, 1), checksDone: make(chan struct{}),
		deadline: sent.Add(lease.Remaining), deadlineAt: sent,
		holds: make(map[*grant]*Lock),
	}
	go s.keepAlive(loopCtx)
	go s.checkHolds(loopCtx)
	return s, nil
}

// ID is the session's ID.
func (s *Session) ID() SessionID { return s.id }

// TTL is the session's TTL as the store holds it, by which its keep-alive
// is paced.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session has ended, or may have: the store said
// it is gone, no renew succeeded before its conservative local deadline,
// or Close was called. Every lock bound to it is then released (or will be
// by the store within what is left of the TTL): stop touching what they
// protect.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session is live, and says why it ended after Done
// is closed; it matches ErrNoSession.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Remaining is how long the session is sure to last, counted on the local
// monotonic clock from when the last create or renew was sent; false once
// it has ended or that figure has run out.
func (s *Session) Remaining() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, false
	}
	left := time.Until(s.deadline)
	return left, left > 0
}

// Close stops the keep-alive and destroys the session, releasing every
// lock bound to it in one step. If the destroy fails (the error says why),
// the session still ends by itself within its TTL. Close is idempotent;
// after the first call it returns nil.
func (s *Session) Close(ctx context.Context) error {
	s.stop()
	<-s.loopDone
	<-s.checksDone
	s.end(fmt.Errorf("%w: the session was closed", ErrNoSession))
	s.mu.Lock()
	first, gone := !s.closed, s.gone
	s.closed = true
	s.mu.Unlock()
	if !first || gone {
		return nil
	}
	// Also after the keep-alive gave up (no renew in time): the session
	// may still be live in the store, holding its locks until it expires.
	_, err := s.store.DestroySession(ctx, s.id)
	return err
}

// end records why the session ended and closes Done, once.
func (s *Session) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.done)
	}
}

// keepAlive renews the session whenever less than two thirds of its TTL
// is left (so every TTL/3), retrying every TTL/10 after a failure until the
// local deadline passes. After each renew it checks the session's holds.
func (s *Session) keepAlive(ctx context.Context) {
	defer close(s.loopDone)
	for {
		s.mu.Lock()
		deadline := s.deadline
		s.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			s.end(fmt.Errorf("%w: the session may have expired: no renew succeeded before its local deadline", ErrNoSession))
			return
		}
		wait := left - s.ttl*2/3
		if wait <= 0 {
			renewCtx, cancel := context.WithDeadline(ctx, deadline)
			s.mu.Lock()
			moving, moves := s.moving, s.moves
			s.mu.Unlock()
			sent := time.Now()
			lease, err := s.store.RenewSession(renewCtx, s.id)
			cancel()
			switch {
			case err == nil:
				s.mu.Lock()
				if !sent.Before(s.deadlineAt) {
					s.deadline, s.deadlineAt = sent.Add(lease.Remaining), sent
				}
				settled := moving == 0 && moves == s.moves
				s.mu.Unlock()
				keys := lease.Keys
				if !settled {
					keys = 0 // an acquire or release may have moved the count: read each hold
				}
				select {
				case <-s.checks: // not taken yet: this renewal's count is newer
				default:
				}
				s.checks <- keys
				continue
			case errors.Is(err, ErrNoSession):
				s.mu.Lock()
				s.gone = true
				s.mu.Unlock()
				s.end(fmt.Errorf("%w: the store ended the session", ErrNoSession))
				return
			case ctx.Err() != nil:
				return // Close
			}
			wait = min(s.ttl/10, time.Until(deadline))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// checkHolds finds the holds of the session's handles that the store no
// longer has (an admin's ForceRelease, or anything else that ended one
// without the handle), once per renewal, and ends them as lost: the
// handle's Run cancels its callback then, as for a lease whose extend
// answered ErrNotHeld. A renewal that counted as many keys as the holds
// known here, with no acquire or release under the session in flight,
// proves that none is lost, at no cost; otherwise each hold's key is read
// (Inspect), a few at a time. It runs beside keepAlive, so that reading
// many keys never delays a renew.
//
// The count proves nothing when the same session ID is also used by
// others (another process binding locks to it through the store): a lock
// they took can hide one lost here until the counts differ again.
func (s *Session) checkHolds(ctx context.Context) {
	defer close(s.checksDone)
	for {
		var keys int
		select {
		case <-ctx.Done():
			return
		case keys = <-s.checks:
		}
		type hold struct {
			l *Lock
			g *grant
		}
		s.mu.Lock()
		holds := make([]hold, 0, len(s.holds))
		distinct := make(map[string]struct{}, len(s.holds))
		for g, l := range s.holds {
			holds = append(holds, hold{l, g})
			distinct[l.key] = struct{}{}
		}
		s.mu.Unlock()
		if len(holds) == 0 || keys == len(holds) && len(distinct) == len(holds) {
			continue // every hold is one key the store still counts
		}
		// Done by the next renewal: a later round reads again.
		roundCtx, cancel := context.WithTimeout(ctx, s.ttl/3)
		sem := make(chan struct{}, holdChecksAtOnce)
		var wg sync.WaitGroup
		var goneMu sync.Mutex // protects gone
		var gone []hold
		for _, h := range holds {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if held, err := h.l.readHold(roundCtx, h.g); err == nil && !held { // a read that fails: the next renewal checks again
					goneMu.Lock()
					gone = append(gone, h)
					goneMu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(gone) > 0 && s.storeEnded(roundCtx) {
			// The holds went with the session (destroyed since the renewal,
			// or expired): its end is what to report, and it ends them all.
			gone = nil
		}
		for _, h := range gone {
			h.l.lose(roundCtx, h.g)
		}
		cancel()
	}
}

// storeEnded asks the store whether the session still lives, when holds
// were found gone, and ends it here if the store says it has ended: its
// locks then learn it with the session's own cause (ErrNoSession), not as
// locks lost one by one. It reports whether the session has ended. An
// unanswered question leaves the holds to be ended as lost.
func (s *Session) storeEnded(ctx context.Context) bool {
	info, err := s.store.InspectSession(ctx, s.id)
	if err != nil || info.Live {
		return false
	}
	s.mu.Lock()
	s.gone = true
	s.mu.Unlock()
	s.end(fmt.Errorf("%w: the store ended the session", ErrNoSession))
	return true
}

// holdChecksAtOnce bounds the reads one round of checkHolds sends at once.
const holdChecksAtOnce = 8

// bind records that l holds g under the session, for checkHolds.
func (s *Session) bind(l *Lock, g *grant) {
	s.mu.Lock()
	s.holds[g] = l
	s.mu.Unlock()
}

// unbind forgets g, which has ended.
func (s *Session) unbind(g *grant) {
	s.mu.Lock()
	delete(s.holds, g)
	s.mu.Unlock()
}

// moveBegins records an acquire or release under the session on its way
// to the store; call the function it returns once it is answered (and
// the handle has recorded the outcome). A renewal that overlaps one
// cannot vouch for the holds with its count.
func (s *Session) moveBegins() (answered func()) {
	s.mu.Lock()
	s.moving++
	s.moves++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.moving--
		s.moves++
		s.mu.Unlock()
	}
}

// WithSession returns a client whose lock handles are bound to s: their
// locks have no lease of their own and end when s ends. Their TTL option
// is ignored and Extend does nothing but check the session; Run cancels
// its callback's context when s ends (the cause matches ErrNotHeld and
// ErrNoSession), or when the lock alone is no longer held (an admin
// released it): the session's keep-alive checks its holds on every
// renewal (see Session.Done). Inspect and List are the client's.
func (c *Client) WithSession(s *Session) *Client {
	cc := *c
	cc.session = s
	return &cc
}

// Session is the session the client's handles are bound to, nil if none.
func (c *Client) Session() *Session { return c.session }

// validateMetadata checks holder metadata: at most MaxMetadataLen bytes.
// The error matches ErrInvalidMetadata.
func validateMetadata(meta string) error {
	if len(meta) > MaxMetadataLen {
		return fmt.Errorf("%w: metadata is longer than %d bytes (got %d)", ErrInvalidMetadata, MaxMetadataLen, len(meta))
	}
	return nil
}
