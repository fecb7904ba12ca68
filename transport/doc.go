// Package transport is a raftlock node's network: one TCP listener that
// carries both raft's traffic and the forwarding RPC followers use to hand
// lock commands to the leader.
//
// # One port, two protocols
//
// Every connection starts with one byte naming its protocol, written by the
// dialler right after TCP (and TLS) is up:
//
//	'R'  raft: hashicorp/raft's NetworkTransport protocol follows
//	'F'  forwarding RPC, wire version 1: frames follow
//
// An accepted connection must send that byte, and then raft's first byte
// or the RPC's first frame, within Config.HeaderTimeout of the accept: a
// connection that sends 'R' or 'F' and then nothing is closed, not kept with
// its goroutines forever. A connection that sends an unknown byte, nothing
// in time, or (with TLS) a bad handshake is closed with one log line (debug
// for silence, which port probes cause); the listener keeps serving. At most
// Config.MaxConns accepted connections are open at once: more wait in the
// kernel's backlog, with a warning at most once a minute.
// A new incompatible RPC wire format gets a new byte, so old and new nodes
// tell each other apart at once during a rolling upgrade.
//
// With Config.ServerTLS and ClientTLS set, TLS wraps every connection before
// the first byte, so raft and RPC alike are encrypted and authenticated.
// Peers are trusted cluster members: a connection may run any number of
// handlers at once, so authenticate peers with mutual TLS wherever the
// network is not trusted.
//
// # The RPC
//
// Call sends a request to a peer and waits for its answer. Frames are
//
//	type (1 byte) | request ID (8 bytes, big endian) | body length (4 bytes, big endian) | body
//
// of type request, response, error (body: a code byte and a message) or
// cancel (empty body). A body is at most MaxFrameSize bytes; a peer that
// sends a larger or malformed frame has its connection closed with a log
// line, and the caller of an oversized request gets ErrTooLarge without
// anything being sent.
//
// Requests are pipelined: one connection carries many calls at once, one
// writer goroutine sends what is queued in a single flush, one reader routes
// answers to their calls by ID, and the server runs each request's handler
// on its own goroutine, so answers come back in any order and a waiting
// acquire never holds up the requests behind it. When a caller's ctx ends,
// Call returns at once and sends a cancel frame; the handler's ctx ends. The
// handler's ctx also ends when the connection drops or the transport closes.
// Connections are pooled per peer, and a dead one is replaced on the next
// call, so a restarted peer is reached again without the caller doing
// anything.
//
// Errors tell the caller what it may do next, as an etcd or Consul client
// would want: ErrNotSent means the peer certainly never saw the request (safe
// to retry anywhere), ErrConnLost means it may have (retry only if the
// command is idempotent, which raftlock's are per owner), ErrRemote carries
// the handler's error text, and a done ctx gives ctx.Err().
//
// # Lifetime
//
// Close stops the listener, closes every connection, fails calls in flight
// with ErrClosed, cancels running handlers' contexts, and returns only when
// every goroutine the transport started has ended — handlers included, so a
// handler must return once its ctx is done. After Close, nothing the
// transport started touches the node's state. StreamLayer's Close closes the
// raft side only. Connection pooling, the hello frame, idle timeouts and
// write deadlines are described in client.go and server.go.
//
// # Dial and listen hooks
//
// Config.Dial and Config.Listen, when set, make the TCP connections and the
// listener, below TLS and the framing: the two places connections are made.
// The tests' fault table (internal/faultnet) plugs in there.
package transport
