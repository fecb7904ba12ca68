package apiserver

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// The web console: a page at /ui/ that every Handler serves, showing the
// cluster, the held locks and the last minutes of activity, kept up to date
// by the event stream GET /v1/events. Its files are embedded (no build step,
// nothing fetched from elsewhere), so it works offline.
//
// The files at /ui/ are served without a token: they hold no data. Every
// figure the page shows comes from the API, with the token the user types
// into the page (kept in the tab's sessionStorage and sent as
// api.TokenHeader), so the console can do exactly what the token may.

//go:embed ui
var consoleFiles embed.FS

// Console timing.
const (
	// consoleTick is how often the event stream sends and the history samples.
	consoleTick = time.Second
	// consoleHistory is how many samples (seconds) the history keeps.
	consoleHistory = 300
	// consoleIdle stops the sampling once no console has asked for this long.
	consoleIdle = 10 * time.Minute
	// consoleLocks is the most locks one event carries.
	consoleLocks = 500
	// eventStreamMax ends a stream after this long; the page reconnects,
	// which bounds what one connection holds (and its write deadline).
	eventStreamMax = 5 * time.Minute
)

// console is a Handler's console state: the history of activity, sampled
// once a second while consoles look (it starts with the first request of
// one and stops consoleIdle after the last, so that a node nobody watches
// does no work for it).
type console struct {
	fsys    fs.FS // the page's files
	files   http.Handler
	cluster Cluster
	ops     func() uint64 // lock operations answered so far

	mu       sync.Mutex
	samples  []api.ConsoleSample // ring, oldest first once full
	next     int                 // where the next sample goes once full
	last     prev                // the counters at the previous sample
	lastAt   time.Time           // when it was taken
	timer    *time.Timer         // nil while not sampling
	lastSeen time.Time           // the last console request
	stopped  bool                // the server is shutting down: streams end

	done chan struct{} // closed by shutdown
}

// prev is the cumulative counters at one sample.
type prev struct {
	valid                 bool
	commits, applied, ops uint64
	commitTotal           time.Duration
}

func newConsole(cluster Cluster, ops func() uint64) *console {
	sub, err := fs.Sub(consoleFiles, "ui")
	if err != nil {
		panic(err) // the embedded directory is part of the build
	}
	return &console{
		fsys:    sub,
		files:   http.StripPrefix("/ui/", http.FileServer(http.FS(sub))),
		cluster: cluster,
		ops:     ops,
		done:    make(chan struct{}),
	}
}

// serveFiles serves the page's files under /ui/ (/ui redirects there).
// The page asks for the API relative to itself (../v1/...), so the
// Handler works under a prefix too (http.StripPrefix("/raftlock", h):
// the console at /raftlock/ui/ talks to /raftlock/v1/).
func (c *console) serveFiles(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, newAPIError(http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "api: %s wants GET, not %s", r.URL.Path, r.Method))
		return
	}
	if r.URL.Path == "/ui" {
		redirectBelow(w, "ui/")
		return
	}
	if name := strings.TrimPrefix(r.URL.Path, "/ui/"); name != "" {
		if st, err := fs.Stat(c.fsys, name); err != nil || st.IsDir() {
			writeError(w, newAPIError(http.StatusNotFound, api.CodeNotFound, "api: the console has no file %s (it is at /ui/)", r.URL.Path))
			return
		}
	}
	c.touch()
	h := w.Header()
	// The page runs only its own script and talks only to this node.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	c.files.ServeHTTP(w, r)
}

// touch notes a console request and starts sampling if it is not running.
func (c *console) touch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastSeen = time.Now()
	if c.timer == nil && !c.stopped {
		c.sampleLocked(time.Now())
		c.timer = time.AfterFunc(consoleTick, c.tick)
	}
}

// tick takes a sample and schedules the next, unless consoles have gone.
// It runs on a timer, not a goroutine of its own: between ticks nothing runs.
func (c *console) tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer == nil {
		return
	}
	now := time.Now()
	c.sampleLocked(now)
	if c.stopped || now.Sub(c.lastSeen) > consoleIdle {
		c.timer = nil
		return
	}
	c.timer.Reset(consoleTick)
}

// sampleLocked records the activity since the previous sample. Called with mu held.
func (c *console) sampleLocked(now time.Time) {
	cur := prev{valid: true, ops: c.ops()}
	if c.cluster != nil {
		st := c.cluster.Status()
		cur.commits, cur.commitTotal, cur.applied = st.Commit.Count, st.Commit.Total, st.Apply.Count
	}
	last, lastAt := c.last, c.lastAt
	c.last, c.lastAt = cur, now
	if !last.valid || now.Sub(lastAt) > 3*consoleTick {
		// A first sample, or the first after a pause: no second to report.
		return
	}
	s := api.ConsoleSample{TimeMS: now.UnixMilli()}
	if cur.commits >= last.commits {
		s.Commits = cur.commits - last.commits
		if s.Commits > 0 && cur.commitTotal >= last.commitTotal {
			s.CommitMeanUS = ((cur.commitTotal - last.commitTotal) / time.Duration(s.Commits)).Microseconds()
		}
	}
	if cur.applied >= last.applied {
		s.Applied = cur.applied - last.applied
	}
	if cur.ops >= last.ops {
		s.Ops = cur.ops - last.ops
	}
	if len(c.samples) < consoleHistory {
		c.samples = append(c.samples, s)
		return
	}
	c.samples[c.next] = s
	c.next = (c.next + 1) % consoleHistory
}

