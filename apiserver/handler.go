package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/internal/quietlog"
	"github.com/raftlock/raftlock/lock"
)

// Defaults for the zero Config.
const (
	DefaultMaxBodyBytes = 64 << 10
	DefaultOpTimeout    = 30 * time.Second
	DefaultListPageSize = 1000
)

// writeSlack is added to a request's write deadline beyond its store call's
// own time limit, for the answer itself to go out.
const writeSlack = 10 * time.Second

// Config tunes a Handler. The zero value is usable.
type Config struct {
	// Cluster supplies /v1/cluster, /healthz and the raft metrics. Nil: the
	// store itself when it implements Cluster, NodeStatus(store) when it is a
	// *cluster.Node; otherwise the node is not a cluster, /v1/cluster answers
	// 404 not_a_cluster and /healthz is always 200.
	Cluster Cluster
	// MaxBodyBytes bounds a request body; a larger one gets 413. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// OpTimeout bounds one store call, beyond an acquire's own wait. A write
	// that runs out answers 503 unknown_outcome, a read 503 unavailable.
	// Default DefaultOpTimeout.
	OpTimeout time.Duration
	// ListPageSize is the most locks one GET /v1/locks returns, whatever
	// limit the caller asks. Default DefaultListPageSize.
	ListPageSize int
	// MaxWatchers bounds the blocking queries (GET /v1/inspect or
	// /v1/locks with ?index=) this handler serves at once; past it a query
	// answers 429 too_many_watchers. Each holds its connection while it
	// waits: keep it under the listener's connection limit (LimitListener,
	// the agent's -max-http-conns) so that watches never take every
	// connection from lock traffic. Default DefaultMaxWatchers (half of
	// DefaultMaxConns); negative: no bound here (the store's still applies).
	MaxWatchers int
	// Logger receives what a client cannot be told (internal errors, failed
	// clean-ups). Default: discard.
	Logger hclog.Logger
	// Token, when not empty, is required of every request but /healthz,
	// /readyz and the console's files under /ui/ (openPaths), as
	// "Authorization: Bearer <token>" or "X-Raftlock-Token: <token>";
	// without it, or with another one, the answer is 401 unauthorized and
	// nothing is done. It should pass ValidateSecret (MinSecretLen bytes
	// of visible ASCII, no spaces), as every named token's secret must:
	// NewHandler logs a token no client can send (it locks everyone out)
	// and one shorter than that. Send it over TLS only, or on a network you trust: it travels as
	// it is. It is the token named "shared", with every right on every key
	// (admin on ""); Tokens adds tokens with narrower rights.
	Token string
	// Tokens, when not nil, are named tokens with rights per key prefix
	// (docs/http.md, "Security: rights per key prefix", says which
	// route needs which right); Handler.SetTokens replaces them while the
	// handler runs. With Token or Tokens set (even an empty Tokens), every
	// request but /healthz, /readyz and /ui/ needs one of their secrets. Tokens in which a
	// token has Token's secret are refused (CheckTokens says so first):
	// NewHandler then puts Token alone in force and logs why.
	Tokens *Tokens
	// Leave, when set, serves POST /v1/leave: it must take the node out of
	// its cluster for good and make the program stop (the agent passes
	// cluster.Node.Leave and then exits). The request waits for it, bounded
	// by OpTimeout; its error is answered as a store error is (503
	// unavailable when no leader could remove the node). Nil: 501
	// not_implemented. It needs the admin right on every key (the Token
	// has it), takes no fields, and is logged with the caller's name.
	Leave func(ctx context.Context) error
	// AllowedOrigins lists the web origins ("https://ops.example.com") whose
	// pages may call the API from a browser; the node answers their CORS
	// preflights. A request that carries any other Origin header (only
	// browsers send one) is refused with 403 origin_not_allowed, and so is
	// a cross-site request of a page without one. Empty (the default): no
	// web page may. Entries must pass ValidateAllowedOrigin; NewHandler logs
	// those that do not. Programs (curl, api.Client, probes) are not affected.
	AllowedOrigins []string
	// AllowedHosts lists the host names a request's Host header may carry
	// (HOST, HOST:PORT or a URL; the port is ignored), beyond IP addresses
	// and localhost, which are always allowed: a Host naming anything else
	// is refused with 403 host_not_allowed, which closes DNS rebinding (a
	// web page's own name pointed at this node). List every name clients
	// and load balancers use to reach the node; "*" allows every name (for
	// a node behind a proxy that checks Host itself). Entries must pass
	// ValidateAllowedHost; NewHandler logs those that do not.
	AllowedHosts []string
	// EnablePprof serves net/http/pprof under /debug/pprof/ to callers with
	// the admin right on every key (the prefix ""). Off by default: profiles
	// show the program's internals and cost CPU while they run.
	EnablePprof bool
	// AgentConfig, when set, serves GET /v1/agent/config: the program's
	// effective configuration, which it must return with every secret
	// (token, key) already redacted. Nil: 501 not_implemented.
	AgentConfig func() any
	// RecentLogs, when set, serves GET /v1/agent/logs: the last lines of the
	// program's log (give the same LogRing to its logger). Nil: 501
	// not_implemented.
	RecentLogs *LogRing
}

