package apiserver

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// callerKey carries the authenticated *caller in a request's context. A
// request without one is anonymous: the node requires no token.
type callerKey struct{}

func callerOf(r *http.Request) *caller {
	if c, ok := r.Context().Value(callerKey{}).(*caller); ok {
		return c
	}
	return anonymous
}

// permit is nil when c has want on key. An invalid key passes: the store
// reports it as such (400), whoever asks.
func permit(c *caller, want right, key, what string) *apiError {
	if lock.ValidateKey(key) != nil {
		return nil
	}
	if c.rightOn(key) >= want {
		return nil
	}
	return denied(c, want, what+" "+strconv.Quote(key), key)
}

// permitPrefix is nil when r's caller's rule for prefix itself gives want.
func permitPrefix(r *http.Request, want right, prefix, what string) *apiError {
	c := callerOf(r)
	if c.rightOn(prefix) >= want {
		return nil
	}
	return denied(c, want, what, prefix)
}

// SetTokens puts tokens in force for every request from now on (nil: none
// but Config.Token), as the agent does on SIGHUP. Requests in flight keep
// the token they were admitted with. It refuses, and changes nothing, when
// a token has the shared Config.Token's secret.
func (h *Handler) SetTokens(tokens *Tokens) error {
	auth, err := newAuthenticator(h.cfg.Token, tokens)
	if err != nil {
		return err
	}
	h.auth.Store(auth)
	return nil
}

// CheckTokens reports whether tokens can be put in force beside the shared
// token (Config.Token): nil, or the *TokenError SetTokens would return.
func CheckTokens(shared string, tokens *Tokens) error {
	_, err := newAuthenticator(shared, tokens)
	return err
}

// Permits reports whether the caller of r, a request that came through
// ServeHTTP, has right (api.RightRead, RightLock or RightAdmin) on key;
// for handlers mounted beside the API (a console's admin actions, debug
// pages) that share its tokens.
func (h *Handler) Permits(r *http.Request, right, key string) bool {
	want, ok := parseRight(right)
	return ok && callerOf(r).rightOn(key) >= want
}

func (h *Handler) forceRelease(ctx context.Context, who *caller, c *opCall, req *api.ForceReleaseRequest) (api.ForceReleaseResponse, *apiError) {
	key, err := req.DecodeKey()
	if err != nil {
		return api.ForceReleaseResponse{}, newAPIError(http.StatusBadRequest, api.CodeInvalidKey, "%s", err)
	}
	if err := lock.ValidateKey(key); err != nil {
		return api.ForceReleaseResponse{}, storeError(err, true)
	}
	if e := permit(who, c.need, key, "force-release"); e != nil {
		// An admin action refused is part of the audit trail too.
		h.audit(who, c.remote, hclog.Info, "api: force-release: denied", "key", key)
		return api.ForceReleaseResponse{}, e
	}
	admin, ok := h.store.(lock.AdminStore)
	if !ok {
		return api.ForceReleaseResponse{}, newAPIError(http.StatusNotImplemented, api.CodeNotImplemented, "api: this node's store cannot force-release locks")
	}
	ctx, cancel := h.opContext(ctx, c, h.cfg.OpTimeout)
	defer cancel()
	token, err := admin.ForceRelease(ctx, key)
	if err != nil {
		if errors.Is(err, lock.ErrUnknownOutcome) || !errors.Is(err, lock.ErrNotHeld) && !errors.Is(err, lock.ErrUnavailable) {
			// It may have ended a lease: the audit trail says who tried.
			h.audit(who, c.remote, hclog.Warn, "api: force-release: outcome unknown", "key", key, "error", err)
		}
		return api.ForceReleaseResponse{}, storeError(err, true)
	}
	h.audit(who, c.remote, hclog.Info, "api: force-release: ended a lease", "key", key, "token", token)
	return api.ForceReleaseResponse{KeyOut: api.MakeKeyOut(key), Released: true, Token: token}, nil
}

// audit logs an admin action, or its refusal, with the caller's token name
// first and its remote address last: the audit trail of force-release and
// leave. It never logs a secret: tokens are named by name.
func (h *Handler) audit(who *caller, remote string, level hclog.Level, msg string, args ...any) {
	line := make([]any, 0, len(args)+4)
	line = append(line, "caller", who.name)
	line = append(line, args...)
	h.log.Log(level, msg, append(line, "remote", remote)...)
}

// whoami serves GET /v1/whoami: the caller's token name and rules.
func (h *Handler) whoami(w http.ResponseWriter, r *http.Request) {
	if e := noQuery(r); e != nil {
		writeError(w, e)
		return
	}
	c := callerOf(r)
	writeJSON(w, http.StatusOK, api.WhoAmIResponse{Name: c.name, Rules: c.apiRules()})
}
