// Package errcode is the one table of the codes that name raftlock's lock
// errors on the wire: every raftlock API that sends an error to another
// process (the HTTP API and its Go client, lockhttp's default responses)
// says which one it is with these strings, and a receiver turns a code
// back into errors that match the same sentinels.
package errcode

import (
	"errors"

	"github.com/raftlock/raftlock/lock"
)

// The codes. They are stable across versions: clients match on them, never
// on messages.
const (
	Locked         = "locked"          // lock.ErrLocked (a *HeldError)
	NotHeld        = "not_held"        // lock.ErrNotHeld
	InvalidKey     = "invalid_key"     // lock.ErrInvalidKey
	InvalidTTL     = "invalid_ttl"     // lock.ErrInvalidTTL
	InvalidWait    = "invalid_wait"    // lock.ErrInvalidWait
	InvalidOwner   = "invalid_owner"   // lock.ErrInvalidOwner
	InvalidList    = "invalid_list"    // lock.ErrInvalidList
	QueueFull      = "queue_full"      // lock.ErrQueueFull
	UnknownOutcome = "unknown_outcome" // lock.ErrUnknownOutcome (and ErrUnavailable)
	Closed         = "closed"          // lock.ErrClosed
	Unavailable    = "unavailable"     // lock.ErrUnavailable

	InvalidSession  = "invalid_session"  // lock.ErrInvalidSession
	InvalidMetadata = "invalid_metadata" // lock.ErrInvalidMetadata
	NoSession       = "no_session"       // lock.ErrNoSession

	KindMismatch    = "kind_mismatch"     // lock.ErrKindMismatch (a *KindMismatchError)
	InvalidLimit    = "invalid_limit"     // lock.ErrInvalidLimit
	InvalidKind     = "invalid_kind"      // lock.ErrInvalidKind
	TooManyWatchers = "too_many_watchers" // lock.ErrTooManyWatchers

	MemberTooOld = "member_too_old" // ErrMemberTooOld
)

// QuotaExceeded names lock.ErrQuotaExceeded.
const QuotaExceeded = "quota_exceeded"

// ErrMemberTooOld is cluster.ErrMemberTooOld (its doc says when it is
// returned), defined here so that the HTTP client, which does not link the
// cluster, reproduces it from its code.
var ErrMemberTooOld = errors.New("lock: a cluster member cannot read this command")

// To add a code: its sentinel (package lock's errors.go), its constant
// above and its line below; then its HTTP status in apiserver's
// lockCodeStatus (a test there fails until it has one), and, for the HTTP
// client's users, an api.Code constant naming it.

// table is the one table of codes and sentinels: a line per code.
// Of reads it top down and answers the first line whose first
// sentinel the error matches, so a more cautious code comes before one it
// implies (an error matching both ErrUnknownOutcome and ErrUnavailable is
// unknown_outcome). Errors answers a line's sentinels, all of which an
// error of that code matches.
var table = []struct {
	code string
	errs []error
}{
	{Locked, []error{lock.ErrLocked}},
	{NotHeld, []error{lock.ErrNotHeld}},
	{NoSession, []error{lock.ErrNoSession}},
	{InvalidKey, []error{lock.ErrInvalidKey}},
	{InvalidTTL, []error{lock.ErrInvalidTTL}},
	{InvalidWait, []error{lock.ErrInvalidWait}},
	{InvalidOwner, []error{lock.ErrInvalidOwner}},
	{InvalidList, []error{lock.ErrInvalidList}},
	{InvalidSession, []error{lock.ErrInvalidSession}},
	{InvalidMetadata, []error{lock.ErrInvalidMetadata}},
	{QueueFull, []error{lock.ErrQueueFull}},
	{KindMismatch, []error{lock.ErrKindMismatch}},
	{InvalidLimit, []error{lock.ErrInvalidLimit}},
	{InvalidKind, []error{lock.ErrInvalidKind}},
	{TooManyWatchers, []error{lock.ErrTooManyWatchers}},
	{QuotaExceeded, []error{lock.ErrQuotaExceeded}},
	{MemberTooOld, []error{ErrMemberTooOld}},
	{UnknownOutcome, []error{lock.ErrUnknownOutcome, lock.ErrUnavailable}},
	{Closed, []error{lock.ErrClosed}},
	{Unavailable, []error{lock.ErrUnavailable}},
}

// Of is the code of err: the first of the table's sentinels that err
// matches (errors.Is), or "" when it matches none (a bug, a context's
// error, an error of another package).
func Of(err error) string {
	for _, c := range table {
		if errors.Is(err, c.errs[0]) {
			return c.code
		}
	}
	return ""
}

// Errors lists the sentinels an error of code matches, nil for a code
// that is not one of the table's. The slice is the caller's.
func Errors(code string) []error {
	for _, c := range table {
		if c.code == code {
			return append([]error(nil), c.errs...)
		}
	}
	return nil
}

// All lists every code of the table, in its order.
func All() []string {
	codes := make([]string, len(table))
	for i, c := range table {
		codes[i] = c.code
	}
	return codes
}
