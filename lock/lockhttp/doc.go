// Package lockhttp is net/http middleware that lets one request at a time
// run a handler, or one request per resource, across every replica that
// shares the lock store.
//
//	c := lock.New(store) // a cluster node or an API client; see package lock
//	mux.Handle("POST /payouts/run", lockhttp.Middleware(c, lockhttp.Key("payouts"))(runPayouts))
//	mux.Handle("POST /accounts/{id}/recompute", lockhttp.Middleware(c,
//		func(r *http.Request) string { return "account:" + r.PathValue("id") },
//		lockhttp.Wait(2*time.Second),
//	)(recompute))
//
// Middleware takes the lock (Lock.Run) before the handler and releases it
// after, whether the handler returned or panicked. Everything below follows
// from Run and is stated here because package lock leaves it to the caller.
//
// # When the lock is held
//
// A held lock is a normal outcome, not a server fault, so it gets its own
// response and the application may replace it (OnLocked). By default, without
// Wait the request is refused at once; with Wait(d) it queues for the lock up
// to d (or until the request's context is done) and is handed the lock the
// moment the holder releases it, in arrival order, with no polling. If the
// wait runs out the answer is
//
//	409 Conflict
//	Content-Type: application/json
//	{"error":"locked","key":"account:42","token":17}
//
// 409 rather than 423 Locked: 423 is WebDAV's (RFC 4918), where it tells a
// client to send a lock token it holds, which is not the case here; 409 says
// that the request conflicts with the resource's current state and may be
// repeated. "token" is the holder's fencing token when it is known (it helps
// to correlate logs); the holder's owner, which would let anyone release the
// lock, is never revealed.
//
// # When the store fails
//
// The acquire can fail for reasons that are not contention. They go to the
// OnError function, whose default answers with a JSON body as above:
//
//   - 503 Service Unavailable {"error":"unavailable"}: the store could not
//     answer (lock.ErrUnavailable: no leader or no quorum; lock.ErrQueueFull;
//     lock.ErrClosed), or the request's context ended while it waited;
//   - 400 Bad Request {"error":"invalid_key"}: the key function returned a key
//     the store refuses (empty, or longer than lock.MaxKeyLen bytes). A key is
//     usually made from the request (a path value), so this is the client's
//     doing;
//   - 500 Internal Server Error {"error":"internal"}: the middleware is
//     misconfigured (a TTL or Wait out of range, a nil client).
//
// Unlike frameworks where a failed acquire becomes an error the handler cannot
// catch, every outcome is a function the application can replace.
//
// # While the handler runs
//
// The lease lasts TTL (lock.DefaultTTL unless the TTL option says otherwise)
// and Run keeps it alive while the handler runs, so TTL is not a limit on the
// handler's duration: it bounds how long a replica that crashed mid-request
// blocks the others. To bound the handler, use http.TimeoutHandler or a
// context deadline as usual.
//
// The handler's request context is the one Run gives its callback: it is
// canceled as soon as the lease is or may be lost, and context.Cause then
// matches lock.ErrNotHeld. A handler that writes to a shared resource should
// stop when its context is done, and pass the lease's fencing token
// (Token(r.Context())) with each write so the resource can refuse a late
// writer; see package lock on what a lease promises.
//
// The response writer is passed through untouched (http.Flusher,
// http.Hijacker and http.ResponseController keep working). A lease problem
// found after the handler returned (the lease was lost while it ran, or the
// release failed and the lease will run out by itself) cannot change the
// response any more; it goes to OnLeaseError, which logs by default.
//
// # Hooks
//
// The middleware uses the client it is given, so the client's hooks
// (lock.WithHooks) fire for its locks as for any other: acquired, released,
// contended.
//
// # Reach
//
// With a memory store (memstore.New) the lock excludes requests in THIS
// PROCESS ONLY: two replicas that each use a memory store both run the
// handler, and nothing warns them. Give the middleware a client on a
// cluster node or the API client to exclude across replicas.
package lockhttp
