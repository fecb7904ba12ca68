package apiserver

import (
	"context"
	"net/http"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// sessionStore is the store's sessions, or the 501 answer of a store
// without them.
func (h *Handler) sessionStore() (lock.SessionStore, *apiError) {
	ss, ok := h.store.(lock.SessionStore)
	if !ok {
		return nil, newAPIError(http.StatusNotImplemented, api.CodeNotImplemented, "api: this node's store has no sessions")
	}
	return ss, nil
}

// sessionAllowed is nil when who has need (the lock right) on some
// prefix, or when what is empty (the operation is not a session's): a
// session is only of use to bind locks, and a token that may only read (a
// dashboard's) must not be able to fill the store with sessions. what
// says what who tried.
func sessionAllowed(who *caller, need right, what string) *apiError {
	if what == "" {
		return nil
	}
	for _, rl := range who.rules {
		if rl.right >= need {
			return nil
		}
	}
	return newAPIError(http.StatusForbidden, api.CodePermissionDenied,
		"api: token %q may not %s: that needs the %s right on some prefix, and it has none", who.name, what, need)
}

// sessionCreate, sessionRenew and sessionDestroy come after
// sessionAllowed (operation.sessionUse).
func (h *Handler) sessionCreate(ctx context.Context, _ *caller, c *opCall, req *api.SessionCreateRequest) (api.SessionResponse, *apiError) {
	ss, e := h.sessionStore()
	if e != nil {
		return api.SessionResponse{}, e
	}
	ttl, present, err := api.DurationField("ttl", req.TTL, req.TTLMS)
	if err != nil {
		return api.SessionResponse{}, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: %v", err)
	}
	if !present {
		return api.SessionResponse{}, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: ttl is required (ttl as \"15s\" or ttl_ms)")
	}
	delay, _, err := api.DurationField("lock_delay", req.LockDelay, req.LockDelayMS)
	if err != nil {
		return api.SessionResponse{}, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: %v", err)
	}
	id := lock.NewSessionID()
	if req.ID != nil {
		if id, err = lock.ParseSessionID(*req.ID); err != nil {
			return api.SessionResponse{}, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: id: %v", err)
		}
	}
	ctx, cancel := h.opContext(ctx, c, h.cfg.OpTimeout)
	defer cancel()
	lease, err := ss.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: ttl, LockDelay: delay})
	if err != nil {
		return api.SessionResponse{}, storeError(err, true)
	}
	return api.SessionResponse{ID: id.String(), TTLMS: api.Millis(lease.TTL), RemainingMS: api.Millis(lease.Remaining)}, nil
}

// sessionID reads the id of a renew or destroy.
func sessionID(req *api.SessionRequest) (lock.SessionID, *apiError) {
	if req.ID == nil {
		return lock.SessionID{}, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: id is required (the id the create answered with)")
	}
	id, err := lock.ParseSessionID(*req.ID)
	if err != nil {
		return lock.SessionID{}, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: id: %v", err)
	}
	return id, nil
}

// sessionCall reads the id of a renew or destroy and runs call with the
// store's sessions, under the operation timeout.
func sessionCall[Ans any](h *Handler, ctx context.Context, c *opCall, req *api.SessionRequest, call func(context.Context, lock.SessionStore, lock.SessionID) (Ans, *apiError)) (Ans, *apiError) {
	var none Ans
	id, e := sessionID(req)
	if e != nil {
		return none, e
	}
	ss, e := h.sessionStore()
	if e != nil {
		return none, e
	}
	ctx, cancel := h.opContext(ctx, c, h.cfg.OpTimeout)
	defer cancel()
	return call(ctx, ss, id)
}

func (h *Handler) sessionRenew(ctx context.Context, _ *caller, c *opCall, req *api.SessionRequest) (api.SessionResponse, *apiError) {
	return sessionCall(h, ctx, c, req, func(ctx context.Context, ss lock.SessionStore, id lock.SessionID) (api.SessionResponse, *apiError) {
		lease, err := ss.RenewSession(ctx, id)
		if err != nil {
			return api.SessionResponse{}, storeError(err, true)
		}
		return api.SessionResponse{ID: id.String(), TTLMS: api.Millis(lease.TTL), RemainingMS: api.Millis(lease.Remaining), Locks: lease.Keys}, nil
	})
}

func (h *Handler) sessionDestroy(ctx context.Context, _ *caller, c *opCall, req *api.SessionRequest) (api.SessionDestroyResponse, *apiError) {
	return sessionCall(h, ctx, c, req, func(ctx context.Context, ss lock.SessionStore, id lock.SessionID) (api.SessionDestroyResponse, *apiError) {
		destroyed, err := ss.DestroySession(ctx, id)
		if err != nil {
			return api.SessionDestroyResponse{}, storeError(err, true)
		}
		if !destroyed {
			return api.SessionDestroyResponse{}, newAPIError(http.StatusConflict, api.CodeNoSession, "%v: nothing to destroy", lock.ErrNoSession)
		}
		return api.SessionDestroyResponse{ID: id.String(), Destroyed: true}, nil
	})
}

// sessionInfoRequest is GET /v1/session/info's query, ?id=.
type sessionInfoRequest struct{ id string }

func decodeSessionInfo(rawQuery string) (sessionInfoRequest, *apiError) {
	q, e := query(rawQuery, "id")
	if e != nil {
		return sessionInfoRequest{}, e
	}
	if !q.Has("id") {
		return sessionInfoRequest{}, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: id is required (?id=, the id the create answered with)")
	}
	return sessionInfoRequest{id: q.Get("id")}, nil
}

func (h *Handler) sessionInfo(ctx context.Context, _ *caller, c *opCall, req *sessionInfoRequest) (api.SessionInfoResponse, *apiError) {
	id, err := lock.ParseSessionID(req.id)
	if err != nil {
		return api.SessionInfoResponse{}, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: id: %v", err)
	}
	ss, e := h.sessionStore()
	if e != nil {
		return api.SessionInfoResponse{}, e
	}
	ctx, cancel := h.opContext(ctx, c, h.cfg.OpTimeout)
	defer cancel()
	info, err := ss.InspectSession(ctx, id)
	if err != nil {
		return api.SessionInfoResponse{}, storeError(err, false)
	}
	return api.SessionInfoResponse{ID: id.String(), Live: info.Live, TTLMS: api.Millis(info.TTL), RemainingMS: api.Millis(info.Remaining),
		LockDelayMS: api.Millis(info.LockDelay), Locks: info.Keys}, nil
}
