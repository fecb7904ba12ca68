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

// ValidateAcquire checks an acquire request against the limits. Every entry
// point of this package validates through the same function as ValidateAcquire,
// ValidateRelease, ValidateExtend and ValidateKey, and a Store should call them
// first, before anything changes: an invalid request changes nothing. The
// error matches ErrInvalidKey, ErrInvalidOwner, ErrInvalidTTL or
// ErrInvalidWait, and its message says what was wrong.
func ValidateAcquire(req AcquireRequest) error {
	return validate(fsm.Command{Op: fsm.OpAcquire, Key: req.Key, Owner: fsm.Owner(req.Owner), TTL: req.TTL, Wait: req.Wait})
}

// ValidateRelease checks the arguments of Store.Release; see ValidateAcquire.
func ValidateRelease(key string, owner Owner) error {
	return validate(fsm.Command{Op: fsm.OpRelease, Key: key, Owner: fsm.Owner(owner)})
}

// ValidateExtend checks the arguments of Store.Extend; see ValidateAcquire.
func ValidateExtend(key string, owner Owner, ttl time.Duration) error {
	return validate(fsm.Command{Op: fsm.OpExtend, Key: key, Owner: fsm.Owner(owner), TTL: ttl})
}

// ValidateKey checks a key (the argument of Store.Inspect); see ValidateAcquire.
func ValidateKey(key string) error {
	// A release with a placeholder owner: the state machine checks the key the
	// same way for every command, so this is exactly its key rule.
	return validate(fsm.Command{Op: fsm.OpRelease, Key: key, Owner: fsm.Owner{0: 1}})
}

// validate is the one place where the state machine's validation errors become
// this package's sentinels, so that every store and every entry point reports
// bad input identically and the limits live in one place (package fsm).
func validate(c fsm.Command) error {
	err := c.Validate()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fsm.ErrEmptyKey):
		return fmt.Errorf("%w: %w", ErrInvalidKey, err)
	case errors.Is(err, fsm.ErrKeyTooLong):
		return fmt.Errorf("%w: %w (got %d)", ErrInvalidKey, err, len(c.Key))
	case errors.Is(err, fsm.ErrZeroOwner):
		return fmt.Errorf("%w: %w", ErrInvalidOwner, err)
	case errors.Is(err, fsm.ErrTTLRange):
		return fmt.Errorf("%w: %w (got %v)", ErrInvalidTTL, err, c.TTL)
	case errors.Is(err, fsm.ErrWaitRange):
		return fmt.Errorf("%w: %w (got %v)", ErrInvalidWait, err, c.Wait)
	default:
		// Only a bug in this package can build a command the machine rejects
		// for another reason (an unused field, a bad op).
		return fmt.Errorf("lock: invalid request: %w", err)
	}
}
