package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/internal/httpwire"
	"github.com/raftlock/raftlock/internal/streamwire"
	"github.com/raftlock/raftlock/lock"
)

// DefaultCleanupTimeout bounds the release a Client sends after an acquire
// whose context ended once the request was on its way.
const DefaultCleanupTimeout = 5 * time.Second

// maxResponseBytes bounds an answer the client reads (a full list page of
// long keys is well under it).
const maxResponseBytes = 16 << 20

// ClientConfig tunes a Client. The zero value is usable.
type ClientConfig struct {
	// HTTPClient sends the requests. Nil: a client of its own, with a pooled
	// HTTP/1.1 transport (TLS as configured below), a dial timeout of
	// DefaultDialTimeout and no overall timeout, since acquires long-poll;
	// bound each call with its context instead. A client given here should
	// not set Timeout shorter than the longest wait it will ask for (an
	// acquire's wait, or a watch's: up to lock.MaxWatchWait plus 1/16).
	HTTPClient *http.Client
	// TLS configures https:// endpoints when HTTPClient is nil: RootCAs to
	// trust the node's certificate (nil: the system's roots), Certificates
	// for a node that requires client certificates. Nil: Go's defaults.
	// Setting both TLS and HTTPClient is an error: configure the
	// transport of your own HTTPClient instead.
	TLS *tls.Config
	// Token is sent with every request as "Authorization: Bearer <token>",
	// for a node that requires one (apiserver.Config.Token on the node). Empty: none
	// is sent. It must pass ValidateToken. Use https:// endpoints to keep it
	// secret: over http:// it travels as it is.
	Token string
	// CleanupTimeout bounds the release sent after an acquire whose context
	// ended once the request had gone out. Default DefaultCleanupTimeout.
	CleanupTimeout time.Duration
	// SyncInterval, when positive, makes the client learn the cluster's
	// other nodes (Client.Sync) in the background at most this often, as a
	// request comes, so that a client given one address fails over to nodes
	// it was never told of (like etcd's AutoSyncInterval). 0: only the
	// endpoints given, unless Sync is called.
	SyncInterval time.Duration
	// NoBatch turns batching off: every operation is an HTTP exchange of
	// its own. By default, acquires without wait, releases and extends that
	// goroutines start while an exchange with the same node is in flight
	// are sent together as one POST /v1/batch when that exchange ends (a
	// node without the route gets them one by one), which costs each of
	// them at most one exchange's wait and saves most of the CPU that HTTP
	// costs per operation (see batch.go).
	NoBatch bool
	// NoStream keeps the client off the node's binary stream: every
	// operation takes the HTTP routes (and batches, unless NoBatch). By
	// default the client opens one stream per node (GET /v1/stream,
	// upgraded, as WebSocket is) and sends on it the acquires that wait and
	// the operations that would otherwise go alone, each answered as soon as
	// it is done; a node or a proxy that does not upgrade gets the HTTP
	// routes (see stream.go). Set it when something between the client and
	// the node breaks long-lived upgraded connections without refusing them.
	NoStream bool
}

// DefaultDialTimeout bounds connecting to one endpoint in a Client's own
// HTTP client, so that a node that is down without refusing connections
// (a host gone, packets dropped) costs a few seconds, not the OS's minutes,
// before NewFailoverClient's next endpoint is tried.
const DefaultDialTimeout = 5 * time.Second

