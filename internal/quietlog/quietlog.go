// Package quietlog keeps logs readable while something fails over and over:
// a Quieter collapses repeated identical warnings and errors into one line
// per window that counts them (repeated=N).
//
// A leader writes ~3 raft errors a second for every member it cannot reach,
// a listener one warning per refused connection; an operator learns to ignore
// logs like that. Through a Quieter, the first occurrence of a line is written
// at once; the next ones within the window are counted, and when the window
// ends the latest of them is written once with repeated=N (and a new window
// starts). A window without a repetition ends the burst: the next occurrence
// is written at once again.
//
// Lines are identical when they come from the same logger (name and implied
// arguments) at the same level with the same message and the same arguments,
// except those that vary between occurrences of one failure (error texts,
// durations, terms: see varyingKeys); a "remote" address counts by host
// only, since each connection comes from another port. Trace, debug and info
// lines, and lines the logger's level hides, pass through uncounted.
package quietlog

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultWindow is the window raftlock's nodes use.
const DefaultWindow = 30 * time.Second

// Adjust may change a line before it is counted: its level (a normal event
// logged as a warning by a dependency) or its arguments (what to do about
// it). It must be safe for concurrent use.
type Adjust func(level hclog.Level, msg string, args []interface{}) (hclog.Level, []interface{})

// Quieter collapses repeated lines of every logger wrapped by it (and of
// those derived from them with With, Named or ResetNamed). It is safe for
// concurrent use. Close writes the counts still pending and stops its
// timers; afterwards lines pass through uncounted.
type Quieter struct {
	window time.Duration
	adjust Adjust
	// afterFunc schedules the end of a window (time.AfterFunc; tests replace it).
	afterFunc func(d time.Duration, f func()) stopper

	mu     sync.Mutex
	bursts map[string]*burst
	closed bool
}

// stopper is what afterFunc returns: a *time.Timer in production.
type stopper interface{ Stop() bool }

// burst is one kind of line written within the current window.
type burst struct {
	repeated int // occurrences since the line was last written
	// The latest occurrence, written with the count when the window ends.
	log   hclog.Logger
	level hclog.Level
	msg   string
	args  []interface{}
	timer stopper
}

// New returns a Quieter that writes a repeated line at most once per window;
// adjust (may be nil) sees every line first.
func New(window time.Duration, adjust Adjust) *Quieter {
	return &Quieter{
		window:    window,
		adjust:    adjust,
		afterFunc: func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) },
		bursts:    map[string]*burst{},
	}
}

// Wrap returns log with its repeated warnings and errors collapsed by q.
func (q *Quieter) Wrap(log hclog.Logger) hclog.Logger {
	return &quietLogger{Logger: log, q: q}
}

// Close writes the counts of the lines still collapsed and stops collapsing.
// It is idempotent.
func (q *Quieter) Close() {
	q.mu.Lock()
	pending := make([]*burst, 0, len(q.bursts))
	for key, b := range q.bursts {
		b.timer.Stop()
		if b.repeated > 0 {
			pending = append(pending, b)
		}
		delete(q.bursts, key)
	}
	q.closed = true
	q.mu.Unlock()
	for _, b := range pending {
		b.write()
	}
}

// write writes b's latest occurrence with its count.
func (b *burst) write() {
	args := append(append([]interface{}{}, b.args...), "repeated", b.repeated)
	b.log.Log(b.level, b.msg, args...)
}

// log writes one line, or counts it when the same line was written within
// the window.
func (q *Quieter) log(l hclog.Logger, level hclog.Level, msg string, args []interface{}) {
	if q.adjust != nil {
		level, args = q.adjust(level, msg, args)
	}
	if level < hclog.Warn || level == hclog.Warn && !l.IsWarn() || level >= hclog.Error && !l.IsError() {
		// Not counted: below a warning, or not written at all.
		l.Log(level, msg, args...)
		return
	}
	key := burstKey(l.Name(), level, msg, append(l.ImpliedArgs(), args...))
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		l.Log(level, msg, args...)
		return
	}
	if b, ok := q.bursts[key]; ok {
		b.repeated++
		b.log, b.level, b.msg, b.args = l, level, msg, args
		q.mu.Unlock()
		return
	}
	b := &burst{}
	q.bursts[key] = b
	b.timer = q.afterFunc(q.window, func() { q.endWindow(key, b) })
	q.mu.Unlock()
	l.Log(level, msg, args...)
}

// endWindow writes the count of b's line if it repeated in the window that
// ended (and starts another window), or forgets the line.
func (q *Quieter) endWindow(key string, b *burst) {
	q.mu.Lock()
	if q.closed || q.bursts[key] != b {
		q.mu.Unlock()
		return
	}
	if b.repeated == 0 {
		delete(q.bursts, key)
		q.mu.Unlock()
		return
	}
	written := *b
	b.repeated = 0
	b.timer = q.afterFunc(q.window, func() { q.endWindow(key, b) })
	q.mu.Unlock()
	written.write()
}

// varyingKeys are the arguments that differ between occurrences of one
// failure (the error text, a backoff, a term), left out of a line's identity.
var varyingKeys = map[string]bool{
	"error": true, "err": true, "last_error": true, "time": true, "backoff time": true,
	"term": true, "index": true, "retry_in": true, "cause": true, "last-index": true,
}

// burstKey identifies a line for collapsing: logger, level, message and the
// arguments (the logger's own included) that name whom it is about.
func burstKey(name string, level hclog.Level, msg string, args []interface{}) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s\x00%d\x00%s", name, level, msg)
	var pairs []string
	for i := 0; i+1 < len(args); i += 2 {
		k := fmt.Sprint(args[i])
		if varyingKeys[k] {
			continue
		}
		v := fmt.Sprint(args[i+1])
		if k == "remote" {
			if host, _, err := net.SplitHostPort(v); err == nil {
				v = host
			}
		}
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	for _, p := range pairs {
		sb.WriteString("\x00" + p)
	}
	return sb.String()
}

// quietLogger is an hclog.Logger whose lines go through a Quieter.
type quietLogger struct {
	hclog.Logger
	q *Quieter
}

func (l *quietLogger) Log(level hclog.Level, msg string, args ...interface{}) {
	l.q.log(l.Logger, level, msg, args)
}
func (l *quietLogger) Trace(msg string, args ...interface{}) { l.Log(hclog.Trace, msg, args...) }
func (l *quietLogger) Debug(msg string, args ...interface{}) { l.Log(hclog.Debug, msg, args...) }
func (l *quietLogger) Info(msg string, args ...interface{})  { l.Log(hclog.Info, msg, args...) }
func (l *quietLogger) Warn(msg string, args ...interface{})  { l.Log(hclog.Warn, msg, args...) }
func (l *quietLogger) Error(msg string, args ...interface{}) { l.Log(hclog.Error, msg, args...) }

func (l *quietLogger) With(args ...interface{}) hclog.Logger {
	return &quietLogger{Logger: l.Logger.With(args...), q: l.q}
}

func (l *quietLogger) Named(name string) hclog.Logger {
	return &quietLogger{Logger: l.Logger.Named(name), q: l.q}
}

func (l *quietLogger) ResetNamed(name string) hclog.Logger {
	return &quietLogger{Logger: l.Logger.ResetNamed(name), q: l.q}
}
