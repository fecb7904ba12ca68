package apiserver

import "net/http"

// openPaths answer without a token: load balancers and orchestrators probe
// /healthz and /readyz. Without a token they tell the status alone (ok, or
// what is wrong): which node this is, its role, its leader and why it is
// not ready are for callers with a token the node knows (admitted), as
// /v1/cluster is. Every other route needs a token when the node has any
// (acl.go).
var openPaths = map[string]bool{"/healthz": true, "/readyz": true}

// admitted reports whether r, on an open path, passed the token check: it
// carries a token the node knows, or the node requires none.
func admitted(r *http.Request) bool {
	_, ok := r.Context().Value(callerKey{}).(*caller)
	return ok
}
