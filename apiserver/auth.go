package apiserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/raftlock/raftlock/api"
)

// openPaths answer without a token: load balancers and orchestrators probe
// /healthz and /readyz, and they tell nothing a token would protect (no
// key, no owner, no lock count).
var openPaths = map[string]bool{"/healthz": true, "/readyz": true}

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
// open, or r presents the token in Authorization (Bearer) or api.TokenHeader.
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
	for _, v := range r.Header.Values(api.TokenHeader) {
		compare(v)
	}
	switch {
	case match == 1:
		return nil
	case !presented:
		return newAPIError(http.StatusUnauthorized, api.CodeUnauthorized,
			"api: this node requires a token: send \"Authorization: Bearer TOKEN\" or %q", api.TokenHeader+": TOKEN")
	default:
		return newAPIError(http.StatusUnauthorized, api.CodeUnauthorized, "api: wrong token")
	}
}