// Client talks to a raftlock node over its HTTP API. It implements
// lock.Store, lock.Lister and lock.AdminStore (force-release), so package lock runs unchanged against a remote
// node: lock.NewClient(apiClient) (or however package lock takes its store).
// It is safe for concurrent use.
//
// A Client made by NewFailoverClient knows several nodes (endpoints) of one
// cluster. Each request goes to the endpoint that last answered; when it
// cannot be sent there (connection refused, no route, a failed TLS
// handshake: nothing reached the node), it is sent to the next endpoint, and
// so on, each at most once. Any node serves any request (followers forward
// to the leader), so where it lands does not matter. A request whose
// connection failed after it went out is sent to the next endpoint too when
// that is safe: reads (inspect, list, cluster, health) change nothing;
// release and extend name their owner, so a repeat cannot do more than the
// first (an extend sets the lease's end from the later attempt; a release by
// an owner that no longer holds the key changes nothing); an acquire names
// its owner too (the holder or a queued owner acquiring again gets the same
// grant or keeps its place), but goes on only when the connection that
// failed was a kept-alive one from the pool, which a node that died or
// closed it left behind: a node that is alive and took the acquire on a new
// connection would, seeing the caller gone, give back a grant that the next
// node has meanwhile reported to the caller. Otherwise a write that went
// out reports lock.ErrUnknownOutcome, as below, for the caller (package lock
// does) to retry with the same owner. Writes also carry an Idempotency-Key
// header, which lets Go's HTTP transport resend a request at once on a new
// connection to the same node when the kept-alive connection it picked
// turns out closed. An answer, even an error answer, ends the request: the
// node was reached, and its answer stands. That holds for a release sent
// on after a failed attempt too: the cluster remembers its owners'
// releases (see lock.Store's Release), so the next node answers released
// when the failed attempt released the key, and not held only when the
// owner's lease had ended otherwise; an agent of a build from before it
// remembered releases answers such a resend not held either way. Sync (or ClientConfig.SyncInterval)
// adds the nodes the cluster reports (their cluster.Config.APIAddr) to the
// endpoints, so a client given one node can fail over to the others.
//
// Errors: a held key is a *lock.HeldError; every other error answer is a
// *ServerError matching the lock sentinels of its code (ErrUnauthorized for a
// missing or wrong token). A request that never left (connection refused, no
// route; on every endpoint) matches lock.ErrUnavailable; a write that failed
// after its request went out matches lock.ErrUnknownOutcome (and
// lock.ErrUnavailable): retry it with the same owner. A done context gives an
// error matching ctx.Err().
//
// Remaining times are the node's figures, which it counts from when it
// received the request: later than when this client sent it, so they never
// overstate the lease as counted from the send.
type Client struct {
	// endpoints only grows (discovery appends), so an index into one
	// version is valid in every later one.
	endpoints      atomic.Pointer[[]*url.URL]
	current        atomic.Int32 // index of the endpoint that last answered
	syncEvery      time.Duration
	syncMu         sync.Mutex // held by the one discovery running; protects lastSync
	lastSync       time.Time
	hc             *http.Client
	ownHTTP        bool // hc was made here, so Close may close its connections
	token          string
	cleanupTimeout time.Duration
	noBatch        bool
	batchers       sync.Map // *url.URL (an endpoint) -> *batcher
	streams        sync.Map // *url.URL (an endpoint) -> *streamSlot
	noStream       bool

	closed         atomic.Bool
	lifeMu         sync.Mutex         // orders starting background work against Close
	background     sync.WaitGroup     // background Syncs running
	bgCtx          context.Context    // canceled by Close; bounds background work
	stopBackground context.CancelFunc // cancels bgCtx
}

var (
	_ lock.Store         = (*Client)(nil)
	_ lock.Lister        = (*Client)(nil)
	_ lock.MultiKeyStore = (*Client)(nil)
)

// NewClient returns a client of the node at baseURL: "http://host:port",
// "https://host:port/prefix", or a bare "host:port" for plain HTTP.
func NewClient(baseURL string, cfg ClientConfig) (*Client, error) {
	return NewFailoverClient([]string{baseURL}, cfg)
}

