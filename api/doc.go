// Package api is the Go client of the HTTP/JSON API every raftlock node
// serves. It imports only package lock and the standard library, so a
// program that talks to a cluster over HTTP links neither raft nor the
// node's storage or metrics. The server side (the handler, its limits and
// browser guard, metrics) is package apiserver, which speaks the same wire
// types, so the two cannot drift apart.
//
// *Client implements lock.Store and lock.Lister (and lock.SessionStore,
// lock.AdminStore and lock.MultiKeyStore), so package lock runs
// unchanged against a remote node:
//
//	c, err := api.NewClient("http://10.0.0.7:8300", api.ClientConfig{})
//	defer c.Close()
//	locks := lock.New(c)
//	ran, err := locks.Lock("reports/daily").Run(ctx, work)
//
// NewFailoverClient takes several nodes of one cluster and moves to the next
// when one cannot be reached, like etcd's client with its list of endpoints.
//
// The routes, their JSON, the error codes and HTTP statuses, the metrics and
// the security model (TLS, tokens, rights per key prefix, the browser guard)
// are described for every language in docs/http.md at the root of this
// repository, and every node serves them as OpenAPI 3 at GET
// /v1/openapi.json.
//
// Beyond a node's answers, Client reports a request that never left
// (connection refused, a failed TLS handshake; on every endpoint it knows)
// as lock.ErrUnavailable, and a write whose connection failed after it was
// sent as lock.ErrUnknownOutcome (and lock.ErrUnavailable), once it has
// tried the other endpoints where that is safe (release and extend always,
// an acquire after a stale kept-alive connection: see Client); a 502, 503
// or 504 that is not a node's JSON (a proxy) counts as the same. A done
// context gives an error matching ctx.Err(). An answer's error code becomes
// an error matching the same lock sentinels as the node's own error.
package api