// Handler serves the HTTP/JSON API of one node over a lock.Store (doc.go lists
// the routes). It is safe for concurrent use. Each Handler has its own
// Prometheus registry, so several nodes may live in one process.
type Handler struct {
	store    lock.Store
	lister   lock.Lister // nil when the store cannot list
	cluster  Cluster     // nil when the store is not a cluster
	cfg      Config
	log      hclog.Logger
	metrics  *metrics
	scrape   http.Handler
	acquires acquires // in progress, for releases to give up
	routes   map[string]route
	auth     atomic.Pointer[authenticator]
	guard    guard
	console  *console
	// batchWorkers run the operations of POST /v1/batch (batch.go).
	batchWorkers workerPool
	// streams are the Go clients' binary streams (stream.go).
	streams  streams
	watching atomic.Int64 // blocking queries in progress (watch.go)
	// connLimits count how often the listeners of LimitListener reached their limit (limit.go).
	connLimits connLimits
	// refusedTokens bounds the warnings about refused tokens: one line a
	// minute at most, however many requests guess.
	refusedTokens *quietlog.Every
}

type route struct {
	method string
	serve  http.HandlerFunc
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns the API over store.
func NewHandler(store lock.Store, cfg Config) *Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	if cfg.ListPageSize <= 0 {
		cfg.ListPageSize = DefaultListPageSize
	}
	if cfg.MaxWatchers == 0 {
		cfg.MaxWatchers = DefaultMaxWatchers
	}
	h := &Handler{store: store, cfg: cfg, log: cfg.Logger, batchWorkers: workerPool{work: make(chan func())}}
	if h.log == nil {
		h.log = hclog.NewNullLogger()
	}
	if err := h.SetTokens(cfg.Tokens); err != nil {
		h.log.Error("api: Config.Tokens conflict with Config.Token; only the shared token is in force", "error", err)
		auth, _ := newAuthenticator(cfg.Token, nil)
		h.auth.Store(auth)
	}
	if err := api.ValidateToken(cfg.Token); err != nil {
		h.log.Error("api: Config.Token cannot be sent by any client: every request but /healthz, /readyz and /ui/ will be refused", "error", err)
	} else if err := ValidateSecret(cfg.Token); cfg.Token != "" && err != nil {
		h.log.Warn("api: Config.Token is weaker than any named token may be", "error", err)
	}
	h.guard = newGuard(cfg)
	for _, p := range h.guard.problems {
		h.log.Error("api: an entry that can never match is ignored", "problem", p)
	}
	h.lister, _ = store.(lock.Lister)
	h.cluster = cfg.Cluster
	if h.cluster == nil {
		switch s := store.(type) {
		case Cluster:
			h.cluster = s
		case *cluster.Node:
			h.cluster = NodeStatus(s)
		}
	}
	h.metrics = newMetrics(h.cluster)
	h.metrics.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "raftlock_api_conn_limit_reached_total",
		Help: "Times the HTTP listener had its limit of open connections (-max-http-conns) reached and stopped accepting until one closed.",
	}, h.connLimits.waits))
	h.refusedTokens = quietlog.NewEvery(refusedTokenLogEvery)
	h.console = newConsole(h.cluster, h.metrics.answered.Load)
	h.scrape = promhttp.HandlerFor(h.metrics.registry, promhttp.HandlerOpts{Registry: h.metrics.registry})
	h.routes = map[string]route{
		"/v1/cluster": {http.MethodGet, h.clusterView},
		"/v1/leave":   {http.MethodPost, h.leave},
		"/healthz":    {http.MethodGet, h.healthz},
		"/readyz":     {http.MethodGet, h.readyz},
		"/metrics":    {http.MethodGet, h.scrape.ServeHTTP},
		// The console's and debugging routes (console.go, debug.go, openapi.go).
		"/v1/events":       {http.MethodGet, h.events},
		"/v1/agent/config": {http.MethodGet, h.agentConfig},
		"/v1/agent/logs":   {http.MethodGet, h.agentLogs},
		"/v1/openapi.json": {http.MethodGet, h.openAPI},
	}
	h.routes["/v1/whoami"] = route{http.MethodGet, h.whoami}
	for _, op := range ops { // the lock operations (ops.go)
		h.routes[op.path] = route{op.method, h.serveOp(op)}
	}
	h.routes["/v1/batch"] = route{http.MethodPost, h.batch}  // batch.go
	h.routes["/v1/stream"] = route{http.MethodGet, h.stream} // stream.go
	return h
}