// NewFailoverClient returns a client of a cluster given several of its
// nodes, each in NewClient's form (they may mix http and https). It starts
// with the first and fails over as the Client doc says.
func NewFailoverClient(endpoints []string, cfg ClientConfig) (*Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("api: no endpoint given")
	}
	if cfg.TLS != nil && cfg.HTTPClient != nil {
		return nil, errors.New("api: ClientConfig has both TLS and HTTPClient: set TLS in your HTTPClient's transport")
	}
	if err := ValidateToken(cfg.Token); err != nil {
		return nil, fmt.Errorf("api: ClientConfig.Token: %w", err)
	}
	if cfg.SyncInterval < 0 {
		return nil, fmt.Errorf("api: ClientConfig.SyncInterval is negative (%v)", cfg.SyncInterval)
	}
	c := &Client{hc: cfg.HTTPClient, token: cfg.Token, cleanupTimeout: cfg.CleanupTimeout, syncEvery: cfg.SyncInterval, noBatch: cfg.NoBatch, noStream: cfg.NoStream}
	c.bgCtx, c.stopBackground = context.WithCancel(context.Background())
	seen := map[string]bool{}
	var list []*url.URL
	for _, e := range endpoints {
		u, err := parseEndpoint(e)
		if err != nil {
			return nil, err
		}
		if seen[u.String()] {
			return nil, fmt.Errorf("api: endpoint %q given twice", e)
		}
		seen[u.String()] = true
		list = append(list, u)
	}
	c.endpoints.Store(&list)
	if c.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: DefaultDialTimeout, KeepAlive: 30 * time.Second}).DialContext
		// Lock traffic is many small requests to one node: keep connections
		// for all of them rather than the default two.
		t.MaxIdleConnsPerHost = 256
		if cfg.TLS != nil {
			t.TLSClientConfig = cfg.TLS.Clone()
		}
		// HTTP/1.1 over TLS too, as over plain HTTP: one protocol to reason
		// about for "sent or not", and a refused client certificate is
		// reported as the node's TLS alert, which HTTP/2's client hides
		// behind "client conn could not be established".
		t.Protocols = new(http.Protocols)
		t.Protocols.SetHTTP1(true)
		c.hc = &http.Client{Transport: t}
		c.ownHTTP = true
	}
	if c.cleanupTimeout <= 0 {
		c.cleanupTimeout = DefaultCleanupTimeout
	}
	return c, nil
}

func parseEndpoint(baseURL string) (*url.URL, error) {
	raw := baseURL
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("api: base URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("api: base URL %q: scheme must be http or https", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("api: base URL %q has no host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("api: base URL %q: no query or fragment, please", baseURL)
	}
	return u, nil
}

// Endpoint is the base URL of the node the next request goes to first: the
// one that last answered.
func (c *Client) Endpoint() string { return (*c.endpoints.Load())[c.current.Load()].String() }

// Endpoints lists the nodes the client knows, in the order it tries them
// after the current one: those it was given, then those it discovered.
func (c *Client) Endpoints() []string {
	var out []string
	for _, u := range *c.endpoints.Load() {
		out = append(out, u.String())
	}
	return out
}

// maxEndpoints bounds discovery: members that come and go under new names
// must not grow the list without end.
const maxEndpoints = 64

// Sync asks the cluster (GET /v1/cluster, through the endpoints the client
// knows) for its members' API addresses and adds those it does not know to
// its endpoints. With ClientConfig.SyncInterval set, requests call it in the
// background once per interval; call it yourself to discover at once. An
// endpoint once known is kept: a member that is down is skipped by failover.
func (c *Client) Sync(ctx context.Context) error {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	return c.syncLocked(ctx)
}

func (c *Client) syncLocked(ctx context.Context) error {
	st, err := c.Cluster(ctx)
	if err != nil {
		return err
	}
	c.lastSync = time.Now()
	old := *c.endpoints.Load()
	known := map[string]bool{}
	for _, u := range old {
		known[u.String()] = true
	}
	list := old
	for _, m := range st.Members {
		if m.APIAddr == "" || len(list) >= maxEndpoints {
			continue
		}
		u, err := parseEndpoint(m.APIAddr)
		if err != nil || known[u.String()] {
			continue // a member's bad address must not break the others
		}
		known[u.String()] = true
		list = append(list[:len(list):len(list)], u) // never write into old's array
	}
	if len(list) > len(old) {
		c.endpoints.Store(&list)
	}
	return nil
}

// maybeSync starts a background Sync when SyncInterval has passed since the
// last one and none is running.
func (c *Client) maybeSync() {
	if c.syncEvery <= 0 || !c.syncMu.TryLock() {
		return
	}
	if time.Since(c.lastSync) < c.syncEvery {
		c.syncMu.Unlock()
		return
	}
	c.lastSync = time.Now() // one attempt per interval, even if it fails
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if c.closed.Load() {
		c.syncMu.Unlock()
		return
	}
	c.background.Go(func() {
		defer c.syncMu.Unlock()
		ctx, cancel := context.WithTimeout(c.bgCtx, syncTimeout)
		defer cancel()
		_ = c.syncLocked(ctx)
	})
}

// syncTimeout bounds a background Sync.
const syncTimeout = 10 * time.Second

