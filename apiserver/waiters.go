package apiserver

import (
	"net/http"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
)

// queueReader is a store that can list the callers queued for a key
// (*cluster.Node does), for GET /v1/waiters.
type queueReader interface {
	WaitersStale(key string) ([]cluster.QueuedCaller, error)
}

// waiters serves GET /v1/waiters?key=: a key's queue in FIFO order, read
// from this node's own state (a status page's read), never with owners.
func (h *Handler) waiters(r *http.Request, c *opCall) (any, *apiError) {
	key, e := queryKey(r)
	if e != nil {
		return nil, e
	}
	if e := permit(r, rightRead, key, "list the waiters of"); e != nil {
		return nil, e
	}
	qr, ok := h.store.(queueReader)
	if !ok {
		return nil, newAPIError(http.StatusNotImplemented, api.CodeNotImplemented, "api: this node's store cannot list a key's waiters")
	}
	queued, err := qr.WaitersStale(key)
	if err != nil {
		return nil, storeError(err, false)
	}
	resp := api.WaitersResponse{KeyOut: api.MakeKeyOut(key), Waiters: make([]api.Waiter, 0, len(queued)), Stale: true}
	for i, w := range queued {
		resp.Waiters = append(resp.Waiters, api.Waiter{Position: i + 1, TTLMS: api.Millis(w.TTL), WaitLeftMS: api.Millis(w.WaitLeft)})
	}
	return resp, nil
}