// Registry is the handler's own Prometheus registry, served at /metrics; the
// binary may register more collectors in it.
func (h *Handler) Registry() *prometheus.Registry { return h.metrics.registry }

// ServeHTTP first keeps web pages out (Host, Origin and, for POSTs,
// Content-Type: see Config.AllowedHosts and Config.AllowedOrigins), then
// checks the token (Config.Token), then routes by exact path:
// keys never appear in paths, so there is nothing to clean or unescape, and
// unknown routes and wrong methods get the same JSON errors as everything
// else. The token is checked first, so that without it a caller learns
// nothing, not even which routes exist; only the console's files under
// /ui/ (which hold no data), /healthz and /readyz (which then tell the
// status alone) are served without it. Paths under
// /debug/pprof/ go to net/http/pprof when Config.EnablePprof is set.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.guard.check(w, r) {
		return
	}
	if isConsolePath(r.URL.Path) {
		h.console.serveFiles(w, r) // static files, no data: no token
		return
	}
	c, e := h.auth.Load().authenticate(r)
	switch {
	case openPaths[r.URL.Path]:
		// Served whatever the token; with one the node knows (or on a node
		// that needs none), they tell more: see admitted.
		if e == nil {
			r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
		}
	case e != nil:
		h.refuseToken(r, e)
		// RFC 6750: a 401 names the scheme it wants.
		w.Header().Set("WWW-Authenticate", `Bearer realm="raftlock"`)
		writeError(w, e)
		return
	case c != anonymous:
		r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
	}
	if isPprofPath(r.URL.Path) {
		h.servePprof(w, r)
		return
	}
	rt, ok := h.routes[r.URL.Path]
	if !ok {
		writeError(w, newAPIError(http.StatusNotFound, api.CodeNotFound, "api: no route %s", r.URL.Path))
		return
	}
	// HEAD is a GET without the body (net/http drops it), for probes that use it.
	if r.Method != rt.method && !(r.Method == http.MethodHead && rt.method == http.MethodGet) {
		allow := rt.method
		if rt.method == http.MethodGet {
			allow += ", " + http.MethodHead
		}
		w.Header().Set("Allow", allow)
		writeError(w, newAPIError(http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "api: %s wants %s, not %s", r.URL.Path, rt.method, r.Method))
		return
	}
	if rt.method == http.MethodPost {
		if e := checkContentType(r); e != nil {
			writeError(w, e)
			return
		}
	}
	// The server has no WriteTimeout (it would cut long-polls short), so
	// each answer gets a deadline of its own; an acquire that waits moves it.
	// Recorders in tests do not support deadlines; that is fine.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.cfg.OpTimeout + writeSlack))
	rt.serve(w, r)
}

// refusedTokenLogEvery bounds the warnings about refused tokens.
const refusedTokenLogEvery = time.Minute