// history is a copy of the samples, oldest first.
func (c *console) history() []api.ConsoleSample {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]api.ConsoleSample, 0, len(c.samples))
	out = append(out, c.samples[c.next:]...)
	return append(out, c.samples[:c.next]...)
}

// shutdown ends every event stream and the sampling; NewServer registers it
// with the server's Shutdown, which would otherwise wait for the streams.
func (c *console) shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.stopped = true
	close(c.done)
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// events serves GET /v1/events: a text/event-stream with one api.ConsoleEvent
// a second (the first at once), until the client goes, the server shuts down
// or eventStreamMax passes. ?prefix= limits the locks to keys with that prefix.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	q, e := query(r.URL.RawQuery, "prefix")
	if e != nil {
		writeError(w, e)
		return
	}
	prefix := q.Get("prefix")
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // a proxy must not hold the stream back
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	end := time.NewTimer(eventStreamMax)
	defer end.Stop()
	tick := time.NewTicker(consoleTick)
	defer tick.Stop()
	for {
		h.console.touch()
		ev := h.consoleEvent(r, prefix)
		b, err := json.Marshal(ev)
		if err != nil {
			h.log.Error("api: encoding a console event", "error", err)
			return
		}
		_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.OpTimeout + writeSlack))
		if _, err := w.Write(append(append([]byte("data: "), b...), '\n', '\n')); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-h.console.done:
			return
		case <-end.C:
			return
		case <-tick.C:
		}
	}
}

// consoleEvent is what the console shows now to r's caller: the locks it
// may read, as GET /v1/locks would list them.
func (h *Handler) consoleEvent(r *http.Request, prefix string) (ev api.ConsoleEvent) {
	ctx := r.Context()
	ev = api.ConsoleEvent{TimeMS: time.Now().UnixMilli(), Locks: api.ListResponse{Locks: []api.KeyInfo{}}, History: h.console.history()}
	if h.cluster != nil {
		st := h.cluster.Status()
		if st.Members == nil {
			st.Members = []api.Member{}
		}
		ev.Cluster = &st
	}
	ev.Watches = int(h.watching.Load())
	if nc, ok := h.cluster.(nodeCounts); ok {
		watchers, sessions := nc.Watchers(), nc.Sessions()
		ev.StoreWatchers, ev.Sessions = &watchers, &sessions
	}
	who := callerOf(r)
	all, none := who.readsUnder(prefix)
	if none {
		e := denied(who, rightRead, "list the locks under "+strconv.Quote(prefix), prefix)
		ev.LocksError = &e.detail
		return ev
	}
	if !all {
		// Some keys under prefix are not the caller's to read: it sees the
		// rest (the page may then hold fewer than it could). The deferred
		// filter sees ev as returned.
		defer func() {
			kept := ev.Locks.Locks[:0]
			for _, l := range ev.Locks.Locks {
				if key, err := l.DecodeKey(); err == nil && who.rightOn(key) >= rightRead {
					kept = append(kept, l)
				}
			}
			ev.Locks.Locks = kept
		}()
	}
	limit := min(consoleLocks, h.cfg.ListPageSize)
	if stale, ok := h.store.(staleLister); ok {
		// A status page's read: no round trip to the leader every second
		// per open console, and it still answers while there is no leader,
		// which is when an operator looks.
		locks, err := stale.ListStale(lock.ListRequest{Prefix: prefix, Limit: limit + 1})
		ev.LocksStale = true
		h.fillConsoleLocks(&ev, locks, err, limit)
		return ev
	}
	if h.lister == nil {
		ev.LocksError = &api.ErrorDetail{Code: api.CodeNotImplemented, Message: "api: this node's store cannot list locks"}
		return ev
	}
	ctx, cancel := context.WithTimeout(ctx, min(h.cfg.OpTimeout, 5*time.Second))
	defer cancel()
	locks, err := h.lister.List(ctx, lock.ListRequest{Prefix: prefix, Limit: limit + 1})
	h.fillConsoleLocks(&ev, locks, err, limit)
	return ev
}

// staleLister is a store that lists from its own state without asking a
// leader (*cluster.Node does), which the console prefers.
type staleLister interface {
	ListStale(req lock.ListRequest) ([]lock.LockInfo, error)
}

// fillConsoleLocks puts up to limit of locks (or err) into ev.
func (h *Handler) fillConsoleLocks(ev *api.ConsoleEvent, locks []lock.LockInfo, err error, limit int) {
	if err != nil {
		e := storeError(err, false)
		ev.LocksError = &e.detail
		return
	}
	for i, l := range locks {
		if i == limit {
			ev.Locks.More = true
			break
		}
		ev.Locks.Locks = append(ev.Locks.Locks, api.MakeKeyInfo(l.Key, l.KeyInfo))
	}
}

// isConsolePath reports whether path is one of the console's files.
func isConsolePath(path string) bool { return path == "/ui" || strings.HasPrefix(path, "/ui/") }

// redirectBelow redirects a request for a directory's name without its
// slash (/ui) to the directory (rel: "ui/"), with a Location relative to
// the request's own URL, as the browser sees it: under a prefix that
// http.StripPrefix took off (which net/http's Redirect would make
// absolute from the path it sees, without the prefix), it stays below it.
func redirectBelow(w http.ResponseWriter, rel string) {
	w.Header().Set("Location", rel)
	w.WriteHeader(http.StatusMovedPermanently)
}
