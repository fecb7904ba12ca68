// Package apiserver serves a lock.Store over the HTTP/JSON API that package
// api describes and whose Go client api.Client is:
//
//	h := apiserver.NewHandler(store, apiserver.Config{Token: token})
//	srv := apiserver.NewServer(addr, h)
//	err := srv.Serve(apiserver.JSONErrorListener(h.LimitListener(ln, apiserver.DefaultMaxConns)))
//
// The store is a *cluster.Node in production (or a memory store,
// memstore.New, in tests). Cluster facts (leader, members, raft figures, lock counters) come
// through the small Cluster interface: NodeStatus implements it for a
// *cluster.Node, and NewHandler uses it by itself when its store is one, so
// /v1/cluster, /healthz and the cluster metrics work with
// apiserver.NewHandler(node, apiserver.Config{}).
//
// The routes, wire format, error codes and security model are documented in
// package api. The request and answer types and their JSON (the fast paths,
// and the strict decoding of request bodies) are internal/httpwire's,
// shared with the client, which names the types by aliases
// (api.AcquireRequest, ...). This package adds what only a server needs:
// per-request limits and time limits, the token check (the shared
// Config.Token, and named tokens with rights per key prefix: Config.Tokens,
// LoadTokens, Handler.SetTokens), the browser guard, connection limits, JSON
// answers for the errors net/http writes by itself, and Prometheus metrics
// (Handler.Registry).
//
// Each lock operation (acquire, release, sessions, reads...) is a typed
// function from its caller and its decoded api request to its api answer,
// listed once in ops (ops.go) with its route, the names a batch and the
// binary stream give it, the right it needs and whether it may wait. The
// HTTP routes, POST /v1/batch and the stream are front-ends over that
// table: each decodes the request its way and encodes the answer its way.
//
// A Handler also serves the web console at /ui/ (console.go: the page is
// embedded from the ui directory and fed by GET /v1/events), its OpenAPI
// description at /v1/openapi.json (openapi.go), and, when the program asks,
// profiles, its configuration and its recent log (debug.go). Mount the
// Handler at the root of a server to get all of them, or under a prefix of
// a server that serves other things too, with the prefix taken off:
//
//	mux.Handle("/raftlock/", http.StripPrefix("/raftlock", h)) // console at /raftlock/ui/
package apiserver