// refuseToken counts a request refused by the token check, on whatever
// route, and says so in the log at most once a refusedTokenLogEvery, with
// the remote address of the request that got through and how many were
// refused since: a client left with an old token, or someone guessing. It
// never logs what was presented.
func (h *Handler) refuseToken(r *http.Request, e *apiError) {
	h.metrics.unauthorized.Inc()
	if n, tell := h.refusedTokens.Note(); tell {
		h.log.Warn("api: refused a request for a missing or wrong token", "reason", e.detail.Message,
			"remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "refused", n, "since", h.refusedTokens.Interval())
	}
}

// Operation names, the op label of the metrics.
const (
	opAcquire     = "acquire"
	opAcquireWait = "acquire_wait" // an acquire that may queue: its latency includes the wait
	opRelease     = "release"
	opExtend      = "extend"
	opInspect     = "inspect"
	opList        = "list"

	opSessionCreate  = "session_create"
	opSessionRenew   = "session_renew"
	opSessionDestroy = "session_destroy"
	opSessionInfo    = "session_info"
	opWaiters        = "waiters"

	opForceRelease = "force_release"
)

// acquire serves an acquire: req's fields are checked in acquireRequest,
// then the caller's rights, then the store queues or grants it.
func (h *Handler) acquire(ctx context.Context, who *caller, c *opCall, req *api.AcquireRequest) (api.LeaseResponse, *apiError) {
	areq, e := h.acquireRequest(c, req)
	if e != nil {
		return api.LeaseResponse{}, e
	}
	key, keys := areq.Key, areq.Keys
	if e := permit(who, c.need, key, "acquire"); e != nil {
		return api.LeaseResponse{}, e
	}
	for _, k := range keys {
		if e := permit(who, c.need, k, "acquire"); e != nil {
			return api.LeaseResponse{}, e // every key of a set needs the lock right
		}
	}
	areq.Owner = lock.NewOwner()
	if req.Owner != nil {
		var err error
		if areq.Owner, err = lock.ParseOwner(*req.Owner); err != nil {
			return api.LeaseResponse{}, newAPIError(http.StatusBadRequest, api.CodeInvalidOwner, "%v", err)
		}
	}
	owner := areq.Owner
	if areq.Wait > 0 {
		c.op = opAcquireWait
		h.metrics.waiting.Inc()
		defer h.metrics.waiting.Dec()
	}
	// The store enforces the limits (lock.MaxWait among them); the deadlines
	// here only need to outlast a valid wait.
	limit := clampAdd(areq.Wait, h.cfg.OpTimeout)
	c.mayTake(clampAdd(limit, writeSlack))
	opCtx, cancel := h.opContext(ctx, c, limit)
	defer cancel()
	opCtx, giveUp := context.WithCancelCause(opCtx)
	defer giveUp(nil)
	pending := h.acquires.start(key, owner, giveUp)
	defer h.acquires.finish(key, owner, pending) // after the clean-up below

	var lease lock.Lease
	var err error
	if keys != nil {
		// A release of the set's first key (key) gives the acquire up, as
		// for one key: it is under that key in h.acquires.
		lease, err = h.store.(lock.MultiKeyStore).AcquireAll(opCtx, areq)
	} else {
		lease, err = h.store.Acquire(opCtx, areq)
	}
	givenUp := errors.Is(context.Cause(opCtx), errGivenUp)
	if err == nil && (givenUp || ctx.Err() != nil) {
		// The lock was granted as the client went away or a release gave the
		// acquire up: nobody will be told of the grant, so nobody would
		// release it before its TTL. Release it now, as the Store contract
		// asks of a done context.
		h.releaseAbandoned(key, owner)
		err = context.Cause(opCtx)
	}
	if givenUp {
		return api.LeaseResponse{}, newAPIError(http.StatusConflict, api.CodeCanceled, "%v", errGivenUp)
	}
	resp, e := leaseResponse(key, owner, lease, areq.TTL, err)
	if mismatch := (*lock.KindMismatchError)(nil); e != nil && keys != nil && errors.As(err, &mismatch) {
		e.detail.Key = mismatch.Key // which key of the set
	}
	if held := (*lock.HeldError)(nil); e != nil && keys != nil && errors.As(err, &held) {
		e.detail.Key = held.Key // the set's first key not free
	}
	if e == nil && keys != nil {
		resp.Keys, resp.KeysB64 = api.MakeKeysFields(keys)
	}
	return resp, e
}

// acquireRequest checks an acquire's fields, in the order their errors
// win, and turns them into the store's request (without its owner, which
// comes after the rights).
func (h *Handler) acquireRequest(c *opCall, req *api.AcquireRequest) (lock.AcquireRequest, *apiError) {
	// keys (a multi-key lock) or one key; key is the set's first.
	key, keys, err := req.DecodeKeys()
	if err != nil {
		return lock.AcquireRequest{}, newAPIError(http.StatusBadRequest, api.CodeInvalidKey, "%s", err)
	}
	if keys != nil {
		if req.Session != nil {
			return lock.AcquireRequest{}, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: a multi-key lock (keys) cannot be bound to a session: give it a ttl")
		}
		if _, ok := h.store.(lock.MultiKeyStore); !ok {
			return lock.AcquireRequest{}, newAPIError(http.StatusNotImplemented, api.CodeNotImplemented, "api: this node's store has no multi-key locks")
		}
	}
	ttl, present, err := api.DurationField("ttl", req.TTL, req.TTLMS)
	if err != nil {
		return lock.AcquireRequest{}, newAPIError(http.StatusBadRequest, api.CodeInvalidTTL, "api: %v", err)
	}
	var session lock.SessionID
	if req.Session != nil {
		if session, err = lock.ParseSessionID(*req.Session); err != nil {
			return lock.AcquireRequest{}, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: session: %v", err)
		}
		if present {
			return lock.AcquireRequest{}, newAPIError(http.StatusBadRequest, api.CodeInvalidTTL, "api: give ttl or session, not both: a lock bound to a session has no lease of its own")
		}
		if _, ok := h.store.(lock.SessionStore); !ok {
			return lock.AcquireRequest{}, newAPIError(http.StatusNotImplemented, api.CodeNotImplemented, "api: this node's store has no sessions")
		}
	} else if !present {
		return lock.AcquireRequest{}, newAPIError(http.StatusBadRequest, api.CodeInvalidTTL, "api: ttl is required (ttl as \"30s\" or ttl_ms), or session")
	}
	var metadata string
	if req.Metadata != nil {
		metadata = *req.Metadata
		if len(metadata) > lock.MaxMetadataLen {
			return lock.AcquireRequest{}, newAPIError(http.StatusBadRequest, api.CodeInvalidMetadata, "api: metadata: %v: metadata is longer than %d bytes (got %d)",
				lock.ErrInvalidMetadata, lock.MaxMetadataLen, len(metadata))
		}
	}
	wait, e := bodyWait(req.Wait, req.WaitMS, maxAcquireWait)
	if e != nil {
		return lock.AcquireRequest{}, e
	}
	if wait > 0 && c.noWait != "" {
		return lock.AcquireRequest{}, newAPIError(http.StatusBadRequest, api.CodeInvalidWait, "%s", c.noWait)
	}
	kind, kindLimit, shared, err := req.KindFields()
	if err != nil {
		return lock.AcquireRequest{}, storeError(fmt.Errorf("api: %w", err), true)
	}
	return lock.AcquireRequest{Key: key, TTL: ttl, Wait: wait, Session: session, Metadata: metadata,
		Kind: kind, Limit: kindLimit, Shared: shared, Keys: keys}, nil
}

// leaseResponse answers an acquire or extend that asked for ttl with lease,
// or with the store's err. The term reported is the store's own figure when
// it gives one, since an acquire by the holder returns the lease it has,
// not one of the TTL asked.
func leaseResponse(key string, owner lock.Owner, lease lock.Lease, ttl time.Duration, err error) (api.LeaseResponse, *apiError) {
	if err != nil {
		return api.LeaseResponse{}, storeError(err, true)
	}
	if lease.TTL > 0 {
		ttl = lease.TTL
	}
	return api.LeaseResponse{
		KeyOut:      api.MakeKeyOut(key),
		Owner:       owner.String(),
		Token:       lease.Token,
		TTLMS:       api.Millis(ttl),
		RemainingMS: api.Millis(lease.Remaining),
	}, nil
}

// keyOwner decodes the key and the owner of a request that names both,
// which it must: owner is req's owner field.
func keyOwner(req interface{ DecodeKey() (string, error) }, owner *string) (string, lock.Owner, *apiError) {
	key, err := req.DecodeKey()
	if err != nil {
		return "", lock.Owner{}, newAPIError(http.StatusBadRequest, api.CodeInvalidKey, "%s", err)
	}
	o, e := requiredOwner(owner)
	return key, o, e
}

// requiredTTL reads a request's ttl (or ttl_ms), which it must give.
func requiredTTL(ttl *api.Duration, ms *api.MillisField) (time.Duration, *apiError) {
	d, present, err := api.DurationField("ttl", ttl, ms)
	if err != nil {
		return 0, newAPIError(http.StatusBadRequest, api.CodeInvalidTTL, "api: %v", err)
	}
	if !present {
		return 0, newAPIError(http.StatusBadRequest, api.CodeInvalidTTL, "api: ttl is required (ttl as \"30s\" or ttl_ms)")
	}
	return d, nil
}

func (h *Handler) releaseAbandoned(key string, owner lock.Owner) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.OpTimeout)
	defer cancel()
	if _, err := h.store.Release(ctx, key, owner); err != nil {
		h.log.Warn("api: releasing a lock granted to a client that went away", "key", key, "error", err)
	}
}

