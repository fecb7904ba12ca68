package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/raftlock/raftlock/lock"
)

var _ lock.SessionStore = (*Client)(nil)

// CreateSession implements lock.SessionStore: POST /v1/session/create with
// req.ID, so that a create resent to another endpoint is the idempotent
// retry.
func (c *Client) CreateSession(ctx context.Context, req lock.SessionRequest) (lock.SessionLease, error) {
	if err := req.Validate(); err != nil {
		return lock.SessionLease{}, err
	}
	id := req.ID.String()
	body := SessionCreateRequest{ID: &id, TTL: NewDuration(req.TTL)}
	if req.LockDelay > 0 {
		body.LockDelay = NewDuration(req.LockDelay)
	}
	var resp SessionResponse
	if _, err := c.call(ctx, exchange{method: http.MethodPost, path: "/v1/session/create", body: body, out: &resp, write: true, resend: resendAlways}); err != nil {
		return lock.SessionLease{}, err
	}
	if resp.ID != id {
		return lock.SessionLease{}, fmt.Errorf("%w: session create answered for id %q, not ours", ErrUnexpectedResponse, resp.ID)
	}
	return lock.SessionLease{Remaining: msDuration(resp.RemainingMS), TTL: msDuration(resp.TTLMS)}, nil
}

// RenewSession implements lock.SessionStore: POST /v1/session/renew. A
// no_session answer matches lock.ErrNoSession.
func (c *Client) RenewSession(ctx context.Context, id lock.SessionID) (lock.SessionLease, error) {
	if err := lock.ValidateSessionID(id); err != nil {
		return lock.SessionLease{}, err
	}
	s := id.String()
	var resp SessionResponse
	if _, err := c.call(ctx, exchange{method: http.MethodPost, path: "/v1/session/renew", body: SessionRequest{ID: &s}, out: &resp, write: true, resend: resendAlways}); err != nil {
		return lock.SessionLease{}, err
	}
	return lock.SessionLease{Remaining: msDuration(resp.RemainingMS), TTL: msDuration(resp.TTLMS), Keys: resp.Locks}, nil
}

// DestroySession implements lock.SessionStore: POST /v1/session/destroy. A
// no_session answer is (false, nil), also to an attempt sent on after one
// whose connection failed: the node answers a repeat of the destroy that
// ended the session destroyed.
func (c *Client) DestroySession(ctx context.Context, id lock.SessionID) (bool, error) {
	if err := lock.ValidateSessionID(id); err != nil {
		return false, err
	}
	s := id.String()
	var resp SessionDestroyResponse
	_, err := c.call(ctx, exchange{method: http.MethodPost, path: "/v1/session/destroy", body: SessionRequest{ID: &s}, out: &resp, write: true, resend: resendAlways})
	return ended(resp.Destroyed, err, CodeNoSession)
}

// InspectSession implements lock.SessionStore: GET /v1/session/info.
func (c *Client) InspectSession(ctx context.Context, id lock.SessionID) (lock.SessionInfo, error) {
	if err := lock.ValidateSessionID(id); err != nil {
		return lock.SessionInfo{}, err
	}
	var resp SessionInfoResponse
	if _, err := c.call(ctx, exchange{method: http.MethodGet, path: "/v1/session/info", query: url.Values{"id": {id.String()}}, out: &resp}); err != nil {
		return lock.SessionInfo{}, err
	}
	if !resp.Live {
		return lock.SessionInfo{}, nil
	}
	return lock.SessionInfo{Live: true, TTL: msDuration(resp.TTLMS), Remaining: msDuration(resp.RemainingMS), LockDelay: msDuration(resp.LockDelayMS), Keys: resp.Locks}, nil
}
