package lock

import (
	"errors"
	"fmt"
	"time"
)

// Errors every Store and the lock API report; match them with errors.Is.
var (
	// ErrLocked: the key is held by another owner, or kept for a waiting
	// multi-key acquire (reserved). Returned as a *HeldError.
	ErrLocked = errors.New("lock: held by another owner")
	// ErrNotHeld: the caller does not hold the lock (never acquired, released, or lost).
	ErrNotHeld = errors.New("lock: not held")
	// ErrInvalidKey: the key is empty or longer than MaxKeyLen bytes.
	ErrInvalidKey = errors.New("lock: invalid key")
	// ErrInvalidTTL: the TTL is outside MinTTL..MaxTTL.
	ErrInvalidTTL = errors.New("lock: invalid ttl")
	// ErrInvalidWait: the wait is negative or longer than MaxWait.
	ErrInvalidWait = errors.New("lock: invalid wait")
	// ErrInvalidOwner: the owner is zero or malformed.
	ErrInvalidOwner = errors.New("lock: invalid owner")
	// ErrQueueFull: too many callers already wait for the key.
	ErrQueueFull = errors.New("lock: too many waiters")
	// ErrUnavailable: the store cannot answer now (no leader, no quorum); the
	// operation did not take effect, or its outcome is unknown if the error also
	// matches ErrUnknownOutcome.
	ErrUnavailable = errors.New("lock: store unavailable")
	// ErrUnknownOutcome: the request may or may not have taken effect. Retrying
	// with the same owner is safe: acquire, release and extend are idempotent per owner.
	ErrUnknownOutcome = errors.New("lock: outcome unknown")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("lock: store closed")
	// ErrInUse: the handle already holds the lock or is acquiring it. A handle
	// is one holder at a time; give each goroutine its own (Client.Lock is cheap).
	ErrInUse = errors.New("lock: handle already holds or is acquiring the lock")
	// ErrInvalidList: a ListRequest has a negative limit.
	ErrInvalidList = errors.New("lock: invalid list request")
	// ErrBadSerialized: Client.Restore was given something Lock.Serialize did not write.
	ErrBadSerialized = errors.New("lock: malformed serialized lock")
	// ErrKindMismatch: the key exists (someone holds or waits for it) as
	// another kind than the acquire asked for, or as a semaphore of another
	// limit. Returned as a *KindMismatchError.
	ErrKindMismatch = errors.New("lock: key is of another kind")
	// ErrInvalidLimit: a semaphore's limit is outside 1..MaxHolders.
	ErrInvalidLimit = errors.New("lock: invalid semaphore limit")
	// ErrInvalidKind: an acquire names an unknown kind, or a mode its kind
	// does not have (Shared for anything but a read/write lock, a limit
	// for anything but a semaphore).
	ErrInvalidKind = errors.New("lock: invalid kind")
)

// HeldError reports that the key is not free: another owner holds it, or
// (Reserved) nobody holds it but it is kept for a multi-key acquire waiting
// for its other keys. It carries only what is safe to tell anyone: never
// the holder's owner.
type HeldError struct {
	Key string
	// Token and Remaining: the holder's fencing token and lease left when
	// the store looked. Token is 0 when there is no holder to report: the
	// key is Reserved, or a wait ran out and the key was free by the time
	// the store looked (a token is never 0).
	Token     uint64
	Remaining time.Duration
	// Reserved: nobody holds the key; it is kept for the multi-key
	// (LockAll) acquire at the head of its queue, which still waits for
	// another of its keys and is granted every key at once when that one
	// comes free (see MultiKeyStore). Token and Remaining are zero.
	Reserved bool
}

func (e *HeldError) Error() string {
	switch {
	case e.Reserved:
		return fmt.Sprintf("lock: %q reserved for a waiting multi-key acquire (nobody holds it; it is kept until that acquire gets its other keys)", e.Key)
	case e.Token == 0:
		return fmt.Sprintf("lock: %q held by another owner", e.Key)
	}
	return fmt.Sprintf("lock: %q held by another owner (token %d, %v left)", e.Key, e.Token, e.Remaining.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *HeldError) Is(target error) bool { return target == ErrLocked }