func (h *Handler) release(ctx context.Context, who *caller, c *opCall, req *api.ReleaseRequest) (api.ReleaseResponse, *apiError) {
	key, owner, e := keyOwner(req, req.Owner)
	if e != nil {
		return api.ReleaseResponse{}, e
	}
	if e := permit(who, c.need, key, "release"); e != nil {
		return api.ReleaseResponse{}, e
	}
	ctx, cancel := h.opContext(ctx, c, h.cfg.OpTimeout)
	defer cancel()
	// A release also gives up the owner's acquires still in progress here,
	// and answers once they are out of the store: see acquires.
	if err := h.acquires.giveUp(ctx, key, owner); err != nil {
		return api.ReleaseResponse{}, storeError(err, true)
	}
	released, err := h.store.Release(ctx, key, owner)
	if err != nil {
		return api.ReleaseResponse{}, storeError(err, true)
	}
	if !released {
		return api.ReleaseResponse{}, newAPIError(http.StatusConflict, api.CodeNotHeld, "%v: owner does not hold %q", lock.ErrNotHeld, key)
	}
	return api.ReleaseResponse{KeyOut: api.MakeKeyOut(key), Released: true}, nil
}

func (h *Handler) extend(ctx context.Context, who *caller, c *opCall, req *api.ExtendRequest) (api.LeaseResponse, *apiError) {
	key, owner, e := keyOwner(req, req.Owner)
	if e != nil {
		return api.LeaseResponse{}, e
	}
	ttl, e := requiredTTL(req.TTL, req.TTLMS)
	if e != nil {
		return api.LeaseResponse{}, e
	}
	if e := permit(who, c.need, key, "extend"); e != nil {
		return api.LeaseResponse{}, e
	}
	ctx, cancel := h.opContext(ctx, c, h.cfg.OpTimeout)
	defer cancel()
	lease, err := h.store.Extend(ctx, key, owner, ttl)
	return leaseResponse(key, owner, lease, ttl, err)
}