// Close stops the client: it cancels a background Sync and waits for it to
// end, and closes the idle connections of the client's own HTTP client (one
// given in ClientConfig.HTTPClient is the caller's to close). Every request
// made after Close fails with an error matching lock.ErrClosed, without being
// sent; requests already in flight finish as they would have. Close may be
// called more than once and from any goroutine; it always returns nil.
func (c *Client) Close() error {
	c.lifeMu.Lock()
	c.closed.Store(true)
	c.lifeMu.Unlock()
	c.stopBackground()
	c.background.Wait()
	c.streams.Range(func(_, v any) bool {
		slot := v.(*streamSlot)
		slot.mu.Lock()
		s := slot.s
		slot.mu.Unlock()
		if s != nil {
			s.closeWhenIdle() // operations in flight finish first
		}
		return true
	})
	if c.ownHTTP {
		c.hc.CloseIdleConnections()
	}
	return nil
}

// Acquire implements lock.Store: POST /v1/acquire, long-polling up to
// req.Wait. When ctx ends after the request went out, the client sends a
// release for req.Owner before returning (bounded by
// ClientConfig.CleanupTimeout): the node gives the acquire up and gives back
// a grant that raced with the cancel, so the caller is out of the queue and
// holds nothing when Acquire returns. Should that release fail, the error
// also matches lock.ErrUnknownOutcome.
func (c *Client) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if err := req.Validate(); err != nil {
		return lock.Lease{}, err
	}
	owner := req.Owner.String()
	body := AcquireRequest{KeyFields: MakeKeyFields(req.Key), Owner: &owner}
	if req.Keys != nil {
		body.KeyFields = KeyFields{}
		body.Keys, body.KeysB64 = MakeKeysFields(req.Keys)
	}
	if req.Session.IsZero() {
		body.TTL = NewDuration(req.TTL)
	} else {
		s := req.Session.String()
		body.Session = &s
	}
	if req.Metadata != "" {
		m := req.Metadata
		body.Metadata = &m
	}
	if req.Wait > 0 {
		body.Wait = NewDuration(req.Wait)
	}
	body.SetKind(req.Kind, req.Limit, req.Shared)
	var resp LeaseResponse
	at := -1
	x := exchange{method: http.MethodPost, path: "/v1/acquire", key: req.Key, body: body, out: &resp, write: true, resend: resendAfterStaleConn, at: &at, stream: streamwire.OpAcquire}
	if req.Wait <= 0 {
		x.batch = BatchAcquire
	}
	sent, err := c.call(ctx, x)
	if err != nil {
		if sent && ctx.Err() != nil && c.cleanupAcquire(ctx, req.Key, req.Owner, at) {
			// The release answered, so the outcome is known after all: the
			// owner holds nothing.
			return lock.Lease{}, fmt.Errorf("api: POST /v1/acquire: waiting for %q: %w", req.Key, ctx.Err())
		}
		var mismatch *lock.KindMismatchError
		if errors.As(err, &mismatch) {
			mismatch.AskedKind, mismatch.AskedLimit = req.Kind, req.Limit
		}
		return lock.Lease{}, err
	}
	if resp.Owner != owner {
		return lock.Lease{}, fmt.Errorf("%w: acquire answered for owner %q, not ours", ErrUnexpectedResponse, resp.Owner)
	}
	return lock.Lease{Token: resp.Token, Remaining: msDuration(resp.RemainingMS), TTL: msDuration(resp.TTLMS)}, nil
}

// AcquireAll implements lock.MultiKeyStore: POST /v1/acquire with keys,
// as Acquire (a canceled acquire's clean-up releases the set's first key,
// which gives up or releases the whole set).
func (c *Client) AcquireAll(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if req.Keys == nil {
		req.Keys = []string{} // reported as an empty set
	}
	return c.Acquire(ctx, req)
}

// cleanupAcquire releases what an abandoned acquire may have been granted,
// and reports whether the node answered. The release goes first to the
// endpoint the acquire went to (at), where it also takes the acquire out of
// the queue at once. Failing, the lease runs out by its TTL.
func (c *Client) cleanupAcquire(ctx context.Context, key string, owner lock.Owner, at int) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cleanupTimeout)
	defer cancel()
	_, err := c.release(ctx, key, owner, at)
	return err == nil
}

