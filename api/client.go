package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

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
	// transport and no overall timeout, since acquires long-poll; bound each
	// call with its context instead. A client given here should not set
	// Timeout shorter than the longest wait it will ask for.
	HTTPClient *http.Client
	// CleanupTimeout bounds the release sent after an acquire whose context
	// ended once the request had gone out. Default DefaultCleanupTimeout.
	CleanupTimeout time.Duration
}

// Client talks to one raftlock node over its HTTP API. It implements
// lock.Store and lock.Lister, so package lock runs unchanged against a remote
// node: lock.NewClient(apiClient) (or however package lock takes its store).
// It is safe for concurrent use.
//
// Errors: a held key is a *lock.HeldError; every other error answer is a
// *ServerError matching the lock sentinels of its code. A request that never
// left (connection refused, no route) matches lock.ErrUnavailable; a write
// that failed after its request went out matches lock.ErrUnknownOutcome
// (and lock.ErrUnavailable): retry it with the same owner. A done context
// gives an error matching ctx.Err().
//
// Remaining times are the node's figures, which it counts from when it
// received the request: later than when this client sent it, so they never
// overstate the lease as counted from the send.
type Client struct {
	base           *url.URL
	hc             *http.Client
	cleanupTimeout time.Duration
}

var (
	_ lock.Store  = (*Client)(nil)
	_ lock.Lister = (*Client)(nil)
)

// NewClient returns a client of the node at baseURL: "http://host:port",
// "https://host:port/prefix", or a bare "host:port" for plain HTTP.
func NewClient(baseURL string, cfg ClientConfig) (*Client, error) {
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
	c := &Client{base: u, hc: cfg.HTTPClient, cleanupTimeout: cfg.CleanupTimeout}
	if c.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Lock traffic is many small requests to one node: keep connections
		// for all of them rather than the default two.
		t.MaxIdleConnsPerHost = 256
		c.hc = &http.Client{Transport: t}
	}
	if c.cleanupTimeout <= 0 {
		c.cleanupTimeout = DefaultCleanupTimeout
	}
	return c, nil
}

// Acquire implements lock.Store: POST /v1/acquire, long-polling up to
// req.Wait. When ctx ends after the request went out, the client sends a
// release for req.Owner before returning (bounded by
// ClientConfig.CleanupTimeout): the node gives the acquire up and gives back
// a grant that raced with the cancel, so the caller is out of the queue and
// holds nothing when Acquire returns. Should that release fail, the error
// also matches lock.ErrUnknownOutcome.
func (c *Client) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if err := lock.ValidateAcquire(req); err != nil {
		return lock.Lease{}, err
	}
	owner := req.Owner.String()
	body := acquireRequest{keyFields: makeKeyFields(req.Key), TTL: durationPtr(req.TTL), Owner: &owner}
	if req.Wait > 0 {
		body.Wait = durationPtr(req.Wait)
	}
	var resp leaseResponse
	sent, err := c.call(ctx, exchange{method: http.MethodPost, path: "/v1/acquire", key: req.Key, body: body, out: &resp, write: true})
	if err != nil {
		if sent && ctx.Err() != nil && c.cleanupAcquire(ctx, req.Key, req.Owner) {
			// The release answered, so the outcome is known after all: the
			// owner holds nothing.
			return lock.Lease{}, fmt.Errorf("api: POST /v1/acquire: %w", ctx.Err())
		}
		return lock.Lease{}, err
	}
	if resp.Owner != owner {
		return lock.Lease{}, fmt.Errorf("%w: acquire answered for owner %q, not ours", ErrUnexpectedResponse, resp.Owner)
	}
	return lock.Lease{Token: resp.Token, Remaining: msDuration(resp.RemainingMS)}, nil
}

// cleanupAcquire releases what an abandoned acquire may have been granted,
// and reports whether the node answered. Failing, the lease runs out by its TTL.
func (c *Client) cleanupAcquire(ctx context.Context, key string, owner lock.Owner) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cleanupTimeout)
	defer cancel()
	_, err := c.Release(ctx, key, owner)
	return err == nil
}

