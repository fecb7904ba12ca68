package transport

import "errors"

// Errors a Call (and the stream layer) may return; match them with errors.Is.
// One error may match several: a call cut short by Close matches ErrClosed and
// also ErrNotSent or ErrConnLost, telling whether the request went out; a call
// whose ctx ended before its request was written matches ErrNotSent and
// ctx.Err().
var (
	// ErrNotSent: the request certainly never reached the peer (dial refused or
	// timed out, transport closed before writing). Safe to retry anywhere.
	ErrNotSent = errors.New("transport: request not sent")
	// ErrConnLost: the connection failed after the request was written; the
	// peer may or may not have handled it.
	ErrConnLost = errors.New("transport: connection lost")
	// ErrClosed: this transport (or, for the stream layer, its raft side) was closed.
	ErrClosed = errors.New("transport: closed")
	// ErrRemote: the peer's handler returned an error; its text follows.
	ErrRemote = errors.New("transport: remote error")
	// ErrTooLarge: a frame exceeds MaxFrameSize.
	ErrTooLarge = errors.New("transport: frame too large")
	// ErrNotPeer: what answers at the address is not a raftlock peer this
	// transport can talk to: an HTTP server (such as a raftlock agent's API
	// port), or a peer that speaks TLS to a transport without ClientTLS. The
	// error says which. Calls fail with it at once rather than waiting for
	// their ctx; it also matches ErrNotSent (nothing there acted on the
	// request).
	ErrNotPeer = errors.New("transport: not a raftlock peer")
)

// errProtocol marks a peer that broke the wire format; its connection is
// closed. Internal: callers see ErrConnLost for their calls on that connection.
var errProtocol = errors.New("transport: protocol violation")
