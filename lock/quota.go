package lock

import "errors"

// ErrQuotaExceeded: the store already keeps as much state as it is
// configured to (locks held and keys with waiters, sessions, or callers
// queued over all keys), and refused a command that would add more. The
// message names the limit, its value, and what to do. A store that bounds
// its state never refuses what frees or keeps state (release, extend,
// cancelling a wait, destroying or renewing a session, an acquire repeated
// by the key's holder or by a caller already queued for it), so freeing
// state is always possible; the same acquire succeeds once enough is
// freed, or the limit is raised.
var ErrQuotaExceeded = errors.New("lock: quota exceeded")