// Release implements lock.Store: POST /v1/release. A not_held answer is (false, nil).
func (c *Client) Release(ctx context.Context, key string, owner lock.Owner) (bool, error) {
	if err := lock.ValidateRelease(key, owner); err != nil {
		return false, err
	}
	o := owner.String()
	var resp releaseResponse
	_, err := c.call(ctx, exchange{method: http.MethodPost, path: "/v1/release", key: key,
		body: releaseRequest{keyFields: makeKeyFields(key), Owner: &o}, out: &resp, write: true})
	var se *ServerError
	if errors.As(err, &se) && se.Code == CodeNotHeld {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return resp.Released, nil
}

// Extend implements lock.Store: POST /v1/extend. A not_held answer matches lock.ErrNotHeld.
func (c *Client) Extend(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error) {
	if err := lock.ValidateExtend(key, owner, ttl); err != nil {
		return lock.Lease{}, err
	}
	o := owner.String()
	var resp leaseResponse
	_, err := c.call(ctx, exchange{method: http.MethodPost, path: "/v1/extend", key: key,
		body: extendRequest{keyFields: makeKeyFields(key), Owner: &o, TTL: durationPtr(ttl)}, out: &resp, write: true})
	if err != nil {
		return lock.Lease{}, err
	}
	return lock.Lease{Token: resp.Token, Remaining: msDuration(resp.RemainingMS)}, nil
}

// Inspect implements lock.Store: GET /v1/inspect.
func (c *Client) Inspect(ctx context.Context, key string) (lock.KeyInfo, error) {
	if err := lock.ValidateKey(key); err != nil {
		return lock.KeyInfo{}, err
	}
	var resp keyInfo
	if _, err := c.call(ctx, exchange{method: http.MethodGet, path: "/v1/inspect", key: key,
		query: url.Values{"key": {key}}, out: &resp}); err != nil {
		return lock.KeyInfo{}, err
	}
	return resp.info(), nil
}

// List implements lock.Lister: GET /v1/locks, following the node's pages
// until req.Limit locks (all of them when 0) are read. The pages are separate
// reads, so a long listing is not one snapshot. A node whose store cannot
// list answers an error matching errors.ErrUnsupported.
func (c *Client) List(ctx context.Context, req lock.ListRequest) ([]lock.LockInfo, error) {
	if err := lock.ValidateList(req); err != nil {
		return nil, err
	}
	var out []lock.LockInfo
	after := req.After
	for {
		q := url.Values{}
		if req.Prefix != "" {
			q.Set("prefix", req.Prefix)
		}
		if after != "" {
			q.Set("after", after)
		}
		if req.Limit > 0 {
			q.Set("limit", fmt.Sprint(req.Limit-len(out)))
		}
		var page listResponse
		if _, err := c.call(ctx, exchange{method: http.MethodGet, path: "/v1/locks", query: q, out: &page}); err != nil {
			return nil, err
		}
		for _, l := range page.Locks {
			key, err := l.key()
			if err != nil {
				return nil, err
			}
			if key <= after && after != "" || !strings.HasPrefix(key, req.Prefix) {
				return nil, fmt.Errorf("%w: list answered key %q outside prefix %q after %q", ErrUnexpectedResponse, key, req.Prefix, after)
			}
			after = key
			out = append(out, lock.LockInfo{Key: key, KeyInfo: l.info()})
		}
		if !page.More || req.Limit > 0 && len(out) >= req.Limit {
			return out, nil
		}
		if len(page.Locks) == 0 {
			return nil, fmt.Errorf("%w: list answered an empty page with more to come", ErrUnexpectedResponse)
		}
	}
}

// Cluster returns the node's view of its cluster: GET /v1/cluster. A node
// whose store is not a cluster answers an error matching ErrNotCluster.
func (c *Client) Cluster(ctx context.Context) (ClusterStatus, error) {
	var st ClusterStatus
	_, err := c.call(ctx, exchange{method: http.MethodGet, path: "/v1/cluster", out: &st})
	return st, err
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
	var resp healthResponse
	status, payload, _, err := c.roundTrip(ctx, http.MethodGet, "/healthz", nil, nil)
	if err == nil && (status == http.StatusOK || status == http.StatusServiceUnavailable) && json.Unmarshal(payload, &resp) == nil && resp.Status != "" {
		return Health{
			Ready:      status == http.StatusOK,
			NodeID:     resp.NodeID,
			Role:       resp.Role,
			LeaderID:   resp.LeaderID,
			LeaderAddr: resp.LeaderAddr,
		}, nil
	}
	if err != nil {
		return Health{}, c.networkError(ctx, "GET /healthz", err, false, false)
	}
	return Health{}, answerError(status, payload, "", false)
}

// exchange is one request and what to do with its answer.
type exchange struct {
	method, path string
	key          string // the key the request is about: for *lock.HeldError
	query        url.Values
	body         any // JSON-encoded when not nil
	out          any // the 200 answer is decoded into it
	write        bool
}

// call performs x. sent says whether the request may have reached the node.
func (c *Client) call(ctx context.Context, x exchange) (sent bool, err error) {
	status, payload, sent, err := c.roundTrip(ctx, x.method, x.path, x.query, x.body)
	if err != nil {
		return sent, c.networkError(ctx, x.method+" "+x.path, err, sent, x.write)
	}
	if status != http.StatusOK {
		return true, answerError(status, payload, x.key, x.write)
	}
	if err := json.Unmarshal(payload, x.out); err != nil {
		return true, fmt.Errorf("%w: %s %s answered 200 with a body that is not the expected JSON: %v", ErrUnexpectedResponse, x.method, x.path, err)
	}
	return true, nil
}

// roundTrip sends one request and reads the whole answer. sent is false only
// when no byte of the request can have been written.
func (c *Client) roundTrip(ctx context.Context, method, path string, query url.Values, body any) (status int, payload []byte, sent bool, err error) {
	u := c.base.JoinPath(path)
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, false, fmt.Errorf("api: encoding request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { wrote.Store(true) },
	})
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return 0, nil, false, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, wrote.Load(), err
	}
	defer resp.Body.Close()
	payload, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return 0, nil, true, err
	}
	return resp.StatusCode, payload, true, nil
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
	var body errorBody
	if err := json.Unmarshal(payload, &body); err != nil || body.Error.Code == "" {
		return proxyError(status, payload, write)
	}
	d := body.Error
	if d.Code == CodeLocked {
		held := &lock.HeldError{Key: key, Token: d.Token}
		if d.RemainingMS != nil {
			held.Remaining = msDuration(*d.RemainingMS)
		}
		return held
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
	return &ServerError{StatusCode: status, Code: code, Message: fmt.Sprintf("answer is not a raftlock error: %q", snippet)}
}

func msDuration(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	if ms > maxMillis {
		ms = maxMillis
	}
	return time.Duration(ms) * time.Millisecond
}