func requiredOwner(s *string) (lock.Owner, *apiError) {
	if s == nil {
		return lock.Owner{}, newAPIError(http.StatusBadRequest, api.CodeInvalidOwner, "api: owner is required (the owner the acquire answered with)")
	}
	owner, err := lock.ParseOwner(*s)
	if err != nil {
		return lock.Owner{}, newAPIError(http.StatusBadRequest, api.CodeInvalidOwner, "%v", err)
	}
	return owner, nil
}

// query parses the query string strictly: a malformed one, an unknown
// parameter or a repeated one is an error rather than silently ignored.
func query(rawQuery string, allowed ...string) (url.Values, *apiError) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, badRequest("api: malformed query string: %v", err)
	}
	for name, values := range q {
		known := false
		for _, a := range allowed {
			known = known || name == a
		}
		if !known {
			for _, a := range allowed {
				if strings.EqualFold(a, name) {
					return nil, badRequest("api: unknown query parameter %q: parameter names are case-sensitive; send %q", name, a)
				}
			}
			return nil, badRequest("api: unknown query parameter %q (this route takes %v)", name, allowed)
		}
		if len(values) > 1 {
			return nil, badRequest("api: query parameter %q given %d times", name, len(values))
		}
	}
	return q, nil
}

// queryKey reads the one query parameter of a keyed read, ?key=.
func queryKey(rawQuery string) (string, *apiError) {
	q, e := query(rawQuery, "key")
	if e != nil {
		return "", e
	}
	if !q.Has("key") {
		return "", newAPIError(http.StatusBadRequest, api.CodeInvalidKey, "api: key is required (?key=, percent-encoded)")
	}
	return q.Get("key"), nil
}

// inspectRequest is GET /v1/inspect's query: ?key=, and for a blocking
// query index, wait and consistent.
type inspectRequest struct {
	key      string
	watch    lock.WatchQuery
	blocking bool // index was given
}

func decodeInspect(rawQuery string) (inspectRequest, *apiError) {
	q, e := query(rawQuery, "key", "index", "wait", "consistent")
	if e != nil {
		return inspectRequest{}, e
	}
	if !q.Has("key") {
		return inspectRequest{}, newAPIError(http.StatusBadRequest, api.CodeInvalidKey, "api: key is required (?key=, percent-encoded)")
	}
	req := inspectRequest{key: q.Get("key")}
	req.watch, req.blocking, e = watchQuery(q) // watch.go
	return req, e
}

func (h *Handler) inspect(ctx context.Context, who *caller, c *opCall, req *inspectRequest) (api.KeyInfo, *apiError) {
	key := req.key
	if err := lock.ValidateKey(key); err != nil {
		return api.KeyInfo{}, storeError(err, false)
	}
	if e := permit(who, c.need, key, "inspect"); e != nil {
		return api.KeyInfo{}, e
	}
	if req.blocking {
		return h.watchKey(ctx, c, key, req.watch)
	}
	ctx, cancel := h.opContext(ctx, c, h.cfg.OpTimeout)
	defer cancel()
	info, err := h.store.Inspect(ctx, key)
	if err != nil {
		return api.KeyInfo{}, storeError(err, false)
	}
	return api.MakeKeyInfo(key, info), nil
}

// listRequest is GET /v1/locks's query: prefix, after and limit, and for a
// blocking query index, wait and consistent. limit is read by the listing
// itself (after its check that the store can list).
type listRequest struct {
	prefix, after string
	limit         *string
	watch         lock.WatchQuery
	blocking      bool // index was given
}

func decodeList(rawQuery string) (listRequest, *apiError) {
	q, e := query(rawQuery, "prefix", "after", "limit", "index", "wait", "consistent")
	if e != nil {
		return listRequest{}, e
	}
	req := listRequest{prefix: q.Get("prefix"), after: q.Get("after")}
	if q.Has("limit") {
		limit := q.Get("limit")
		req.limit = &limit
	}
	req.watch, req.blocking, e = watchQuery(q) // watch.go
	return req, e
}