// Release implements lock.Store: POST /v1/release. A not_held answer is (false, nil).
func (c *Client) Release(ctx context.Context, key string, owner lock.Owner) (bool, error) {
	return c.release(ctx, key, owner, -1)
}

// release is Release sent first to endpoint at (-1: the one that last answered).
func (c *Client) release(ctx context.Context, key string, owner lock.Owner, at int) (bool, error) {
	if err := lock.ValidateRelease(key, owner); err != nil {
		return false, err
	}
	o := owner.String()
	var resp ReleaseResponse
	_, err := c.call(ctx, exchange{method: http.MethodPost, path: "/v1/release", key: key,
		body: ReleaseRequest{KeyFields: MakeKeyFields(key), Owner: &o}, out: &resp, write: true, resend: resendAlways, at: &at, batch: BatchRelease, stream: streamwire.OpRelease})
	return ended(resp.Released, err, CodeNotHeld)
}

// ended is what a release or a session destroy reports: done as the node
// answered it, or false for an answer of code nothing (the caller had
// nothing to end). Also after a resend: a repeat of the command that
// ended the lease or session is answered done (the store remembers it).
func ended(done bool, err error, nothing string) (bool, error) {
	if se := (*ServerError)(nil); errors.As(err, &se) && se.Code == nothing {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return done, nil
}

// Extend implements lock.Store: POST /v1/extend. A not_held answer matches lock.ErrNotHeld.
func (c *Client) Extend(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error) {
	if err := lock.ValidateExtend(key, owner, ttl); err != nil {
		return lock.Lease{}, err
	}
	o := owner.String()
	var resp LeaseResponse
	_, err := c.call(ctx, exchange{method: http.MethodPost, path: "/v1/extend", key: key,
		body: ExtendRequest{KeyFields: MakeKeyFields(key), Owner: &o, TTL: NewDuration(ttl)}, out: &resp, write: true, resend: resendAlways, batch: BatchExtend, stream: streamwire.OpExtend})
	if err != nil {
		return lock.Lease{}, err
	}
	return lock.Lease{Token: resp.Token, Remaining: msDuration(resp.RemainingMS), TTL: msDuration(resp.TTLMS)}, nil
}

// Inspect implements lock.Store: GET /v1/inspect.
func (c *Client) Inspect(ctx context.Context, key string) (lock.KeyInfo, error) {
	if err := lock.ValidateKey(key); err != nil {
		return lock.KeyInfo{}, err
	}
	var resp KeyInfo
	if _, err := c.call(ctx, exchange{method: http.MethodGet, path: "/v1/inspect", key: key,
		query: url.Values{"key": {key}}, out: &resp}); err != nil {
		return lock.KeyInfo{}, err
	}
	return resp.Info(), nil
}

// List implements lock.Lister: GET /v1/locks, following the node's pages
// until req.Limit locks (all of them when 0) are read. The pages are separate
// reads, so a long listing is not one snapshot. A node whose store cannot
// list answers an error matching errors.ErrUnsupported.
func (c *Client) List(ctx context.Context, req lock.ListRequest) ([]lock.LockInfo, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var out []lock.LockInfo
	after := req.After
	for {
		var page ListResponse
		pageStart := after
		if _, err := c.call(ctx, exchange{method: http.MethodGet, path: "/v1/locks", query: listQuery(req.Prefix, after, req.Limit-len(out)), out: &page}); err != nil {
			return nil, err
		}
		var err error
		if out, after, err = appendPage(out, page, req.Prefix, after); err != nil {
			return nil, err
		}
		if !page.More || req.Limit > 0 && len(out) >= req.Limit {
			return out, nil
		}
		if page.NextAfter != nil {
			// The node skipped keys this token may not read.
			next, err := page.NextAfter.DecodeKey()
			if err != nil {
				return nil, err
			}
			// At or after the page's last key, and past where the page
			// started, so that the listing moves on.
			if next < after || next <= pageStart || !strings.HasPrefix(next, req.Prefix) {
				return nil, fmt.Errorf("%w: list answered next_after %q outside prefix %q after %q", ErrUnexpectedResponse, next, req.Prefix, pageStart)
			}
			after = next
			continue
		}
		if len(page.Locks) == 0 {
			return nil, fmt.Errorf("%w: list answered an empty page with more to come", ErrUnexpectedResponse)
		}
	}
}

// listQuery is the query of GET /v1/locks for at most limit keys (0 or
// less: a page) under prefix, after after.
func listQuery(prefix, after string, limit int) url.Values {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}

// appendPage appends the locks of a GET /v1/locks answer asked for keys
// under prefix after after to out, making sure each is, in order, and
// returns the last key.
func appendPage(out []lock.LockInfo, page ListResponse, prefix, after string) ([]lock.LockInfo, string, error) {
	for _, l := range page.Locks {
		key, err := l.DecodeKey()
		if err != nil {
			return nil, "", err
		}
		if key <= after && after != "" || !strings.HasPrefix(key, prefix) {
			return nil, "", fmt.Errorf("%w: list answered key %q outside prefix %q after %q", ErrUnexpectedResponse, key, prefix, after)
		}
		after = key
		out = append(out, lock.LockInfo{Key: key, KeyInfo: l.Info()})
	}
	return out, after, nil
}

// Cluster returns the node's view of its cluster: GET /v1/cluster. A node
// whose store is not a cluster answers an error matching ErrNotCluster.
func (c *Client) Cluster(ctx context.Context) (ClusterStatus, error) {
	var st ClusterStatus
	_, err := c.call(ctx, exchange{method: http.MethodGet, path: "/v1/cluster", out: &st})
	return st, err
}

// Leave asks the node to leave its cluster for good and stop: POST
// /v1/leave. It goes to the client's first endpoint only, never on to
// another (that would take another node out). It returns once the node has
// been removed from the cluster's configuration; the node then stops. A
// node that cannot be removed (no leader) answers an error matching
// lock.ErrUnavailable and keeps running, a member or, when the error says
// so, maybe one (its removal was asked for and may yet commit): ask again.
// One whose server offers no leave answers a *ServerError with Code
// CodeNotImplemented.
func (c *Client) Leave(ctx context.Context) error {
	if c.closed.Load() {
		return fmt.Errorf("api: POST /v1/leave: %w", lock.ErrClosed)
	}
	endpoint := (*c.endpoints.Load())[0]
	status, payload, sent, _, err := c.send(ctx, endpoint, exchange{method: http.MethodPost, path: "/v1/leave"}, nil)
	if err != nil {
		return c.networkError(ctx, "POST /v1/leave", err, sent, true)
	}
	if status != http.StatusOK {
		return answerError(status, payload, "", true)
	}
	return nil
}

// Health is a node's answer to GET /healthz.
type Health struct {
	Ready      bool   // a leader is known (always, for a node that is not a cluster)
	NodeID     string // "" for a node that is not a cluster
	Role       string
	LeaderID   string
	LeaderAddr string
}

// Health asks the node whether it is ready: GET /healthz. A node without a
// leader is not an error: it answers Ready false.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var resp HealthResponse
	status, payload, _, err := c.roundTrip(ctx, exchange{method: http.MethodGet, path: "/healthz"})
	if err != nil {
		return Health{}, err
	}
	if (status == http.StatusOK || status == http.StatusServiceUnavailable) && json.Unmarshal(payload, &resp) == nil && resp.Status != "" {
		return Health{
			Ready:      status == http.StatusOK,
			NodeID:     resp.NodeID,
			Role:       resp.Role,
			LeaderID:   resp.LeaderID,
			LeaderAddr: resp.LeaderAddr,
		}, nil
	}
	return Health{}, answerError(status, payload, "", false)
}

