package apiserver

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// Blocking queries (watches), as Consul's: GET /v1/inspect and GET /v1/locks
// given ?index=N (and optionally wait= and consistent) answer once a change
// in scope is applied after index N, or when the wait ends, with the index
// of the answer in the X-Raftlock-Index header (lock.Watcher). index=0
// answers at once, with the index to start from. The wait is a Go duration
// (30s, 5m): default lock.DefaultWatchWait, at most lock.MaxWatchWait (a
// longer one is refused: wait.go), plus up to a sixteenth of it of jitter. The node answers from its own state
// (a follower's may be behind the leader; the index says how far it got);
// consistent reads the state through the leader once woken.
//
// Each blocked query holds its HTTP/1.1 connection (one per watcher; a
// kept-alive connection is reused for the next query) and a goroutine
// until it answers: the agent's -max-http-conns bounds the connections, and
// the store's maximum of watchers (cluster.Config.MaxWatchers, default
// lock.DefaultMaxWatchers) and the handler's (Config.MaxWatchers, default
// half of DefaultMaxConns, so that watches cannot take every connection
// from lock traffic) the queries; past either a query fails with 429
// too_many_watchers. The server's write deadline for the answer is moved to
// the wait plus Config.OpTimeout, as for a waiting acquire.

// DefaultMaxWatchers is Config.MaxWatchers' default: half of
// DefaultMaxConns, so that watches leave half the connections to lock
// traffic.
const DefaultMaxWatchers = DefaultMaxConns / 2

// IndexHeader carries a blocking query's index in its answer.
const IndexHeader = api.IndexHeader

// opWatch and opWatchList label blocking queries in the metrics: their
// latency is mostly the wait.
const (
	opWatch     = "watch"
	opWatchList = "watch_list"
)

// watchQuery reads index, wait and consistent. blocking says index was given.
func watchQuery(q url.Values) (wq lock.WatchQuery, blocking bool, e *apiError) {
	if !q.Has("index") {
		for _, name := range []string{"wait", "consistent"} {
			if q.Has(name) {
				return wq, false, badRequest("api: %s is only for a blocking query: give index too (0 to start)", name)
			}
		}
		return wq, false, nil
	}
	index, err := strconv.ParseUint(q.Get("index"), 10, 64)
	if err != nil {
		return wq, false, badRequest("api: index %q is not an index (a whole number from the %s header of an earlier answer, or 0)", q.Get("index"), IndexHeader)
	}
	wq.Index = index
	if q.Has("wait") {
		if wq.Wait, e = queryWait(q.Get("wait"), maxWatchWait); e != nil {
			return wq, false, e
		}
	}
	if q.Has("consistent") {
		switch q.Get("consistent") {
		case "", "true", "1":
			wq.Consistent = true
		case "false", "0":
		default:
			return wq, false, badRequest("api: consistent %q: give consistent, consistent=true or consistent=false", q.Get("consistent"))
		}
	}
	return wq, true, nil
}

// watchContext bounds a blocking query: its wait with the most jitter, and
// OpTimeout for the read after it; the answer's write deadline follows.
func (h *Handler) watchContext(ctx context.Context, c *opCall, wq lock.WatchQuery) (context.Context, context.CancelFunc) {
	wait := wq.Wait
	if wait <= 0 {
		wait = lock.DefaultWatchWait
	}
	limit := wait + wait/16 + h.cfg.OpTimeout
	c.mayTake(limit + writeSlack)
	return context.WithTimeout(ctx, limit)
}

// watcher is the store's watch ability, with a place among the handler's
// blocking queries, which done gives back.
func (h *Handler) watcher() (w lock.Watcher, done func(), e *apiError) {
	w, ok := h.store.(lock.Watcher)
	if !ok {
		return nil, nil, newAPIError(http.StatusNotImplemented, api.CodeNotImplemented, "api: this node's store cannot watch (no blocking queries): drop index")
	}
	done = func() {
		h.watching.Add(-1)
		h.metrics.watches.Dec()
	}
	h.metrics.watches.Inc()
	if n := h.watching.Add(1); h.cfg.MaxWatchers > 0 && n > int64(h.cfg.MaxWatchers) {
		done()
		return nil, nil, newAPIError(http.StatusTooManyRequests, api.CodeTooManyWatchers,
			"api: this node serves its maximum of blocking queries (%d, apiserver.Config.MaxWatchers: half the agent's -max-http-conns); try again later, or watch a prefix rather than many keys", h.cfg.MaxWatchers)
	}
	return w, done, nil
}

// watchKey is GET /v1/inspect?key=K&index=N.
func (h *Handler) watchKey(ctx context.Context, c *opCall, key string, wq lock.WatchQuery) (api.KeyInfo, *apiError) {
	c.op = opWatch
	w, done, e := h.watcher()
	if e != nil {
		return api.KeyInfo{}, e
	}
	defer done()
	ctx, cancel := h.watchContext(ctx, c, wq)
	defer cancel()
	info, index, err := w.WatchKey(ctx, key, wq)
	if err != nil {
		return api.KeyInfo{}, watchError(err)
	}
	c.index, c.hasIndex = index, true
	return api.MakeKeyInfo(key, info), nil
}

// watchList is GET /v1/locks?index=N: it needs read on every key under the
// prefix (a watcher must be told of any change under it).
func (h *Handler) watchList(ctx context.Context, who *caller, c *opCall, req lock.ListRequest, limit int, wq lock.WatchQuery) (api.ListResponse, *apiError) {
	c.op = opWatchList
	w, done, e := h.watcher()
	if e != nil {
		return api.ListResponse{}, e
	}
	defer done()
	if all, _ := who.readsUnder(req.Prefix); !all {
		return api.ListResponse{}, denied(who, c.need, "watch the locks under "+strconv.Quote(req.Prefix)+" (a blocking list needs read on every key under its prefix)", req.Prefix)
	}
	ctx, cancel := h.watchContext(ctx, c, wq)
	defer cancel()
	req.Limit = limit + 1 // one more than the page, to learn whether there is a next page
	locks, index, err := w.WatchList(ctx, req, wq)
	if err != nil {
		return api.ListResponse{}, watchError(err)
	}
	c.index, c.hasIndex = index, true
	return listPage(locks, limit), nil
}

// listPage is the answer to a list of at most limit locks, given the store's
// answer to limit+1: the first limit locks, and More when there was one more.
func listPage(locks []lock.LockInfo, limit int) api.ListResponse {
	resp := api.ListResponse{Locks: make([]api.KeyInfo, 0, min(len(locks), limit))}
	for i, l := range locks {
		if i == limit {
			resp.More = true
			break
		}
		resp.Locks = append(resp.Locks, api.MakeKeyInfo(l.Key, l.KeyInfo))
	}
	return resp
}

// watchError maps a blocking query's failure (a wait that ran out with
// OpTimeout is unavailable, as any read's).
func watchError(err error) *apiError { return storeError(err, false) }
