package apiserver

import (
	"bytes"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// Debugging routes: net/http/pprof under /debug/pprof/ (Config.EnablePprof),
// the agent's effective configuration (GET /v1/agent/config,
// Config.AgentConfig) and its recent log lines (GET /v1/agent/logs,
// Config.RecentLogs). All of them need a token with the admin right on every
// key (the prefix ""), as leaving does: they show the program's insides.

const pprofPrefix = "/debug/pprof/"

// isPprofPath reports whether path is served by net/http/pprof.
func isPprofPath(path string) bool {
	return path == "/debug/pprof" || strings.HasPrefix(path, pprofPrefix)
}

// servePprof serves net/http/pprof when Config.EnablePprof is set, and the
// API's 404 otherwise (the route does not exist then).
func (h *Handler) servePprof(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.EnablePprof {
		writeError(w, newAPIError(http.StatusNotFound, api.CodeNotFound,
			"api: no route %s: profiling is off (raftlock agent -enable-pprof, or Config.EnablePprof)", r.URL.Path))
		return
	}
	if e := permitPrefix(r, rightAdmin, "", "read profiles"); e != nil {
		writeError(w, e)
		return
	}
	// pprof's symbol lookup reads a POST body: bounded as every route's is.
	r.Body = http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
	// Profiles may take their "seconds" parameter to answer: no fixed write deadline.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	switch strings.TrimPrefix(r.URL.Path, pprofPrefix) {
	case "cmdline":
		pprof.Cmdline(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		if r.URL.Path == "/debug/pprof" {
			redirectBelow(w, "pprof/")
			return
		}
		pprof.Index(w, r) // the index and the named profiles (goroutine, heap, ...)
	}
}

// adminCall admits a request to an agent-wide admin route: no query, the
// admin right on every key (the prefix ""), and the server able to serve it
// (available; otherwise 501 with unavailable as the reason). It answers the
// refusal itself and reports whether to go on.
func adminCall(w http.ResponseWriter, r *http.Request, what string, available bool, unavailable string) bool {
	e := noQuery(r)
	if e == nil {
		e = permitPrefix(r, rightAdmin, "", what)
	}
	if e == nil && !available {
		e = newAPIError(http.StatusNotImplemented, api.CodeNotImplemented, "api: %s", unavailable)
	}
	if e != nil {
		writeError(w, e)
		return false
	}
	return true
}

// agentConfig serves GET /v1/agent/config: Config.AgentConfig's answer.
func (h *Handler) agentConfig(w http.ResponseWriter, r *http.Request) {
	if !adminCall(w, r, "read the agent's configuration", h.cfg.AgentConfig != nil,
		"this server does not show its configuration (Config.AgentConfig is not set)") {
		return
	}
	writeJSON(w, http.StatusOK, h.cfg.AgentConfig())
}

// agentLogs serves GET /v1/agent/logs: Config.RecentLogs's lines.
func (h *Handler) agentLogs(w http.ResponseWriter, r *http.Request) {
	if !adminCall(w, r, "read the agent's log", h.cfg.RecentLogs != nil,
		"this server keeps no recent log lines (Config.RecentLogs is not set)") {
		return
	}
	lines, dropped := h.cfg.RecentLogs.Lines()
	writeJSON(w, http.StatusOK, api.AgentLogsResponse{Lines: lines, Dropped: dropped})
}

// LogRing keeps the last lines written to it, for GET /v1/agent/logs: give
// it to a logger as (part of) its output. Safe for concurrent use. A line
// longer than MaxLogLineBytes is cut there.
type LogRing struct {
	mu      sync.Mutex
	lines   []string
	next    int
	size    int
	partial []byte // a line not yet ended by '\n'
	dropped uint64
}

// MaxLogLineBytes bounds one line a LogRing keeps.
const MaxLogLineBytes = 8 << 10

// NewLogRing keeps the last n lines (at least 1).
func NewLogRing(n int) *LogRing { return &LogRing{size: max(n, 1)} }

// Write takes whole lines; a line without its '\n' waits for the rest.
func (l *LogRing) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.partial = appendCapped(l.partial, p)
			break
		}
		line := appendCapped(l.partial, p[:i])
		l.partial = l.partial[:0]
		l.add(string(line))
		p = p[i+1:]
	}
	return n, nil
}

func appendCapped(dst, p []byte) []byte {
	if room := MaxLogLineBytes - len(dst); len(p) > room {
		p = p[:max(room, 0)]
	}
	return append(dst, p...)
}

func (l *LogRing) add(line string) {
	if len(l.lines) < l.size {
		l.lines = append(l.lines, line)
		return
	}
	l.lines[l.next] = line
	l.next = (l.next + 1) % l.size
	l.dropped++
}

// Lines returns the kept lines, oldest first, and how many older ones were dropped.
func (l *LogRing) Lines() (lines []string, dropped uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.lines))
	out = append(out, l.lines[l.next:]...)
	return append(out, l.lines[:l.next]...), l.dropped
}
