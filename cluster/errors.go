package cluster

import (
	"errors"

	"github.com/raftlock/raftlock/cluster/internal/membership"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/internal/errcode"
)

// Errors of this package; match them with errors.Is. Lock operations report
// the lock package's sentinels instead (lock.ErrUnavailable, lock.ErrClosed,
// lock.ErrUnknownOutcome, ...), because a Node is a lock.Store.
var (
	// ErrInvalidConfig: Config.Validate or New found a problem with the Config.
	// Most such errors are a *ConfigError, which names the field at fault.
	ErrInvalidConfig = errors.New("cluster: invalid config")
	// ErrJoin: a node with a fresh data dir could not get a running member to add it.
	ErrJoin = membership.ErrJoin
	// ErrBadRequest: a forwarded request could not be decoded or is not allowed.
	ErrBadRequest = nodewire.ErrBadRequest
	// ErrLogFault: the only voter cannot write its raft log (a full disk,
	// say), so nothing can commit until a write succeeds; lock calls on it
	// fail at once with an error that matches it and lock.ErrUnavailable,
	// and says why and what to do (Stats.LogFault says it too).
	ErrLogFault = errors.New("cluster: log_fault: the raft log cannot be written")
	// ErrMemberTooOld: a member of the cluster runs a raftlock build that
	// cannot read the command (a rolling upgrade is under way, or one
	// member was left behind); nothing was done. The error names the
	// member and the version to install on it; the command works once
	// every member reads it. The HTTP client reports it as
	// api.ErrMemberTooOld, the same error.
	ErrMemberTooOld = errcode.ErrMemberTooOld
)

// Internal outcomes of one attempt, which the retry loop in forward.go tells apart.
var (
	// errNotLeader: the request reached no leader and certainly took no effect.
	errNotLeader = nodewire.ErrNotLeader
	// errLostLeadership: the request was proposed, but leadership was lost
	// before it committed; it may still take effect.
	errLostLeadership = nodewire.ErrLostLeadership
	// errShuttingDown: the node serving the request is shutting down.
	errShuttingDown = nodewire.ErrShuttingDown
	// errLeaderRemovesItself: a leaving node became leader again after
	// handing leadership over; it stays a member (Leave says why).
	errLeaderRemovesItself = membership.ErrLeaderRemovesItself
)