// resendPolicy says when a write whose connection failed after it went out
// may be sent again, to the next endpoint.
type resendPolicy int

const (
	// resendNever: the outcome is unknown; the caller decides.
	resendNever resendPolicy = iota
	// resendAfterStaleConn: only when the connection that failed was a
	// kept-alive one from the pool, which the node had closed or left
	// behind by dying, rather than a node alive and at work on it. For an
	// acquire: repeating it is idempotent, but a node still at work gives
	// the grant back once it sees the caller gone (apiserver.Handler.acquire).
	resendAfterStaleConn
	// resendAlways: a repeat cannot do more than the first (release, extend).
	resendAlways
)

// exchange is one request and what to do with its answer.
type exchange struct {
	method, path string
	key          string // the key the request is about: for *lock.HeldError
	query        url.Values
	body         any // JSON-encoded when not nil
	out          any // the 200 answer is decoded into it
	write        bool
	// resend says when a write that went out may be sent to the next
	// endpoint (reads always may).
	resend resendPolicy
	// at, when not nil, is the endpoint to try first when >= 0 (else the
	// one that last answered), and is set to the endpoint the request was
	// last sent to.
	at *int
	// batch, when set, is the operation's name in a POST /v1/batch, which
	// may carry it (batch.go).
	batch string
	// stream, when set, is the operation's code on the binary stream,
	// which carries it when one is up (stream.go).
	stream byte
	// header, when not nil, is set to the answer's headers (a watch's index).
	header *http.Header
}