func (h *Handler) list(ctx context.Context, who *caller, c *opCall, lr *listRequest) (api.ListResponse, *apiError) {
	if h.lister == nil && !lr.blocking {
		return api.ListResponse{}, newAPIError(http.StatusNotImplemented, api.CodeNotImplemented, "api: this node's store cannot list locks")
	}
	limit := h.cfg.ListPageSize
	if lr.limit != nil {
		n, err := parseLimit(*lr.limit)
		if err != nil {
			return api.ListResponse{}, newAPIError(http.StatusBadRequest, api.CodeInvalidList, "api: %v", err)
		}
		limit = min(n, limit)
	}
	req := lock.ListRequest{Prefix: lr.prefix, After: lr.after}
	if err := req.Validate(); err != nil {
		return api.ListResponse{}, storeError(err, false)
	}
	if lr.blocking {
		return h.watchList(ctx, who, c, req, limit, lr.watch)
	}
	all, none := who.readsUnder(req.Prefix)
	if none {
		return api.ListResponse{}, denied(who, c.need, "list the locks under "+strconv.Quote(req.Prefix), req.Prefix)
	}
	ctx, cancel := h.opContext(ctx, c, h.cfg.OpTimeout)
	defer cancel()
	if !all {
		return h.listReadable(ctx, who, req, limit)
	}
	// One more than the page, to learn whether there is a next page.
	req.Limit = limit + 1
	locks, err := h.lister.List(ctx, req)
	if err != nil {
		return api.ListResponse{}, storeError(err, false)
	}
	return listPage(locks, limit), nil
}

// maxListScan bounds the keys one listing reads from the store, in pages,
// to fill a page with keys the caller may read: past it, the answer says
// where to go on (next_after) rather than keep one request busy.
var maxListScan = 16 * DefaultListPageSize // a variable for tests

// listReadable is a listing for a caller that may read some keys under
// the prefix and not others: it reads the store a page (at least
// Config.ListPageSize keys) at a time and keeps the keys the caller may
// read, until it has limit of them (and knows whether there are more) or
// has read maxListScan keys.
func (h *Handler) listReadable(ctx context.Context, c *caller, req lock.ListRequest, limit int) (api.ListResponse, *apiError) {
	resp := api.ListResponse{Locks: []api.KeyInfo{}}
	page := max(limit, h.cfg.ListPageSize)
	scanned := 0
	for {
		// One more than the page, to learn whether the store has more.
		req.Limit = page + 1
		locks, err := h.lister.List(ctx, req)
		if err != nil {
			return api.ListResponse{}, storeError(err, false)
		}
		for _, l := range locks[:min(len(locks), page)] {
			if c.rightOn(l.Key) < rightRead {
				continue
			}
			if len(resp.Locks) == limit {
				resp.More = true
				return resp, nil
			}
			resp.Locks = append(resp.Locks, api.MakeKeyInfo(l.Key, l.KeyInfo))
		}
		if len(locks) <= page {
			return resp, nil // the store has no more
		}
		req.After = locks[page-1].Key
		scanned += page
		if scanned >= maxListScan {
			resp.More = true
			next := api.MakeKeyOut(req.After)
			resp.NextAfter = &next
			return resp, nil
		}
	}
}

func (h *Handler) clusterView(w http.ResponseWriter, r *http.Request) {
	if e := noQuery(r); e != nil {
		writeError(w, e)
		return
	}
	if h.cluster == nil {
		writeError(w, newAPIError(http.StatusNotFound, api.CodeNotCluster, "api: this node's store is not a cluster"))
		return
	}
	st := h.cluster.Status()
	if st.Members == nil {
		st.Members = []api.Member{}
	}
	writeJSON(w, http.StatusOK, st)
}

// leave serves POST /v1/leave through Config.Leave. It takes no fields (a
// body, if any, is {}), and it is audited as force-release is: who asked,
// from where, and how it ended.
func (h *Handler) leave(w http.ResponseWriter, r *http.Request) {
	who := callerOf(r)
	e := noQuery(r)
	if e == nil {
		e = readNoFields(w, r, h.cfg.MaxBodyBytes)
	}
	if e == nil {
		if e = permitPrefix(r, rightAdmin, "", "ask the node to leave its cluster"); e != nil {
			h.audit(who, r.RemoteAddr, hclog.Info, "api: leave: denied")
		}
	}
	if e == nil && h.cfg.Leave == nil {
		e = newAPIError(http.StatusNotImplemented, api.CodeNotImplemented, "api: this server cannot be asked to leave its cluster")
	}
	if e != nil {
		writeError(w, e)
		return
	}
	h.audit(who, r.RemoteAddr, hclog.Info, "api: leave: asked")
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.OpTimeout)
	defer cancel()
	if err := h.cfg.Leave(ctx); err != nil {
		h.audit(who, r.RemoteAddr, hclog.Warn, "api: leave: failed", "error", err)
		writeError(w, storeError(fmt.Errorf("api: leave: %w", err), true))
		return
	}
	h.audit(who, r.RemoteAddr, hclog.Info, "api: leave: left the cluster")
	resp := api.LeaveResponse{Status: "left"}
	if h.cluster != nil {
		resp.NodeID = h.cluster.Status().NodeID
	}
	writeJSON(w, http.StatusOK, resp)
}

