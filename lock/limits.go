package lock

import (
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// Input limits. They are the state machine's (package fsm), re-exported so
// that users and stores never import fsm to learn them.
const (
	MaxKeyLen  = fsm.MaxKeyLen  // bytes; a key is 1..MaxKeyLen bytes of any content
	MinTTL     = fsm.MinTTL     // shortest lease
	MaxTTL     = fsm.MaxTTL     // longest lease
	MaxWait    = fsm.MaxWait    // longest a caller may queue for a held key
	MaxWaiters = fsm.MaxWaiters // callers that may queue for one key; beyond it ErrQueueFull

	// DefaultTTL is the lease a handle asks for unless given the TTL option.
	DefaultTTL = 30 * time.Second
)

// Validate checks an acquire request against the limits. Every entry point
// of this package validates through the same rules as Validate,
// ValidateRelease, ValidateExtend, ValidateKey, ValidateTTL and ValidateWait,
// and a Store should call them first, before anything changes: an invalid
// request changes nothing. The error matches ErrInvalidKey, ErrInvalidOwner,
// ErrInvalidTTL or ErrInvalidWait, and its message says what was wrong.
func (r AcquireRequest) Validate() error {
	if len(r.Keys) > 0 && r.Key != r.Keys[0] {
		return fmt.Errorf("%w: a multi-key request's Key must be the first of its Keys (got %q, keys start with %q)", ErrInvalidKey, r.Key, r.Keys[0])
	}
	return validate(r.command())
}

// command is the state machine's acquire for r, which validate checks.
func (r AcquireRequest) command() fsm.Command {
	if r.Keys != nil {
		return fsm.Command{Op: fsm.OpAcquireAll, Keys: r.Keys, Owner: fsm.Owner(r.Owner), TTL: r.TTL, Wait: r.Wait, Session: fsm.Owner(r.Session), Meta: r.Metadata,
			Kind: fsm.Kind(r.Kind), Limit: r.Limit, Shared: r.Shared}
	}
	return fsm.Command{Op: fsm.OpAcquire, Key: r.Key, Owner: fsm.Owner(r.Owner), TTL: r.TTL, Wait: r.Wait, Session: fsm.Owner(r.Session), Meta: r.Metadata,
		Kind: fsm.Kind(r.Kind), Limit: r.Limit, Shared: r.Shared}
}

// ValidateRelease checks the arguments of Store.Release; see
// AcquireRequest.Validate.
func ValidateRelease(key string, owner Owner) error {
	return validate(fsm.Command{Op: fsm.OpRelease, Key: key, Owner: fsm.Owner(owner)})
}

// ValidateExtend checks the arguments of Store.Extend; see
// AcquireRequest.Validate.
func ValidateExtend(key string, owner Owner, ttl time.Duration) error {
	return validate(fsm.Command{Op: fsm.OpExtend, Key: key, Owner: fsm.Owner(owner), TTL: ttl})
}

// ValidateKey checks a key (the argument of Store.Inspect): 1..MaxKeyLen
// bytes. The error matches ErrInvalidKey.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return keyError(fsm.ErrEmptyKey, key)
	case len(key) > MaxKeyLen:
		return keyError(fsm.ErrKeyTooLong, key)
	}
	return nil
}

// ValidateTTL checks a lease length: MinTTL..MaxTTL. The error matches
// ErrInvalidTTL.
func ValidateTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return ttlError(ttl)
	}
	return nil
}

// ValidateWait checks how long an acquire may queue: 0..MaxWait. The error
// matches ErrInvalidWait.
func ValidateWait(wait time.Duration) error {
	if wait < 0 || wait > MaxWait {
		return waitError(wait)
	}
	return nil
}

func keyError(err error, key string) error {
	if errors.Is(err, fsm.ErrKeyTooLong) {
		return fmt.Errorf("%w: %w (got %d)", ErrInvalidKey, err, len(key))
	}
	return fmt.Errorf("%w: %w", ErrInvalidKey, err)
}

func ttlError(ttl time.Duration) error {
	return fmt.Errorf("%w: %w (got %v)", ErrInvalidTTL, fsm.ErrTTLRange, ttl)
}

func waitError(wait time.Duration) error {
	return fmt.Errorf("%w: %w (got %v)", ErrInvalidWait, fsm.ErrWaitRange, wait)
}

// validate is the one place where the state machine's validation errors become
// this package's sentinels, so that every store and every entry point reports
// bad input identically and the limits live in one place (package fsm).
func validate(c fsm.Command) error {
	err := c.Validate()
	if err != nil && c.Op == fsm.OpAcquireAll {
		if kerr := validateKeys(c, err); kerr != nil {
			return kerr
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fsm.ErrEmptyKey), errors.Is(err, fsm.ErrKeyTooLong):
		return keyError(err, c.Key)
	case errors.Is(err, fsm.ErrZeroOwner):
		return fmt.Errorf("%w: %w", ErrInvalidOwner, err)
	case errors.Is(err, fsm.ErrTTLRange):
		return ttlError(c.TTL)
	case errors.Is(err, fsm.ErrWaitRange):
		return waitError(c.Wait)
	case errors.Is(err, fsm.ErrMetaTooLong):
		return ValidateMetadata(c.Meta)
	case errors.Is(err, fsm.ErrLimitRange):
		return fmt.Errorf("%w: limit must be between 1 and %d (got %d)", ErrInvalidLimit, MaxHolders, c.Limit)
	case errors.Is(err, fsm.ErrUnknownKind):
		return fmt.Errorf("%w: unknown kind %d", ErrInvalidKind, c.Kind)
	case errors.Is(err, fsm.ErrUnusedField) && c.Op == fsm.OpAcquire && c.Shared && c.Kind != fsm.KindRW:
		return fmt.Errorf("%w: only a read/write lock has shared holds (kind is %v)", ErrInvalidKind, Kind(c.Kind))
	case errors.Is(err, fsm.ErrUnusedField) && c.Op == fsm.OpAcquire && c.Limit != 0 && c.Kind != fsm.KindSemaphore:
		return fmt.Errorf("%w: only a semaphore has a limit (kind is %v, limit %d)", ErrInvalidKind, Kind(c.Kind), c.Limit)
	case errors.Is(err, fsm.ErrUnusedField) && c.Op == fsm.OpAcquire && !c.Session.IsZero() && c.TTL != 0:
		return fmt.Errorf("%w: a lock bound to a session has no lease of its own: ttl must be 0 (got %v)", ErrInvalidTTL, c.TTL)
	default:
		// Only a bug in this package can build a command the machine rejects
		// for another reason (an unused field, a bad op).
		return fmt.Errorf("lock: invalid request: %w", err)
	}
}
