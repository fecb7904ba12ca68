package apiserver

// openPaths answer without a token: load balancers and orchestrators probe
// /healthz and /readyz, and they tell nothing a token would protect (no
// key, no owner, no lock count). Every other route needs a token when the
// node has any (acl.go).
var openPaths = map[string]bool{"/healthz": true, "/readyz": true}