// healthz is ready (200) when a leader is known, so that a load balancer
// sends lock traffic only to nodes that can serve it. A store that is not a
// cluster is always ready. It ignores the query string, unlike every other
// route: a probe that adds a parameter (a cache buster, a probe's own tag)
// must not see a healthy node as failing. It needs no token; without one
// (on a node that requires one) it tells the status alone, and with one
// also which node this is, its role and its leader (what /v1/cluster tells
// any known token).
func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	if h.cluster == nil {
		writeJSON(w, http.StatusOK, api.HealthResponse{Status: "ok"})
		return
	}
	st := h.cluster.Status()
	detailed := admitted(r)
	resp := api.HealthResponse{Status: "ok"}
	if detailed {
		resp.NodeID, resp.Role, resp.LeaderID, resp.LeaderAddr = st.NodeID, st.Role, st.LeaderID, st.LeaderAddr
	}
	var code, problem, why string
	switch {
	case st.Halted != "":
		code, problem, why = api.CodeHalted, "stopped", st.Halted
	case st.LogFault != "":
		// Before no leader: a node that cannot write its log may also know
		// no leader (it cannot vote), and the fault is what to fix.
		code, problem, why = api.CodeLogFault, "cannot write its raft log", st.LogFault
	case !st.HasLeader():
		code, problem = api.CodeNoLeader, "knows no leader"
	default:
		writeJSON(w, http.StatusOK, resp)
		return
	}
	resp.Status = code
	resp.Error = &api.ErrorDetail{Code: code, Message: probeMessage(detailed, st.NodeID, problem, why)}
	writeJSON(w, http.StatusServiceUnavailable, resp)
}

// probeMessage is the message of a /healthz or /readyz that fails: the
// node's ID and why for a caller admitted, the problem alone otherwise.
func probeMessage(detailed bool, nodeID, problem, why string) string {
	if !detailed {
		return fmt.Sprintf("api: this node %s (send a token for details)", problem)
	}
	if why == "" {
		return fmt.Sprintf("api: node %s %s", nodeID, problem)
	}
	return fmt.Sprintf("api: node %s %s: %s", nodeID, problem, why)
}

// readyz is 200 when the cluster would survive losing one more node (the
// leader's failure tolerance is at least one, this node is healthy and
// knows the leader: cluster.Node.Readiness), and 503 not_ready with the
// reason otherwise. It is what a rollout waits for before taking the next
// replica down (a Kubernetes readinessProbe, a PodDisruptionBudget); a
// node can serve locks while not ready, which /healthz tells. A store that
// is not a cluster is always ready; a Cluster that reports no readiness is
// ready when /healthz is. Like /healthz it ignores the query string, needs
// no token, and without one tells the status alone.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if h.cluster == nil {
		writeJSON(w, http.StatusOK, api.ReadyResponse{Status: "ready"})
		return
	}
	st := h.cluster.Status()
	detailed := admitted(r)
	resp := api.ReadyResponse{Status: "ready"}
	if detailed {
		resp.NodeID, resp.LeaderID = st.NodeID, st.LeaderID
		if st.Health != nil {
			tolerance := st.Health.FailureTolerance
			resp.FailureTolerance = &tolerance
		}
	}
	ready, reason := st.HasLeader() && st.LogFault == "", ""
	switch {
	case st.Readiness != nil:
		ready, reason = st.Readiness.Ready, st.Readiness.Reason
	case st.LogFault != "":
		reason = "cannot write the raft log: " + st.LogFault
	case !st.HasLeader():
		reason = "no leader known"
	}
	if !ready {
		resp.Status = api.CodeNotReady
		if detailed {
			resp.Reason = reason
		}
		resp.Error = &api.ErrorDetail{Code: api.CodeNotReady, Message: probeMessage(detailed, st.NodeID, "is not ready", reason)}
		writeJSON(w, http.StatusServiceUnavailable, resp)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func noQuery(r *http.Request) *apiError {
	_, e := query(r.URL.RawQuery)
	return e
}

// clampAdd is a+b, saturating instead of overflowing.
func clampAdd(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return time.Duration(1<<63 - 1)
}
