package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/raftlock/raftlock/lock"
)

// IndexHeader is the answer header of a blocking query (GET /v1/inspect or
// /v1/locks with ?index=): the index to pass as index in the next one.
const IndexHeader = "X-Raftlock-Index"

var _ lock.Watcher = (*Client)(nil)

// watchValues adds a blocking query's parameters to q.
func watchValues(q url.Values, wq lock.WatchQuery) url.Values {
	q.Set("index", strconv.FormatUint(wq.Index, 10))
	if wq.Wait > 0 {
		q.Set("wait", min(wq.Wait, lock.MaxWatchWait).String())
	}
	if wq.Consistent {
		q.Set("consistent", "true")
	}
	return q
}

// answeredIndex reads the index header of a blocking query's answer.
func answeredIndex(h http.Header, what string) (uint64, error) {
	v := h.Get(IndexHeader)
	index, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s answered without a valid %s header (%q): is the node older than this client?", ErrUnexpectedResponse, what, IndexHeader, v)
	}
	return index, nil
}

// WatchKey implements lock.Watcher: GET /v1/inspect?key=K&index=N, a
// blocking query the node answers once key changes after index N or the
// wait ends (see lock.Watcher). Each call holds one HTTP/1.1 connection of
// the client's pool while it waits; the client's own transport has no
// overall timeout, so the wait is bounded by q.Wait and ctx. If the client
// moves to another endpoint (the one it used fails), the index still
// holds: it is the cluster's raft index.
func (c *Client) WatchKey(ctx context.Context, key string, wq lock.WatchQuery) (lock.KeyInfo, uint64, error) {
	if err := lock.ValidateKey(key); err != nil {
		return lock.KeyInfo{}, 0, err
	}
	if err := wq.Validate(); err != nil {
		return lock.KeyInfo{}, 0, err
	}
	var resp KeyInfo
	var h http.Header
	if _, err := c.call(ctx, exchange{method: http.MethodGet, path: "/v1/inspect", key: key,
		query: watchValues(url.Values{"key": {key}}, wq), out: &resp, header: &h}); err != nil {
		return lock.KeyInfo{}, 0, err
	}
	index, err := answeredIndex(h, "GET /v1/inspect")
	if err != nil {
		return lock.KeyInfo{}, 0, err
	}
	return resp.Info(), index, nil
}

// WatchList implements lock.Watcher: GET /v1/locks?prefix=P&index=N, a
// blocking query on the keys under req.Prefix (the token needs read on all
// of them). It answers one page: at most req.Limit keys, or the node's page
// size (apiserver.Config.ListPageSize) when that is smaller or Limit is 0;
// a watcher of more keys than a page should watch narrower prefixes.
func (c *Client) WatchList(ctx context.Context, req lock.ListRequest, wq lock.WatchQuery) ([]lock.LockInfo, uint64, error) {
	if err := req.Validate(); err != nil {
		return nil, 0, err
	}
	if err := wq.Validate(); err != nil {
		return nil, 0, err
	}
	var page ListResponse
	var h http.Header
	if _, err := c.call(ctx, exchange{method: http.MethodGet, path: "/v1/locks", query: watchValues(listQuery(req.Prefix, req.After, req.Limit), wq), out: &page, header: &h}); err != nil {
		return nil, 0, err
	}
	index, err := answeredIndex(h, "GET /v1/locks")
	if err != nil {
		return nil, 0, err
	}
	out, _, err := appendPage(make([]lock.LockInfo, 0, len(page.Locks)), page, req.Prefix, req.After)
	if err != nil {
		return nil, 0, err
	}
	return out, index, nil
}
