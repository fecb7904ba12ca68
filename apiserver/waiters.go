package apiserver

import (
	"context"
	"net/http"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
)

// queueReader is a store that can list the callers queued for a key
// (*cluster.Node does), for GET /v1/waiters.
type queueReader interface {
	WaitersStale(key string) ([]cluster.QueuedCaller, error)
}

// waitersRequest is GET /v1/waiters's query, ?key=.
type waitersRequest struct{ key string }

func decodeWaiters(rawQuery string) (waitersRequest, *apiError) {
	key, e := queryKey(rawQuery)
	return waitersRequest{key: key}, e
}

// waiters serves GET /v1/waiters?key=: a key's queue in FIFO order, read
// from this node's own state (a status page's read), never with owners.
func (h *Handler) waiters(ctx context.Context, who *caller, c *opCall, req *waitersRequest) (api.WaitersResponse, *apiError) {
	key := req.key
	if e := permit(who, c.need, key, "list the waiters of"); e != nil {
		return api.WaitersResponse{}, e
	}
	qr, ok := h.store.(queueReader)
	if !ok {
		return api.WaitersResponse{}, newAPIError(http.StatusNotImplemented, api.CodeNotImplemented, "api: this node's store cannot list a key's waiters")
	}
	queued, err := qr.WaitersStale(key)
	if err != nil {
		return api.WaitersResponse{}, storeError(err, false)
	}
	resp := api.WaitersResponse{KeyOut: api.MakeKeyOut(key), Waiters: make([]api.Waiter, 0, len(queued)), Stale: true}
	for i, w := range queued {
		resp.Waiters = append(resp.Waiters, api.Waiter{Position: i + 1, TTLMS: api.Millis(w.TTL), WaitLeftMS: api.Millis(w.WaitLeft)})
	}
	return resp, nil
}
