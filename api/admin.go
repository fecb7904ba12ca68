package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/raftlock/raftlock/lock"
)

// CodePermissionDenied (403): the token is known but its rules do not give
// the right the request needs on its key or prefix (the message names both).
// Nothing was done. doc.go lists it with the other codes.
const CodePermissionDenied = "permission_denied"

// ErrPermissionDenied: the node knows the token, but the token's rules do not
// allow the request (ClientConfig.Token; the node's token file). Nothing was
// done.
var ErrPermissionDenied = errors.New("api: permission denied")

// Rights a token's rule grants on a key prefix, weakest first; each implies
// the ones before it. RightDeny grants nothing: a rule for a longer prefix
// that takes away what a shorter one gave.
const (
	RightDeny  = "deny"
	RightRead  = "read"  // inspect, list
	RightLock  = "lock"  // acquire, release, extend, and read
	RightAdmin = "admin" // force-release, and lock; on the prefix "": also leave
)

// ForceReleaseRequest is the body of POST /v1/force-release.
type ForceReleaseRequest struct {
	KeyFields
}

// ForceReleaseResponse answers a force-release that ended a lease: Token is
// the fencing token of the lease it ended (never its owner).
type ForceReleaseResponse struct {
	KeyOut
	Released bool   `json:"released"`
	Token    uint64 `json:"token"`
}

// TokenRule is one rule of a token: Right on every key that starts with
// Prefix, unless a rule with a longer matching prefix says otherwise.
type TokenRule struct {
	Prefix string `json:"prefix"`
	Right  string `json:"right"` // RightDeny, RightRead, RightLock or RightAdmin
}

// WhoAmIResponse answers GET /v1/whoami: the name of the caller's token and
// its rules, longest prefix first (never the token's secret). A node that
// requires no token answers Name "anonymous" with admin on "".
type WhoAmIResponse struct {
	Name  string      `json:"name"`
	Rules []TokenRule `json:"rules"`
}

var _ lock.AdminStore = (*Client)(nil)

// ForceRelease implements lock.AdminStore: POST /v1/force-release, which
// needs the admin right on key. It returns the fencing token of the lease it
// ended; a key nobody holds gives an error matching lock.ErrNotHeld. It is
// never sent again after a connection failed once it went out (a repeat
// could end the next holder's lease): that error matches
// lock.ErrUnknownOutcome, and Inspect tells what happened.
func (c *Client) ForceRelease(ctx context.Context, key string) (uint64, error) {
	if err := lock.ValidateKey(key); err != nil {
		return 0, err
	}
	var resp ForceReleaseResponse
	if _, err := c.call(ctx, exchange{method: http.MethodPost, path: "/v1/force-release", key: key,
		body: ForceReleaseRequest{KeyFields: MakeKeyFields(key)}, out: &resp, write: true, resend: resendNever}); err != nil {
		return 0, err
	}
	if !resp.Released || resp.Token == 0 {
		return 0, fmt.Errorf("%w: force-release answered 200 without a released lease", ErrUnexpectedResponse)
	}
	return resp.Token, nil
}

// WhoAmI asks the node which token this client presents and what it may do:
// GET /v1/whoami.
func (c *Client) WhoAmI(ctx context.Context) (WhoAmIResponse, error) {
	var resp WhoAmIResponse
	_, err := c.call(ctx, exchange{method: http.MethodGet, path: "/v1/whoami", out: &resp})
	return resp, err
}
