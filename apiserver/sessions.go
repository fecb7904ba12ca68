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

// permitSessions is nil when r's caller may lock some key: a session is
// only of use to bind locks, and a token that may only read (a dashboard's)
// must not be able to fill the store with sessions.
func permitSessions(r *http.Request, what string) *apiError {
	c := callerOf(r)
	for _, rl := range c.rules {
		if rl.right >= rightLock {
			return nil
		}
	}
	return newAPIError(http.StatusForbidden, api.CodePermissionDenied,
		"api: token %q may not %s: that needs the lock right on some prefix, and it has none", c.name, what)
}

func (h *Handler) sessionCreate(r *http.Request, c *opCall) (any, *apiError) {
	if e := permitSessions(r, "create a session"); e != nil {
		return nil, e
	}
	var req api.SessionCreateRequest
	if e := readJSON(c.w, r, h.cfg.MaxBodyBytes, &req); e != nil {
		return nil, e
	}
	ss, e := h.sessionStore()
	if e != nil {
		return nil, e
	}
	ttl, present, err := api.DurationField("ttl", req.TTL, req.TTLMS)
	if err != nil {
		return nil, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: %v", err)
	}
	if !present {
		return nil, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: ttl is required (ttl as \"15s\" or ttl_ms)")
	}
	delay, _, err := api.DurationField("lock_delay", req.LockDelay, req.LockDelayMS)
	if err != nil {
		return nil, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: %v", err)
	}
	id := lock.NewSessionID()
	if req.ID != nil {
		if id, err = lock.ParseSessionID(*req.ID); err != nil {
			return nil, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: id: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.OpTimeout)
	defer cancel()
	lease, err := ss.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: ttl, LockDelay: delay})
	if err != nil {
		return nil, storeError(err, true)
	}
	return api.SessionResponse{ID: id.String(), TTLMS: api.Millis(lease.TTL), RemainingMS: api.Millis(lease.Remaining)}, nil
}

// sessionID reads the id of a renew or destroy.
func (h *Handler) sessionID(r *http.Request, c *opCall) (lock.SessionID, *apiError) {
	var req api.SessionRequest
	if e := readJSON(c.w, r, h.cfg.MaxBodyBytes, &req); e != nil {
		return lock.SessionID{}, e
	}
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
func (h *Handler) sessionCall(r *http.Request, c *opCall, call func(context.Context, lock.SessionStore, lock.SessionID) (any, *apiError)) (any, *apiError) {
	id, e := h.sessionID(r, c)
	if e != nil {
		return nil, e
	}
	ss, e := h.sessionStore()
	if e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.OpTimeout)
	defer cancel()
	return call(ctx, ss, id)
}

func (h *Handler) sessionRenew(r *http.Request, c *opCall) (any, *apiError) {
	if e := permitSessions(r, "renew a session"); e != nil {
		return nil, e
	}
	return h.sessionCall(r, c, func(ctx context.Context, ss lock.SessionStore, id lock.SessionID) (any, *apiError) {
		lease, err := ss.RenewSession(ctx, id)
		if err != nil {
			return nil, storeError(err, true)
		}
		return api.SessionResponse{ID: id.String(), TTLMS: api.Millis(lease.TTL), RemainingMS: api.Millis(lease.Remaining), Locks: lease.Keys}, nil
	})
}

func (h *Handler) sessionDestroy(r *http.Request, c *opCall) (any, *apiError) {
	if e := permitSessions(r, "destroy a session"); e != nil {
		return nil, e
	}
	return h.sessionCall(r, c, func(ctx context.Context, ss lock.SessionStore, id lock.SessionID) (any, *apiError) {
		destroyed, err := ss.DestroySession(ctx, id)
		if err != nil {
			return nil, storeError(err, true)
		}
		if !destroyed {
			return nil, newAPIError(http.StatusConflict, api.CodeNoSession, "%v: nothing to destroy", lock.ErrNoSession)
		}
		return api.SessionDestroyResponse{ID: id.String(), Destroyed: true}, nil
	})
}

func (h *Handler) sessionInfo(r *http.Request, c *opCall) (any, *apiError) {
	q, e := query(r, "id")
	if e != nil {
		return nil, e
	}
	if !q.Has("id") {
		return nil, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: id is required (?id=, the id the create answered with)")
	}
	id, err := lock.ParseSessionID(q.Get("id"))
	if err != nil {
		return nil, newAPIError(http.StatusBadRequest, api.CodeInvalidSession, "api: id: %v", err)
	}
	ss, e := h.sessionStore()
	if e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.OpTimeout)
	defer cancel()
	info, err := ss.InspectSession(ctx, id)
	if err != nil {
		return nil, storeError(err, false)
	}
	return api.SessionInfoResponse{ID: id.String(), Live: info.Live, TTLMS: api.Millis(info.TTL), RemainingMS: api.Millis(info.Remaining),
		LockDelayMS: api.Millis(info.LockDelay), Locks: info.Keys}, nil
}
