package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
)

// TokenHeader carries the API token for clients that cannot set
// Authorization (like Consul's X-Consul-Token). "Authorization: Bearer
// <token>" works everywhere and is what Client sends.
const TokenHeader = "X-Raftlock-Token"

// openPaths answer without a token: load balancers probe /healthz, and it
// tells nothing a token would protect (no key, no owner, no lock count).
var openPaths = map[string]bool{"/healthz": true}

// tokenCheck is a Handler's token, kept as its SHA-256 so that comparing a
// presented token costs the same whatever its length or contents: neither
// the token's bytes nor its length leak through timing.
type tokenCheck struct {
	on   bool
	hash [sha256.Size]byte
}

func newTokenCheck(token string) tokenCheck {
	if token == "" {
		return tokenCheck{}
	}
	return tokenCheck{on: true, hash: sha256.Sum256([]byte(token))}
}

// check returns nil when r may go on: no token is configured, the path is
// open, or r presents the token in Authorization (Bearer) or TokenHeader.
func (c tokenCheck) check(r *http.Request) *apiError {
	if !c.on || openPaths[r.URL.Path] {
		return nil
	}
	presented := false
	match := 0
	compare := func(token string) {
		presented = true
		h := sha256.Sum256([]byte(token))
		match |= subtle.ConstantTimeCompare(h[:], c.hash[:])
	}
	for _, v := range r.Header.Values("Authorization") {
		// RFC 6750: the scheme is case-insensitive, then one or more spaces.
		scheme, token, ok := strings.Cut(v, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			compare(strings.TrimLeft(token, " "))
		}
	}
	for _, v := range r.Header.Values(TokenHeader) {
		compare(v)
	}
	switch {
	case match == 1:
		return nil
	case !presented:
		return newAPIError(http.StatusUnauthorized, CodeUnauthorized,
			"api: this node requires a token: send \"Authorization: Bearer TOKEN\" or %q", TokenHeader+": TOKEN")
	default:
		return newAPIError(http.StatusUnauthorized, CodeUnauthorized, "api: wrong token")
	}
}

// ValidateToken reports why token cannot serve as an API token, or nil. A
// token is sent in a header, so it must be visible ASCII: no spaces, no
// control characters, as RFC 6750 bearer tokens are. (An empty token turns
// the check off; ValidateToken accepts it.) A long random token, such as 32
// bytes from crypto/rand in hex or base64, is what to use.
func ValidateToken(token string) error {
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("api: token holds byte %#02x at offset %d: want visible ASCII without spaces", c, i)
		}
	}
	return nil
}