// call performs x. sent says whether the request may have reached a node.
func (c *Client) call(ctx context.Context, x exchange) (sent bool, err error) {
	status, payload, sent, err := c.roundTrip(ctx, x)
	if err != nil {
		return sent, err
	}
	if status != http.StatusOK {
		return true, answerError(status, payload, x.key, x.write)
	}
	if httpwire.DecodeAnswer(payload, x.out) {
		return true, nil // what json.Unmarshal would decode, without its cost
	}
	if err := json.Unmarshal(payload, x.out); err != nil {
		return true, fmt.Errorf("%w: %s %s answered 200 with a body that is not the expected JSON: %v", ErrUnexpectedResponse, x.method, x.path, err)
	}
	return true, nil
}

// roundTrip sends x and reads the whole answer, failing over from one
// endpoint to the next when the request cannot have left, or when it is a
// read, or a write its resend policy allows (which any node may answer
// again): each endpoint is tried at most once, starting with the one that
// last answered. sent is false only when
// no byte of the request can have been written to any of them. A failure is
// returned already classified (networkError).
func (c *Client) roundTrip(ctx context.Context, x exchange) (status int, payload []byte, sent bool, err error) {
	var body []byte
	if x.body != nil {
		if body, err = httpwire.EncodeRequest(x.body); err != nil {
			return 0, nil, false, fmt.Errorf("api: encoding request: %w", err)
		}
	}
	if c.closed.Load() {
		return 0, nil, false, fmt.Errorf("api: %s %s: %w", x.method, x.path, lock.ErrClosed)
	}
	c.maybeSync()
	endpoints := *c.endpoints.Load()
	first := int(c.current.Load())
	if x.at != nil && *x.at >= 0 && *x.at < len(endpoints) {
		first = *x.at
	}
	what := x.method + " " + x.path
	var failures []string
	anySent := false
	for i := range endpoints {
		at := (first + i) % len(endpoints)
		if x.at != nil {
			*x.at = at
		}
		var stale bool
		status, payload, sent, stale, err = c.sendOp(ctx, endpoints[at], x, body)
		if err == nil {
			c.current.Store(int32(at))
			return status, payload, true, nil
		}
		resend := x.resend == resendAlways || x.resend == resendAfterStaleConn && stale
		if sent && x.write && !resend || ctx.Err() != nil {
			// A write that went out may have been done: sending it
			// elsewhere is the caller's call, unless it is safe to repeat.
			return 0, nil, anySent || sent, c.networkError(ctx, what, err, anySent || sent, x.write)
		}
		anySent = anySent || sent
		failures = append(failures, err.Error())
	}
	if len(failures) > 1 {
		err = fmt.Errorf("none of %d endpoints answered: %s", len(failures), strings.Join(failures, "; "))
	}
	return 0, nil, anySent, c.networkError(ctx, what, err, anySent, x.write)
}

