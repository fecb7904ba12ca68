package quietlog

import (
	"sync"
	"time"
)

// Every lets one kind of event be told (logged) at most once per interval,
// with the count of those since it was last told: for a line that a
// hostile or broken client could otherwise have the server write for each
// of its requests or connections, whatever logger the program gives. The
// first event is told at once. Safe for concurrent use; the zero value is
// not usable (NewEvery).
type Every struct {
	interval time.Duration

	mu    sync.Mutex // protects the fields below
	told  time.Time  // when an event was last told
	count int        // events since then, not told
}

// NewEvery returns an Every that tells at most once per interval.
func NewEvery(interval time.Duration) *Every { return &Every{interval: interval} }

// Interval is the least time between two events told.
func (e *Every) Interval() time.Duration { return e.interval }

// Note counts one event and says whether to tell it now (tell), with n, the
// events since the last one told, this one included.
func (e *Every) Note() (n int, tell bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.count++
	now := time.Now()
	if !e.told.IsZero() && now.Sub(e.told) < e.interval {
		return 0, false
	}
	n, e.count, e.told = e.count, 0, now
	return n, true
}
