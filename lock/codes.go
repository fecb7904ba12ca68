package lock

import "errors"

// Error codes name this package's errors on the wire: every raftlock API
// that sends an error to another process (the HTTP API and its Go client,
// lockhttp's default responses) says which one it is with these strings,
// and a receiver turns a code back into errors that match the same
// sentinels. Codes are stable across versions; clients match on them, never
// on messages.
const (
	CodeLocked         = "locked"          // ErrLocked (a *HeldError)
	CodeNotHeld        = "not_held"        // ErrNotHeld
	CodeInvalidKey     = "invalid_key"     // ErrInvalidKey
	CodeInvalidTTL     = "invalid_ttl"     // ErrInvalidTTL
	CodeInvalidWait    = "invalid_wait"    // ErrInvalidWait
	CodeInvalidOwner   = "invalid_owner"   // ErrInvalidOwner
	CodeInvalidList    = "invalid_list"    // ErrInvalidList
	CodeQueueFull      = "queue_full"      // ErrQueueFull
	CodeUnknownOutcome = "unknown_outcome" // ErrUnknownOutcome (and ErrUnavailable)
	CodeClosed         = "closed"          // ErrClosed
	CodeUnavailable    = "unavailable"     // ErrUnavailable

	CodeInvalidSession  = "invalid_session"  // ErrInvalidSession
	CodeInvalidMetadata = "invalid_metadata" // ErrInvalidMetadata
	CodeNoSession       = "no_session"       // ErrNoSession

	CodeKindMismatch    = "kind_mismatch"     // ErrKindMismatch (a *KindMismatchError)
	CodeInvalidLimit    = "invalid_limit"     // ErrInvalidLimit
	CodeInvalidKind     = "invalid_kind"      // ErrInvalidKind
	CodeTooManyWatchers = "too_many_watchers" // ErrTooManyWatchers

	CodeMemberTooOld = "member_too_old" // ErrMemberTooOld
)

// CodeQuotaExceeded names ErrQuotaExceeded.
const CodeQuotaExceeded = "quota_exceeded"

// To add a code: its sentinel (errors.go), its constant above and its line
// below; then its HTTP status in apiserver's lockCodeStatus (a test there
// fails until it has one), and, for the HTTP client's users, an api.Code
// constant naming it.

// errorCodes is the one table of codes and sentinels: a line per code.
// ErrorCode reads it top down and answers the first line whose first
// sentinel the error matches, so a more cautious code comes before one it
// implies (an error matching both ErrUnknownOutcome and ErrUnavailable is
// unknown_outcome). CodeErrors answers a line's sentinels, all of which an
// error of that code matches.
var errorCodes = []struct {
	code string
	errs []error
}{
	{CodeLocked, []error{ErrLocked}},
	{CodeNotHeld, []error{ErrNotHeld}},
	{CodeNoSession, []error{ErrNoSession}},
	{CodeInvalidKey, []error{ErrInvalidKey}},
	{CodeInvalidTTL, []error{ErrInvalidTTL}},
	{CodeInvalidWait, []error{ErrInvalidWait}},
	{CodeInvalidOwner, []error{ErrInvalidOwner}},
	{CodeInvalidList, []error{ErrInvalidList}},
	{CodeInvalidSession, []error{ErrInvalidSession}},
	{CodeInvalidMetadata, []error{ErrInvalidMetadata}},
	{CodeQueueFull, []error{ErrQueueFull}},
	{CodeKindMismatch, []error{ErrKindMismatch}},
	{CodeInvalidLimit, []error{ErrInvalidLimit}},
	{CodeInvalidKind, []error{ErrInvalidKind}},
	{CodeTooManyWatchers, []error{ErrTooManyWatchers}},
	{CodeQuotaExceeded, []error{ErrQuotaExceeded}},
	{CodeMemberTooOld, []error{ErrMemberTooOld}},
	{CodeUnknownOutcome, []error{ErrUnknownOutcome, ErrUnavailable}},
	{CodeClosed, []error{ErrClosed}},
	{CodeUnavailable, []error{ErrUnavailable}},
}

// ErrorCode is the code of err: the first of the table's sentinels that err
// matches (errors.Is), or "" when it matches none (a bug, a context's
// error, an error of another package).
func ErrorCode(err error) string {
	for _, c := range errorCodes {
		if errors.Is(err, c.errs[0]) {
			return c.code
		}
	}
	return ""
}

// CodeErrors lists the sentinels an error of code matches, nil for a code
// that is not one of this package's. The slice is the caller's.
func CodeErrors(code string) []error {
	for _, c := range errorCodes {
		if c.code == code {
			return append([]error(nil), c.errs...)
		}
	}
	return nil
}

// ErrorCodes lists every code of the table, in its order.
func ErrorCodes() []string {
	codes := make([]string, len(errorCodes))
	for i, c := range errorCodes {
		codes[i] = c.code
	}
	return codes
}