// send sends x to the node at base. sent is false only when no byte of the
// request can have been written. stale says that it was written to a
// kept-alive connection from the pool that failed before any answer.
func (c *Client) send(ctx context.Context, base *url.URL, x exchange, body []byte) (status int, payload []byte, sent, stale bool, err error) {
	u := base.JoinPath(x.path)
	u.RawQuery = x.query.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	var wrote, reused, answered atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		// The last connection counts: the transport may have resent the
		// request on a new one (Idempotency-Key), which a live node took.
		GotConn:              func(info httptrace.GotConnInfo) { reused.Store(info.Reused) },
		WroteHeaders:         func() { wrote.Store(true) },
		GotFirstResponseByte: func() { answered.Store(true) },
	})
	req, err := http.NewRequestWithContext(ctx, x.method, u.String(), rd)
	if err != nil {
		return 0, nil, false, false, err
	}
	if x.method == http.MethodPost {
		// Every POST, a bodiless one (leave) too: the node refuses any
		// other type, which web pages could send without asking.
		req.Header.Set("Content-Type", "application/json")
	}
	if x.resend != resendNever {
		// Go's transport resends a request with this header (as it does a
		// GET) on a new connection when the kept-alive one it was written
		// to was closed by the node before any answer.
		req.Header.Set("Idempotency-Key", rand.Text())
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, wrote.Load(), reused.Load() && !answered.Load(), err
	}
	defer resp.Body.Close()
	if x.header != nil {
		*x.header = resp.Header
	}
	payload, err = readAnswer(resp)
	if err != nil {
		return 0, nil, true, false, err
	}
	return resp.StatusCode, payload, true, false, nil
}

// readAnswer reads an answer's body, at most maxResponseBytes: into a
// buffer of the size it announces (a batch's answer does), where io.ReadAll
// would grow one from 512 bytes. net/http ends such a body at its length,
// and reports one cut short as io.ErrUnexpectedEOF.
func readAnswer(resp *http.Response) ([]byte, error) {
	if resp.ContentLength <= 0 || resp.ContentLength > maxResponseBytes {
		return io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	}
	buf := make([]byte, resp.ContentLength)
	n, err := io.ReadFull(resp.Body, buf)
	return buf[:n], err
}

// networkError classifies a failed exchange: the context's own end first,
// then whether the request may have been handled.
func (c *Client) networkError(ctx context.Context, what string, err error, sent, write bool) error {
	switch {
	case ctx.Err() != nil && sent && write:
		return fmt.Errorf("api: %s: %w (%w: the node may have acted on it)", what, ctx.Err(), lock.ErrUnknownOutcome)
	case ctx.Err() != nil:
		return fmt.Errorf("api: %s: %w", what, ctx.Err())
	case sent && write:
		return fmt.Errorf("api: %s: %w: %w: %w", what, lock.ErrUnknownOutcome, lock.ErrUnavailable, err)
	default:
		return fmt.Errorf("api: %s: %w: %w", what, lock.ErrUnavailable, err)
	}
}

// answerError turns an error answer into the error the caller matches on.
func answerError(status int, payload []byte, key string, write bool) error {
	var body ErrorBody
	if err := json.Unmarshal(payload, &body); err != nil || body.Error.Code == "" {
		return proxyError(status, payload, write)
	}
	d := body.Error
	if d.Code == CodeLocked {
		if d.Key != "" {
			key = d.Key // a multi-key acquire's first key not free
		}
		held := &lock.HeldError{Key: key, Token: d.Token, Reserved: d.Reserved}
		if d.RemainingMS != nil && !d.Reserved {
			held.Remaining = msDuration(*d.RemainingMS)
		}
		return held
	}
	if d.Code == CodeKindMismatch {
		kind, _ := lock.ParseKind(d.Kind)
		if d.Key != "" {
			key = d.Key // a multi-key acquire's key of another kind
		}
		return &lock.KindMismatchError{Key: key, Kind: kind, Limit: d.Limit}
	}
	return &ServerError{StatusCode: status, Code: d.Code, Message: d.Message}
}

// proxyError explains an error answer that is not ours: most likely a proxy
// or load balancer between us and the node.
func proxyError(status int, payload []byte, write bool) error {
	snippet := strings.TrimSpace(string(payload[:min(len(payload), 200)]))
	code := ""
	switch status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		// Whoever answered may have passed the request on before failing.
		code = CodeUnavailable
		if write {
			code = CodeUnknownOutcome
		}
	}
	msg := fmt.Sprintf("answer is not a raftlock error: %q", snippet)
	if status == http.StatusBadRequest && strings.Contains(snippet, "HTTP request to an HTTPS server") {
		// net/http's own answer to plain HTTP on a TLS port.
		msg = "the node serves HTTPS: use an https:// address"
	}
	return &ServerError{StatusCode: status, Code: code, Message: msg}
}

func msDuration(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(min(ms, httpwire.MaxMillis)) * time.Millisecond
}
