package nodewire

import "errors"

// The errors a node RPC attempt fails with (see replyErrors). Package
// cluster exports ErrBadRequest and ErrWrongCluster as its own (the same
// values), and tells the others apart in its retry loop.
var (
	// ErrBadRequest: a request or reply could not be decoded, or the
	// request is not allowed; retrying will not help.
	ErrBadRequest = errors.New("cluster: bad request")
	// ErrNotLeader: the request reached no leader and certainly took no effect.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrLostLeadership: the request was proposed, but leadership was lost
	// before it committed; it may still take effect.
	ErrLostLeadership = errors.New("cluster: leadership lost while committing")
	// ErrShuttingDown: the node serving the request is shutting down (what
	// the serving node says).
	ErrShuttingDown = errors.New("cluster: node shutting down")
	// ErrLeaderClosing: the leader answered that it is shutting down (what
	// the asking node's attempt fails with); the outcome is unknown.
	ErrLeaderClosing = errors.New("cluster: leader shutting down")
	// ErrLeaderUnavailable: the leader could not serve the request now
	// (CodeUnavailable; a configuration change failed, say).
	ErrLeaderUnavailable = errors.New("cluster: leader")
	// ErrWrongCluster: the leader refused to add a node whose data dir
	// belongs to another cluster.
	ErrWrongCluster = errors.New("cluster: data dir belongs to another cluster")
)
