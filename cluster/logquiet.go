package cluster

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// quietWindow is how long a repeated warning or error stays collapsed: its
// first occurrence is written at once, the next ones are counted and written
// as one line with repeated=N at most once per window.
const quietWindow = 30 * time.Second

// quieter keeps the logs of raft and of the transport readable while a member
// is down. raft writes ~3 errors a second for every member it cannot reach
// (heartbeats, appendEntries, votes) and the transport one warning per refused
// connection; an operator learns to ignore logs like that. The quieter
// collapses repeated identical warnings and errors (same logger, level,
// message and peer; the error text and durations may differ) into one line per
// window that counts them, and adjusts a few raft lines:
//
//   - "failed to decode incoming command" with a closed connection is what
//     every stop of a node writes (raft reads from connections the node is
//     closing): debug, not error;
//   - "heartbeat timeout reached, starting election" is how every new cluster
//     and every leader change begins, and "failed to get previous log" (on
//     the follower) and "appendEntries rejected, sending older logs" (on the
//     leader) how a new or restarted member catches up, and a vote refused
//     "since we have a leader" how a member that lost the leader a moment
//     before the others starts an election: info, not warnings;
//   - the lines of an unreachable member say what to do about it (what_to_do=…).
//
// One quieter serves every logger derived from it (With, Named). It is safe
// for concurrent use. close writes the counts still pending and stops its
// timers; afterwards lines pass through uncounted.
type quieter struct {
	window time.Duration
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

func newQuieter(window time.Duration) *quieter {
	return &quieter{
		window:    window,
		afterFunc: func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) },
		bursts:    map[string]*burst{},
	}
}

// wrap returns log with repeated warnings and errors collapsed by q.
func (q *quieter) wrap(log hclog.Logger) hclog.Logger {
	return &quietLogger{Logger: log, q: q}
}

// close writes the counts of the lines still collapsed and stops collapsing.
func (q *quieter) close() {
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
func (q *quieter) log(l hclog.Logger, level hclog.Level, msg string, args []interface{}) {
	level, args = adjustRaftLine(level, msg, args)
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
func (q *quieter) endWindow(key string, b *burst) {
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
// arguments (the logger's own included) that name whom it is about. A remote address counts by host only,
// since each connection comes from another port.
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

// Hints added to raft's lines about a member it cannot reach.
const (
	hintPeerDown = "that member is down or unreachable: start it again, or check the network to it"
	hintNoQuorum = "no majority of the voters answers: start the members that are down, or check the network to them"
)

// adjustRaftLine sets the level of raft's lines that are normal events, and
// adds what to do to those that report an unreachable member.
func adjustRaftLine(level hclog.Level, msg string, args []interface{}) (hclog.Level, []interface{}) {
	switch msg {
	case "failed to decode incoming command":
		if closedConnError(args) {
			return hclog.Debug, args
		}
	case "heartbeat timeout reached, starting election", "appendEntries rejected, sending older logs",
		"failed to get previous log", "rejecting pre-vote request since we have a leader",
		"rejecting vote request since we have a leader":
		if level == hclog.Warn {
			return hclog.Info, args
		}
	case "failed to heartbeat to", "failed to appendEntries to", "failed to contact",
		"failed to pipeline appendEntries", "failed to start pipeline replication to":
		return level, withHint(args, hintPeerDown)
	case "failed to make requestVote RPC", "failed to make requestPreVote RPC",
		"Election timeout reached, restarting election", "failed to contact quorum of nodes, stepping down":
		return level, withHint(args, hintNoQuorum)
	}
	return level, args
}

func withHint(args []interface{}, hint string) []interface{} {
	return append(append(make([]interface{}, 0, len(args)+2), args...), "what_to_do", hint)
}

// closedConnError reports whether the line's error is a read from a
// connection this node closed.
func closedConnError(args []interface{}) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k != "error" {
			continue
		}
		switch e := args[i+1].(type) {
		case error:
			return errors.Is(e, net.ErrClosed) || strings.Contains(e.Error(), "use of closed network connection")
		case string:
			return strings.Contains(e, "use of closed network connection")
		}
	}
	return false
}

// quietLogger is an hclog.Logger whose lines go through a quieter.
type quietLogger struct {
	hclog.Logger
	q *quieter
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
