// Package api is the Go client of the HTTP/JSON API every raftlock node
// serves, with the JSON wire types and error codes that API speaks. It
// imports only package lock and the standard library, so a program that
// talks to a cluster over HTTP links neither raft nor the node's storage or
// metrics. The server side (the handler, its limits and browser guard,
// metrics, and the adapter of a *cluster.Node's status) is package
// apiserver, which uses these same wire types, so the two cannot drift
// apart.
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
// Programs in other languages, scripts and operators use the routes below
// with any HTTP client (curl examples follow).
//
// A node serves its lock.Store with apiserver.NewHandler, which a program
// that embeds a node calls as apiserver.NewHandler(node, apiserver.Config{});
// apiserver.NewServer wraps the handler in an *http.Server with timeouts that
// suit long-polling acquires. Where this text names Config, Handler,
// NewServer, JSONErrorListener or LimitListener, they are apiserver's.
//
// # Decisions
//
// Keys are any 1..lock.MaxKeyLen bytes, '/' and non-UTF-8 bytes included, so a
// key never appears in a URL path, where proxies and routers clean "..",
// merge "//" and unescape "%2F". Writes are POSTs with the key in the JSON
// body: "key" for UTF-8 text, or "key_b64" (standard base64) for other bytes
// (a JSON string cannot hold them; the node refuses a body that is not UTF-8
// rather than let a decoder turn bytes into U+FFFD). Reads are GETs with the
// key percent-encoded in the query (?key=), which carries any byte. Answers
// name a key the same way: "key", or "key_b64" when it is not UTF-8.
//
// Durations are strings in Go's form ("30s", "1m30s", "250ms") or whole
// milliseconds in the _ms twin of the field ("ttl_ms": 30000), never both.
// Answers give milliseconds (ttl_ms, remaining_ms), rounded down.
//
// An acquire may name its owner (32 hex digits, 128 random bits). Without one
// the node mints one and returns it: it is the only proof of ownership, needed
// to release or extend, so keep it secret. Naming the owner is what makes a
// retry safe: when an acquire's outcome is unknown (a timeout, a lost
// connection, 503 unknown_outcome), sending it again with the same owner
// returns the same grant and token if it had succeeded, as in etcd's
// session-owned keys. Such a repeat changes nothing, whatever ttl it names:
// its answer describes the lease the owner has (ttl_ms is what that lease
// had left when the node took the repeat, remaining_ms as always), not one
// of the ttl asked. Release and extend act only for the owner.
//
// Held and not-held are both 409 Conflict, told apart by their codes (locked,
// not_held): the request was well formed and conflicts with the lock's
// state. (423 Locked is WebDAV's and tells a not-held release nothing.) A
// locked answer carries the holder's fencing token and remaining time, never
// its owner; neither does any inspect or list answer.
//
// Remaining times are counted by the node from when it received the request.
// The caller sent it earlier, so a caller that counts the figure from its own
// send time (as Client and package lock do) never believes a lease lasts
// longer than the cluster holds it.
//
// Waiting is server-side: an acquire with "wait" long-polls, queued in FIFO
// order in the store, and is answered as soon as the lock is handed to it (a
// release, an expiry or a cancel hands it over in one commit) or the wait runs
// out (409 locked). The wait is at most lock.MaxWait. A client that hangs up
// leaves the queue (the store cancels a wait whose context ends), and a grant
// that raced with the hang-up is released at once rather than held by an
// owner nobody knows until its TTL. A node notices a hang-up only some time
// later, so a release also gives up the same owner's acquires still in
// progress on that node (they answer 409 canceled) and answers only once they
// are out of the store. Client relies on that: when its context ends after an
// acquire went out, it sends that release before returning, so that, as
// lock.Store promises, the caller is out of the queue when Acquire returns.
// (Through a load balancer the release may reach another node; then the
// hang-up alone takes the waiter out, a moment later.)
//
// Every request body is limited (Config.MaxBodyBytes, 64 KiB by default; 413
// beyond), strict and read to its end. Strict means 400 bad_request, never a
// guess, for: a field the route does not take, a field name in another
// letter case ("KEY" for "key"), a field given twice, a string with a lone
// UTF-16 surrogate escape ("\ud800", which is no character), bytes that are
// not UTF-8, anything after the object. The error's "field" names the field
// at fault when there is one. The node decodes with the standard library's
// encoding/json after a token-level pass of its own (json.Decoder.Token)
// that catches what encoding/json would accept silently (it matches names
// case-insensitively, keeps the last of duplicates and turns lone
// surrogates into U+FFFD); encoding/json/v2 would catch these by itself but
// still needs GOEXPERIMENT=jsonv2, which an embedding program cannot be
// asked to set. Query parameters are strict too: an unknown name (names are
// case-sensitive, "?KEY=" is not "?key="), a repeated one or a malformed
// query string is 400 bad_request, on every route but the two that
// machines poll: /healthz, so that a probe adding a parameter still sees a
// healthy node, and /metrics, so that a scrape configured with parameters
// still scrapes; both ignore their query string. Each store call has a time limit
// (Config.OpTimeout plus the acquire's wait); a write that runs out answers
// unknown_outcome, since it may have been committed.
//
// # Security: TLS and tokens
//
// A node's API may hold every lock of a system, so on any network shared
// with others give it both of these, as etcd and Consul users would:
//
// TLS. Serve the handler over HTTPS: NewServer's *http.Server with a
// TLSConfig (MinVersion tls.VersionTLS12 or later), started with ServeTLS or
// ListenAndServeTLS. To admit only clients with a certificate from your CA
// (etcd's --client-cert-auth), set ClientAuth to
// tls.RequireAndVerifyClientCert and ClientCAs to that CA: the handshake
// then fails without one, before any HTTP, /healthz included (probe it with
// a certificate, or check the TCP port). The raftlock agent does this with
// -cert-file, -key-file and -client-ca-file. On the client side,
// ClientConfig.TLS carries RootCAs and the client certificate; the agent's
// CLI takes -ca-file, -client-cert and -client-key.
//
// Tokens. With Config.Token set, every request but GET /healthz, GET
// /readyz and the console's files (GET /ui/...) must carry
// the token as "Authorization: Bearer <token>" (what Client sends, from
// ClientConfig.Token) or as "X-Raftlock-Token: <token>" (like Consul's
// X-Consul-Token). Without it, or with another, the answer is 401
// unauthorized (with a WWW-Authenticate: Bearer header) and nothing is done;
// the check comes before routing, so the caller learns nothing else, not
// even which routes exist. The node compares SHA-256 digests of the tokens
// in constant time, so timing tells neither the token nor its length.
// /healthz and /readyz stay open for load balancers and orchestrators, and
// so do the console's files under /ui/ (which hold no data): without a token
// the probes tell the status alone (ok, or the problem's code); with a
// token the node knows, also the node and leader IDs, the role, the
// leader's raft address, the failure tolerance and the reason (what
// /v1/cluster tells); never a key, an owner or a count. Config.Token
// admits to everything: it is a shared secret between the agents and their
// callers (the token named "shared"). Send tokens over TLS only: over plain
// HTTP anyone on the path reads them. raftlock_api_unauthorized_total
// counts refused requests, and the node logs them as a warning, at most
// once a minute, with the remote address and the count since (never what
// was presented).
//
//	curl -s --cacert ca.pem -H "Authorization: Bearer $RAFTLOCK_HTTP_TOKEN" \
//	    'https://10.0.0.7:8300/v1/inspect?key=jobs%2Fnightly'
//
// Neither certificates nor Config.Token are reloaded while a node runs:
// restart it to change them (nodes restart one at a time without losing
// locks). Named tokens are (below).
//
// # Security: rights per key prefix
//
// Config.Tokens (the agent's -http-acl-file, reloaded on SIGHUP through
// Handler.SetTokens) adds named tokens, each with rules in the manner of
// Consul's key_prefix rules: a rule gives a right on every key that starts
// with its prefix, and for a given key the rule with the longest matching
// prefix decides; a key no rule matches gets nothing. The rights, weakest
// first, each implying the ones before: deny (nothing: a longer prefix that
// takes away what a shorter one gave), read, lock, admin. The routes need:
//
//	POST /v1/acquire, /v1/release, /v1/extend   lock on the key
//	GET  /v1/inspect, /v1/waiters               read on the key
//	GET  /v1/locks?prefix=P                     read: the list holds only the keys the token may
//	                                            read; 403 when it may read no key under P
//	POST /v1/force-release                      admin on the key
//	POST /v1/batch                              each operation what its own route needs
//	GET  /v1/stream                             any known token to open; then each operation
//	                                            what its own route needs
//	POST /v1/leave                              admin on the prefix "" (the rule for every key)
//	GET  /v1/cluster, /v1/whoami, /metrics      any known token: they name no key
//	GET  /v1/openapi.json, /v1/session/info     any known token
//	GET  /v1/events                             any known token; it shows only the locks it may read
//	POST /v1/session/create, renew, destroy     lock on some prefix
//	GET  /v1/agent/config, /v1/agent/logs       admin on the prefix ""
//	GET  /debug/pprof/...                       admin on the prefix "" (when profiling is on)
//	GET  /ui/...                                nothing, no token either (the console's files)
//	GET  /healthz, /readyz                      nothing, no token either (with a known
//	                                            token they tell which node and leader)
//
// Cluster status and metrics need no right on a key because they reveal
// none: members, the leader, raft figures and lock counts. A token without
// the right gets 403 permission_denied, whose message names the token, the
// right needed, the key or prefix, and the rule that decided; nothing is
// done. A malformed request is 400 whoever sends it. Secrets are compared
// as SHA-256 digests in constant time, against every known token without
// stopping at a match, and never logged or answered: logs and audit lines
// name tokens by name. A node with neither Config.Token nor Config.Tokens
// requires no token, and everyone ("anonymous") may do everything.
//
// The token file (ParseTokens in package apiserver reads it) is JSON:
//
//	{
//	  "tokens": [
//	    {"name": "ops", "secret": "6f1c...", "rules": [{"prefix": "", "right": "admin"}]},
//	    {"name": "billing", "secret": "a9e4...", "rules": [
//	      {"prefix": "billing/", "right": "lock"},
//	      {"prefix": "billing/audit/", "right": "deny"},
//	      {"prefix": "", "right": "read"}
//	    ]}
//	  ]
//	}
//
// Names are 1 to 64 letters, digits, '.', '_' or '-' ("shared" and
// "anonymous" are reserved); secrets at least 16 bytes of visible ASCII
// without spaces, each token its own (openssl rand -hex 16 makes one);
// at most one rule per prefix in a token. Unknown fields are errors. A
// token may give "secret_sha256", the secret's SHA-256 in hex (printf %s
// "$SECRET" | sha256sum), instead of "secret", so that the file need not
// hold the secrets themselves.
//
// # Security: web pages
//
// A web page open in a browser can send requests to any address, the
// node's included, and a node without a token would act on them. Handler
// keeps pages out whatever the token (see Config.AllowedOrigins and
// Config.AllowedHosts): every POST must carry "Content-Type:
// application/json" (415 unsupported_media_type otherwise), a type a page
// can only send after a CORS preflight; a request with an Origin header
// (only browsers send one) is refused with 403 origin_not_allowed unless
// Config.AllowedOrigins lists that origin, whose preflights are then
// answered; and a Host header that names neither an IP address, localhost
// nor one of Config.AllowedHosts is refused with 403 host_not_allowed, so
// that a page cannot reach the node through a name of its own that it
// points at the node (DNS rebinding). Programs send no Origin and dial the
// node by a name it knows, so curl (with --json), Client and probes by IP
// are not affected. Client reports both 403s as ErrForbidden.
//
// # Routes
//
// Every answer is JSON, errors included. Examples assume a node on
// 127.0.0.1:8300. POSTs need "Content-Type: application/json": curl's
// --json sets it (with curl before 7.82, -H 'Content-Type: application/json').
//
// That includes the answers Go's net/http gives by itself before any
// handler runs, when the server's listener is wrapped in JSONErrorListener
// (the agent's is): 431 headers_too_large (headers over
// ServerMaxHeaderBytes), 400 bad_request (a malformed request line or
// header, no Host), 505 unsupported_protocol (an HTTP version other than
// 1.x), 501 unsupported_protocol (a transfer encoding other than chunked),
// and 400 https_required for plain HTTP sent to a node that serves HTTPS.
// net/http writes those as fixed text that no http.Server option changes,
// so the listener recognizes them on their way out and writes JSON instead.
// What stays outside JSON, because it is not an HTTP answer or because
// net/http writes it where a listener cannot see it: a failed TLS handshake
// (a TLS alert), a connection closed for a timeout (ReadHeaderTimeout,
// ReadTimeout, IdleTimeout), an Expect header other than 100-continue (417
// with an empty body, written as an ordinary answer), and, over HTTP/2,
// stream resets and net/http's own 431 (inside TLS, out of the listener's
// sight).
//
// POST /v1/acquire takes a lock: key (or key_b64), ttl (or ttl_ms), optional
// wait (or wait_ms; 0 or absent: never queue), optional owner, optional
// metadata (UTF-8 text, at most lock.MaxMetadataLen bytes, shown to anyone
// by inspect and list: who holds the lock, never a secret). With session
// (an id from /v1/session/create) instead of ttl, the lock has no lease of
// its own: it ends with the session, and remaining_ms is the session's.
//
//	curl -s --json '{"key":"jobs/nightly","ttl":"30s","wait":"10s"}' localhost:8300/v1/acquire
//	{"key":"jobs/nightly","owner":"9f0c1e...","token":42,"ttl_ms":30000,"remaining_ms":29998}
//
// A held key answers 409:
//
//	{"error":{"code":"locked","message":"lock: \"jobs/nightly\" held by another owner (token 41, 2.95s left)","token":41,"remaining_ms":2950}}
//
// The same route takes a semaphore's slot with "limit" (n, 1..65536: at
// most n holders at once, n fixed by the acquire that creates the key), and
// a read/write lock with "shared" (true: a read, shared with other readers;
// false: the write, alone); "kind" ("mutex", "semaphore", "rwlock") may say
// it outright. Waiters are served in strict FIFO order, so a writer waits
// only for the readers ahead of it. Each holder has its own owner, token
// and lease, and releases and extends on its own. While anyone holds or
// waits for a key, an acquire of another kind or limit answers 409
// kind_mismatch (409, not 400: the request is well formed, and succeeds
// once the key is free) with what the key is:
//
//	curl -s --json '{"key":"render","ttl":"30s","limit":8}' localhost:8300/v1/acquire
//	{"key":"render","owner":"5b1d0e...","token":43,"ttl_ms":30000,"remaining_ms":29999}
//	curl -s --json '{"key":"render","ttl":"30s","limit":4}' localhost:8300/v1/acquire
//	{"error":{"code":"kind_mismatch","message":"lock: key \"render\" is a semaphore of 8; asked for a semaphore of 4","kind":"semaphore","limit":8}}
//
// With "keys" (1..64 distinct UTF-8 keys, any order; "keys_b64" for keys
// that are not text, each in standard base64) instead of "key", the route
// takes a multi-key lock: every key at once, all or nothing, with one
// lease and one fencing token for the set; the answer's "key" is the set's
// first in byte order and "keys" (or "keys_b64") the whole set, sorted.
// With a wait, the set queues on every key at once, FIFO on each: a free
// key whose queue it heads is kept for it (an acquire of it answers 409
// locked) until its last key frees, so sets never deadlock and are never
// starved. A release or
// extend of any key of the set (with the answer's owner) acts on the whole
// set; the release hands each key to its next waiter. The keys are mutex
// keys (a key of another kind answers 409 kind_mismatch with that key in
// "key"), the set needs the lock right on every key, and it has a ttl,
// never a session (400 invalid_session). A key twice, no keys or more than
// 64 answer 400 invalid_key.
//
//	curl -s --json '{"keys":["accounts/bob","accounts/alice"],"ttl":"30s","wait":"10s"}' localhost:8300/v1/acquire
//	{"key":"accounts/alice","owner":"77a0c4...","token":44,"ttl_ms":30000,"remaining_ms":29999,"keys":["accounts/alice","accounts/bob"]}
//
// POST /v1/release ends the owner's lease and hands the key to the next
// waiter. 409 not_held when the owner does not hold the key (any more). It
// is idempotent: sent again after its answer was lost, it answers
// released (changing nothing) when it was this owner's release that ended
// the lease, which the cluster remembers for 5 minutes (at most 65,536
// releases), and not_held when the lease had ended otherwise (run out,
// force-released) or the owner acquired the key again since; a session's
// destroy likewise. It also gives up the owner's acquires of the key still
// waiting on this node.
//
//	curl -s --json '{"key":"jobs/nightly","owner":"9f0c1e..."}' localhost:8300/v1/release
//	{"key":"jobs/nightly","released":true}
//
// POST /v1/extend makes the owner's lease end ttl from now; same token. 409
// not_held once the lease is lost.
//
//	curl -s --json '{"key":"jobs/nightly","owner":"9f0c1e...","ttl":"30s"}' localhost:8300/v1/extend
//	{"key":"jobs/nightly","owner":"9f0c1e...","token":42,"ttl_ms":30000,"remaining_ms":29999}
//
// POST /v1/session/create starts a session: ttl (or ttl_ms), optional
// lock_delay (or lock_delay_ms, 0..1m: after the session expires, not
// after a destroy, its keys stay unavailable that long), optional id (32
// hex digits; the node mints one when absent; a create of a live session
// with the same id is an idempotent retry). Locks acquired with
// "session":id end when it ends: when nobody renews it for its TTL (the
// process holding it died), or when it is destroyed, which releases them
// all in one step, each key to its next waiter. The id is a secret, like
// an owner. Client.CreateSession (lock.SessionStore) sends its own id.
//
//	curl -s --json '{"ttl":"15s"}' localhost:8300/v1/session/create
//	{"id":"5b7e20...","ttl_ms":15000,"remaining_ms":14999}
//
// POST /v1/session/renew makes the session end its TTL from now (renew
// every TTL/3, as lock.Session does); POST /v1/session/destroy ends it and
// releases its locks. Both take {"id":...} and answer 409 no_session once
// the session has ended.
//
//	curl -s --json '{"id":"5b7e20..."}' localhost:8300/v1/session/renew
//	{"id":"5b7e20...","ttl_ms":15000,"remaining_ms":14999}
//	curl -s --json '{"id":"5b7e20..."}' localhost:8300/v1/session/destroy
//	{"id":"5b7e20...","destroyed":true}
//
// GET /v1/session/info?id=ID reads a session linearizably, as inspect reads
// a key: whether it is live, its TTL, the time left, its lock_delay and how
// many keys it holds or waits for ("locks"); {"id":...,"live":false} once
// it has ended or if it never existed.
//
//	curl -s 'localhost:8300/v1/session/info?id=5b7e20...'
//	{"id":"5b7e20...","live":true,"ttl_ms":15000,"remaining_ms":11204,"locks":2}
//
// GET /v1/inspect?key=K tells anyone whether K is held: its token, the time
// left, the number of waiters and the holder's metadata; never the owner
// or session. "delayed":true says that nobody holds it but a session's
// lock-delay keeps it for remaining_ms. A held key says its "kind", and
// "holders"; a semaphore its "limit", a read/write lock held by readers
// "shared":true (token is then the newest holder's, remaining_ms the
// longest hold left). A semaphore or read/write lock lists each hold in
// "holds", in grant order: [{"token","remaining_ms","metadata","shared"}]
// (never an owner; up to 4096 in inspect and the oldest 8 per key in a
// list from a cluster node, "holders" counting them all); a slot whose
// session expired with a lock-delay is {"token","remaining_ms","delayed":true}:
// nobody holds it, and it is free once remaining_ms ends. A key held as one of
// a multi-key set names the set's keys in "set_keys" ("set_keys_b64" when
// one is not UTF-8 text); "reserved":true says a free key is kept for a
// multi-key waiter.
//
//	{"key":"pool","locked":true,"token":51,"remaining_ms":9000,"waiters":0,"kind":"semaphore","limit":3,"holders":2,
//	 "holds":[{"token":50,"remaining_ms":4100,"metadata":"pid=7"},{"token":51,"remaining_ms":9000,"metadata":"pid=9"}]}
//
//	curl -s 'localhost:8300/v1/inspect?key=jobs%2Fnightly'
//	{"key":"jobs/nightly","locked":true,"token":42,"remaining_ms":29412,"waiters":1,"metadata":"host=web-3","kind":"mutex","holders":1}
//
// GET /v1/locks?prefix=P&after=A&limit=N lists held keys starting with P and
// sorting after A, in byte order, at most N (and at most Config.ListPageSize)
// per page; "more" says whether to ask again with after set to the page's last
// key, or to "next_after" when the answer has one: a token that may read
// only some keys under P gets only those, and a page that skipped many
// unreadable keys may end early, even empty, with next_after saying where
// to go on. Client.List follows the pages. A store that cannot list (it is
// not a lock.Lister) answers 501 not_implemented.
//
//	curl -s 'localhost:8300/v1/locks?prefix=jobs/&limit=100'
//	{"locks":[{"key":"jobs/nightly","locked":true,"token":42,"remaining_ms":29001,"waiters":1}],"more":false}
//
// Blocking queries (watches), as Consul's: GET /v1/inspect and GET
// /v1/locks given index=N answer once the key (or a key under the prefix)
// changes after index N, or when wait ends (a duration, default 5m, at most
// 10m: a longer one is refused, 400 invalid_wait; plus up to 1/16 of random
// jitter), with the answer's index in the
// X-Raftlock-Index header (IndexHeader); index=0 answers at once with the
// index to start from. The index is the cluster's raft log index, the same
// on every node, so a watcher may move between nodes. No change is missed; a
// wake may be spurious (compare the state); the answer comes from the
// node's own state, so a follower's may lag the leader by its replication
// delay; consistent reads it through the leader once woken. A key watch
// needs read on the key, a list watch read on every key under its prefix.
// Each waiting query holds one HTTP/1.1 connection (kept alive for the
// next one); past the server's maximum (apiserver.Config.MaxWatchers: half
// the agent's -max-http-conns, so that watches never take every connection
// from lock traffic) or the node's (cluster.Config.MaxWatchers, default
// 10,000) a query answers 429 too_many_watchers. Client implements
// lock.Watcher with them (lock.Client.Watch, WatchPrefix).
//
//	curl -si 'localhost:8300/v1/inspect?key=jobs%2Fnightly&index=0' | grep X-Raftlock-Index
//	X-Raftlock-Index: 1187
//	curl -s 'localhost:8300/v1/inspect?key=jobs%2Fnightly&index=1187&wait=30s'   # blocks until it changes
//	{"key":"jobs/nightly","locked":false,"waiters":0}
//
// POST /v1/force-release ends the key's lease whoever holds it and hands
// the key to the next waiter in the same step, as the holder's release
// would: an operator's tool for a lock whose holder is gone. It needs the
// admin right on the key, and the node logs each one at INFO with the
// token's name, the key, the ended lease's fencing token and the caller's
// address. The answer carries that token (never the owner); 409 not_held
// when nobody holds the key. The former holder's extend and release then
// answer not_held. Client.ForceRelease never resends it: a repeat could end
// the next holder's lease.
//
//	curl -s --json '{"key":"jobs/nightly"}' -H "Authorization: Bearer $ADMIN" localhost:8300/v1/force-release
//	{"key":"jobs/nightly","released":true,"token":42}
//
// POST /v1/batch carries several acquires without wait, releases and
// extends (BatchRequest, at most MaxBatchOps): each runs as its own route
// would run it (the same rights, metrics and answers), concurrently with
// the others, and the answer, once all are done, lists each one's status
// and body in order (BatchResponse). A malformed batch is refused whole
// (400) before anything runs; an acquire in a batch that asks to wait gets
// 400 invalid_wait. The Go client sends what its goroutines start while an
// exchange with the node is in flight as one batch, which spares most of
// the CPU HTTP costs per operation (ClientConfig.NoBatch turns it off); a
// node without the route answers 404, and the client then sends the
// operations one by one.
//
//	curl -s --json '{"ops":[{"op":"acquire","body":{"key":"a","ttl":"30s"}},{"op":"release","body":{"key":"b","owner":"9f0c1e…"}}]}' localhost:8300/v1/batch
//	{"results":[{"status":200,"body":{"key":"a","owner":"…","token":43,"ttl_ms":30000,"remaining_ms":30000}},{"status":409,"body":{"error":{"code":"not_held",…}}}]}
//
// GET /v1/stream with "Connection: Upgrade" and "Upgrade: raftlock-stream/1"
// is answered 101 Switching Protocols (426 without those headers), and the
// connection then carries frames: a uvarint length, then a request (uvarint
// id, an operation byte: 1 acquire, 2 release, 3 extend, 4 cancel the id,
// then the JSON body the operation's own route takes) or an answer (uvarint
// id, uvarint HTTP status, the route's JSON answer), answered in any order
// as each is done; acquires may wait. Id 0 from the node is a go-away
// (status, the last id it read, a JSON error): it reads no more, answers
// what it read, and closes. The Go client uses it for acquires that wait
// and for operations that go alone (ClientConfig.NoStream turns it off); a
// node without it answers 404, and the client does not ask again.
//
// GET /v1/whoami names the caller's token and its rules, longest prefix
// first; never its secret (WhoAmIResponse).
//
//	curl -s -H "Authorization: Bearer $TOKEN" localhost:8300/v1/whoami
//	{"name":"billing","rules":[{"prefix":"billing/","right":"lock"},{"prefix":"","right":"read"}]}
//
// GET /v1/cluster is the node's view of its cluster (ClusterStatus): its ID
// and role, the leader, the members with their suffrage and, once they have
// told, their raftlock version and command level (below_leader_level marks
// a member that holds the leader's newer commands back during an upgrade),
// raft indexes and statistics. 404 not_a_cluster when the store is not a
// cluster.
//
//	curl -s localhost:8300/v1/cluster
//	{"node_id":"n1","role":"follower","leader_id":"n2","leader_addr":"10.0.0.8:8301","members":[...],"term":7,...}
//
// POST /v1/leave (no body, or {}: it takes no fields) takes the node out
// of its cluster for good and stops it, when the program serving the API
// offers that (Config.Leave; the agent does): 200 {"status":"left","node_id":...}
// once the leader has removed it, 503 unavailable when no leader could (the
// node stays a member and keeps running), 501 not_implemented otherwise. The
// token applies, and the node logs who asked and from where, as for a
// force-release.
//
//	curl -s -X POST -H 'Content-Type: application/json' localhost:8300/v1/leave
//
// GET /healthz is 200 when the node knows a leader (always, for a store that
// is not a cluster) and 503 no_leader otherwise, so a load balancer sends lock
// traffic only to nodes that can serve it; 503 log_fault while the node
// cannot write its raft log (a full disk: the message says why), whether or
// not it knows a leader; 503 halted
// once the node stopped at a committed entry its version cannot read (the
// message names it and what to install). HEAD works too.
//
//	curl -s -H "Authorization: Bearer $RAFTLOCK_HTTP_TOKEN" localhost:8300/healthz
//	{"status":"ok","node_id":"n1","role":"follower","leader_id":"n2","leader_addr":"10.0.0.8:8301"}
//	curl -s localhost:8300/healthz  # without the token of a node that has one
//	{"status":"ok"}
//
// GET /readyz is 200 when the cluster would survive losing one more node:
// the node knows a leader, the leader judges it healthy, and the leader's
// failure tolerance (healthy voters beyond a majority) is at least one, as
// it has been for a few health checks; 503 not_ready with the reason
// otherwise. A node can serve locks while not ready (one voter of three
// down), so /healthz is for sending traffic and /readyz for rollouts: a
// Kubernetes readinessProbe, which a StatefulSet's rolling update and a
// PodDisruptionBudget wait on. Neither needs the token; without one (on a
// node that has tokens) they tell the status alone, without IDs or reason.
//
//	curl -s localhost:8300/readyz
//	{"status":"ready","node_id":"n1","leader_id":"n2","failure_tolerance":1}
//
// GET /metrics is Prometheus' text format, from a registry of the handler's
// own (Handler.Registry), so several nodes can share a process:
//
//	raftlock_api_operations_total{op,result}          lock operations; op is acquire, acquire_wait
//	                                                  (an acquire that may queue), release, extend,
//	                                                  inspect, list, waiters, force_release,
//	                                                  session_create, session_renew, session_destroy or
//	                                                  session_info; result is ok or the error code
//	                                                  (permission_denied for a denial)
//	                                                  (canceled also when the client went away)
//	raftlock_api_operation_duration_seconds{op}       histogram of the time to answer
//	raftlock_api_waiting_requests                     long-polls in progress on this node
//	raftlock_api_unauthorized_total                   requests refused for a missing or wrong token
//	raftlock_api_conn_limit_reached_total             times the listener had -max-http-conns connections
//	                                                  open and stopped accepting until one closed
//	                                                  (Handler.LimitListener; logged once a minute)
//	raftlock_api_watches_waiting                      blocking queries (watches) waiting on this node
//	raftlock_api_batch_operations                     histogram of operations per POST /v1/batch
//	raftlock_api_streams                              Go clients' binary streams (GET /v1/stream) open
//	raftlock_cluster_has_leader, _is_leader           0 or 1 (cluster only, as everything below)
//	raftlock_cluster_members{suffrage}                voters, nonvoters, staging
//	raftlock_cluster_leader_changes_total             leader changes this node saw
//	raftlock_raft_term, _commit_index, _applied_index
//	raftlock_raft_commit_duration_seconds             summary: proposal to commit, on the leader
//	raftlock_raft_apply_duration_seconds              summary: applying committed entries
//	raftlock_snapshot_freeze_duration_seconds         summary: the copy each snapshot takes while lock operations wait
//	raftlock_locks_held, raftlock_locks_waiters       the state machine as this node sees it
//	raftlock_locks_handoffs_total                     grants to a queued waiter
//	raftlock_locks_expired_total                      leases that ran out
//	raftlock_watchers                                 watches waiting on the node's store (blocking
//	                                                  queries and embedded watchers alike)
//	raftlock_raft_entry_commands                      histogram of commands per raft entry this node
//	                                                  proposed as leader (concurrent commands share one)
//	raftlock_quota_limit{quota}, raftlock_quota_used{quota}  a quota (locks, sessions, waiters) and its use;
//	                                                  no limit sample when unlimited
//	raftlock_quota_refused_total{quota}               requests refused quota_exceeded while leading
//	raftlock_halted                                   1 once this node halted on an entry its version
//	                                                  cannot read (/healthz: halted), else 0
//
// plus the Go runtime's and the process's metrics.
//
// GET /v1/waiters?key=K lists the callers queued for K, next first
// (WaitersResponse): the lease each asked for and how long it will still
// wait, never its owner. It reads the answering node's own state, so it may
// be a moment behind the leader ("stale":true). 501 not_implemented for a
// store that cannot tell (a *cluster.Node can).
//
//	curl -s 'localhost:8300/v1/waiters?key=jobs%2Fnightly'
//	{"key":"jobs/nightly","waiters":[{"position":1,"ttl_ms":30000,"wait_left_ms":8120}],"stale":true}
//
// The web console. /ui/ is a page (HTML, CSS and JavaScript embedded in the
// server, served without the token: it holds no data) that shows the
// cluster, the held locks by prefix (each key's kind, every hold of a
// semaphore or read/write lock, a multi-key lock's set), a key's holds and
// waiters, the live sessions and watches in progress, and the last minutes
// of activity. It reads GET /v1/events, a text/event-stream of one
// ConsoleEvent a second ("data: {...}" lines; ?prefix=P limits the locks;
// only those the token may read), and GET /v1/whoami, whose rules decide
// which keys get a force-release button, with the token the user types
// into the page. The page's own requests are same-origin: Handler
// lets an Origin that is the request's own scheme and Host through, after
// the Host check, so the console needs no Config.AllowedOrigins entry.
//
// GET /v1/openapi.json describes every route, its parameters, bodies,
// answers and error codes as OpenAPI 3.0; a test keeps it in step with the
// handler.
//
// Debugging. GET /v1/agent/config is the serving program's effective
// configuration with secrets redacted, GET /v1/agent/logs its last log lines
// (AgentLogsResponse); both answer 501 not_implemented unless the program
// provides them (the agent does). With profiling on (the agent's
// -enable-pprof), /debug/pprof/ serves Go's net/http/pprof; 404 otherwise.
// All three need the admin right on every key (the prefix ""), as leave
// does; GET /v1/waiters needs the read right on its key.
// raftlock debug collects all of these into one bundle.
//
// # Errors
//
// An error answer is {"error":{"code":C,"message":M}}; clients match on the
// code, which is stable, never on the message. Client turns each code into the
// error in the last column (matched with errors.Is; a *ServerError carries the
// status, code and message).
//
//	status  code               meaning                                            Client error
//	400     bad_request        malformed JSON or query, unknown field or          ErrBadRequest
//	                           parameter, field in another case or given twice,
//	                           lone surrogate escape, body not UTF-8, trailing
//	                           data ("field" names the field at fault)
//	400     https_required     plain HTTP to a node that serves HTTPS             ErrBadRequest
//	400     invalid_key        key missing, empty, longer than lock.MaxKeyLen,    lock.ErrInvalidKey
//	                           bad key_b64, both key and key_b64
//	400     invalid_ttl        ttl missing, malformed, outside                    lock.ErrInvalidTTL
//	                           lock.MinTTL..lock.MaxTTL
//	400     invalid_wait       wait malformed, negative, over the route's most    lock.ErrInvalidWait
//	                           (acquire: lock.MaxWait; watch: lock.MaxWatchWait)
//	400     invalid_owner      owner missing (release, extend), not 32 hex        lock.ErrInvalidOwner
//	                           digits, or zero
//	400     invalid_list       list limit not a positive integer                  lock.ErrInvalidList
//	400     invalid_session    session or id not 32 hex digits or zero, session   lock.ErrInvalidSession
//	                           ttl or lock_delay out of range
//	400     invalid_metadata   metadata over lock.MaxMetadataLen bytes            lock.ErrInvalidMetadata
//	400     invalid_limit      a semaphore's limit outside 1..lock.MaxHolders     lock.ErrInvalidLimit
//	400     invalid_kind       kind unknown, or limit or shared given to a kind   lock.ErrInvalidKind
//	                           without them
//	401     unauthorized       token missing or wrong (Config.Token); nothing     ErrUnauthorized
//	                           was done; every route but /healthz
//	403     host_not_allowed   Host header not a name of the node                 ErrForbidden
//	                           (Config.AllowedHosts)
//	403     origin_not_allowed from a web page of an origin not in                ErrForbidden
//	                           Config.AllowedOrigins
//	403     permission_denied  the token's rules lack the right the route needs   ErrPermissionDenied
//	                           on the key or prefix; nothing was done
//	404     not_found          no such route                                      ErrUnexpectedResponse
//	404     not_a_cluster      /v1/cluster on a store that is not a cluster       ErrNotCluster
//	405     method_not_allowed wrong method; the Allow header has the right one   ErrUnexpectedResponse
//	409     locked             held by another owner; token, remaining_ms         *lock.HeldError
//	                           (reserved: true instead: nobody holds it, it is    (Reserved)
//	                           kept for a waiting multi-key acquire)
//	409     not_held           release or extend by an owner that holds nothing,  release: (false, nil);
//	                           force-release of a key nobody holds                others: lock.ErrNotHeld
//	409     canceled           acquire given up by a release of the same owner    lock.ErrNotHeld
//	409     no_session         the session has ended or never existed (renew,     lock.ErrNoSession;
//	                           destroy, acquire with session)                     destroy: (false, nil)
//	409     kind_mismatch      the key exists as another kind or limit; kind,     *lock.KindMismatchError
//	                           limit
//	413     body_too_large     body over Config.MaxBodyBytes                      ErrBadRequest
//	415     unsupported_media_type  a POST without Content-Type: application/json ErrBadRequest
//	429     queue_full         lock.MaxWaiters already wait for the key           lock.ErrQueueFull
//	429     quota_exceeded     the cluster keeps its maximum of locks,            lock.ErrQuotaExceeded
//	                           of sessions or of waiters (the message says
//	                           which and what to do); acquire, session create
//	429     too_many_in_flight an operation on a stream (GET /v1/stream) past the  (the Go client never
//	                           1,024 it carries at once; nothing was done         sends one: it queues)
//	431     headers_too_large  headers over ServerMaxHeaderBytes                  ErrBadRequest
//	500     internal           a bug; the node's log has more                     ErrInternal
//	501     not_implemented    /v1/locks on a store that cannot list, /v1/leave   errors.ErrUnsupported
//	                           without Config.Leave, /v1/force-release on a
//	                           store that is not a lock.AdminStore, sessions on
//	                           a store without them (not a lock.SessionStore),
//	                           keys on a store that is not a lock.MultiKeyStore
//	501/505 unsupported_protocol  HTTP version or transfer encoding net/http      ErrBadRequest
//	                           does not speak
//	503     unavailable        no leader or no quorum; nothing was done           lock.ErrUnavailable
//	503     unknown_outcome    may or may not have been done: retry with the      lock.ErrUnknownOutcome
//	                           same owner                                         and lock.ErrUnavailable
//	503     closed             the node is shutting down                          lock.ErrClosed
//	503     no_leader          /healthz only                                      (Health.Ready false)
//	503     log_fault          /healthz only: the raft log cannot be written      (Health.Ready false)
//	503     halted             /healthz only: the node stopped at a log entry or  (Health.Ready false)
//	                           snapshot its version cannot read (install the
//	                           version the other members run)
//	503     not_ready          /readyz only: the cluster would not survive        lock.ErrUnavailable
//	                           losing one more node (the reason says why)
//	503     member_too_old     a member runs a raftlock that cannot read the      ErrMemberTooOld
//	                           command (the message names it and the version to
//	                           install); nothing was done
//
// Beyond answers, Client reports a request that never left (connection
// refused, a failed TLS handshake; on every endpoint it knows) as
// lock.ErrUnavailable, and a write whose connection failed after it was sent
// as lock.ErrUnknownOutcome (and lock.ErrUnavailable), once it has tried the
// other endpoints where that is safe (release and extend always, an acquire
// after a stale kept-alive connection: see Client); a 502, 503 or 504 that
// is not a node's JSON (a proxy) counts as the same. A done
// context gives an error matching ctx.Err().
package api
