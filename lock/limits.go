package lock

import (
	"errors"
	"fmt"
	"time"
)

// Input limits. Every store enforces them (a cluster's state machine has
// the same ones: a test of the repository keeps the two equal).
const (
	MaxKeyLen  = 512              // bytes; a key is 1..MaxKeyLen bytes of any content
	MinTTL     = time.Millisecond // shortest lease
	MaxTTL     = 24 * time.Hour   // longest lease
	MaxWait    = 24 * time.Hour   // longest a caller may queue for a held key
	MaxWaiters = 1 << 16          // callers that may queue for one key; beyond it ErrQueueFull

	// DefaultTTL is the lease a handle asks for unless given the TTL option.
	DefaultTTL = 30 * time.Second
)

// What was wrong with a request, wrapped in its sentinel (ErrInvalidKey,
// ...). The texts are the state machine's words for the same faults, so
// that a message reads the same whichever layer found it.
var (
	errEmptyKey    = errors.New("key is empty")
	errKeyTooLong  = errors.New("key is longer than 512 bytes")
	errZeroOwner   = errors.New("owner is zero")
	errTTLRange    = errors.New("ttl must be between 1ms and 24h")
	errWaitRange   = errors.New("wait must be between 0 and 24h")
	errUnusedField = errors.New("command sets a field its op does not use")
)

// Validate checks an acquire request against the limits. Every entry point
// of this package validates through the same rules as Validate,
// ValidateRelease, ValidateExtend and ValidateKey, and a Store should call
// them first, before anything changes: an invalid request changes nothing.
// The error matches ErrInvalidKey, ErrInvalidOwner, ErrInvalidTTL,
// ErrInvalidWait, ErrInvalidMetadata, ErrInvalidLimit, ErrInvalidKind or
// ErrInvalidSession, and its message says what was wrong.
//
// The checks run in a fixed order (the key or key set, the owner, the
// metadata, the lease, the wait, the kind), and the first that fails is
// the one reported, as every store reports it.
func (r AcquireRequest) Validate() error {
	if len(r.Keys) > 0 && r.Key != r.Keys[0] {
		return fmt.Errorf("%w: a multi-key request's Key must be the first of its Keys (got %q, keys start with %q)", ErrInvalidKey, r.Key, r.Keys[0])
	}
	if r.Keys != nil {
		return r.validateSet()
	}
	if err := ValidateKey(r.Key); err != nil {
		return err
	}
	if r.Owner.IsZero() {
		return ownerError()
	}
	if err := validateMetadata(r.Metadata); err != nil {
		return err
	}
	if !r.Session.IsZero() {
		if r.TTL != 0 {
			return r.unusedFieldError()
		}
	} else if err := validateTTL(r.TTL); err != nil {
		return err
	}
	if err := validateWait(r.Wait); err != nil {
		return err
	}
	return r.validateKind()
}

// validateKind checks an acquire's kind, limit and mode.
func (r AcquireRequest) validateKind() error {
	switch r.Kind {
	case KindMutex, KindRWLock:
		if r.Limit != 0 {
			return r.unusedFieldError()
		}
	case KindSemaphore:
		if r.Limit < 1 || r.Limit > MaxHolders {
			return fmt.Errorf("%w: limit must be between 1 and %d (got %d)", ErrInvalidLimit, MaxHolders, r.Limit)
		}
	default:
		return fmt.Errorf("%w: unknown kind %d", ErrInvalidKind, r.Kind)
	}
	if r.Shared && r.Kind != KindRWLock {
		return r.unusedFieldError()
	}
	return nil
}

// unusedFieldError says which field of a single-key acquire its kind or
// session does not take.
func (r AcquireRequest) unusedFieldError() error {
	switch {
	case r.Shared && r.Kind != KindRWLock:
		return fmt.Errorf("%w: only a read/write lock has shared holds (kind is %v)", ErrInvalidKind, r.Kind)
	case r.Limit != 0 && r.Kind != KindSemaphore:
		return fmt.Errorf("%w: only a semaphore has a limit (kind is %v, limit %d)", ErrInvalidKind, r.Kind, r.Limit)
	case !r.Session.IsZero() && r.TTL != 0:
		return fmt.Errorf("%w: a lock bound to a session has no lease of its own: ttl must be 0 (got %v)", ErrInvalidTTL, r.TTL)
	}
	return fmt.Errorf("lock: invalid request: %w", errUnusedField)
}

// ValidateRelease checks the arguments of Store.Release; see
// AcquireRequest.Validate.
func ValidateRelease(key string, owner Owner) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if owner.IsZero() {
		return ownerError()
	}
	return nil
}

// ValidateExtend checks the arguments of Store.Extend; see
// AcquireRequest.Validate.
func ValidateExtend(key string, owner Owner, ttl time.Duration) error {
	if err := ValidateRelease(key, owner); err != nil {
		return err
	}
	return validateTTL(ttl)
}

// ValidateKey checks a key (the argument of Store.Inspect): 1..MaxKeyLen
// bytes. The error matches ErrInvalidKey.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: %w", ErrInvalidKey, errEmptyKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %w (got %d)", ErrInvalidKey, errKeyTooLong, len(key))
	}
	return nil
}

// validateTTL checks a lease length: MinTTL..MaxTTL. The error matches
// ErrInvalidTTL.
func validateTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: %w (got %v)", ErrInvalidTTL, errTTLRange, ttl)
	}
	return nil
}

// validateWait checks how long an acquire may queue: 0..MaxWait. The error
// matches ErrInvalidWait.
func validateWait(wait time.Duration) error {
	if wait < 0 || wait > MaxWait {
		return fmt.Errorf("%w: %w (got %v)", ErrInvalidWait, errWaitRange, wait)
	}
	return nil
}

func ownerError() error { return fmt.Errorf("%w: %w", ErrInvalidOwner, errZeroOwner) }
