package api

import (
	"errors"
	"fmt"

	"github.com/raftlock/raftlock/internal/errcode"
	"github.com/raftlock/raftlock/internal/httpwire"
	"github.com/raftlock/raftlock/lock"
)

// Errors the client reports beyond the lock sentinels; match with errors.Is.
var (
	// ErrBadRequest: the node rejected the request's form (malformed JSON,
	// unknown field or parameter, body too large), or its transport (plain
	// HTTP to a node that serves HTTPS: code https_required). The Client
	// never sends malformed requests; seeing it otherwise means a version
	// mismatch or a bug.
	ErrBadRequest = errors.New("api: bad request")
	// ErrNotCluster: the node's store is not a cluster, so it has no cluster view.
	ErrNotCluster = errors.New("api: not a cluster")
	// ErrInternal: the node failed in a way it did not expect (a bug; its log
	// says more). Whether a write took effect is not known.
	ErrInternal = errors.New("api: node failed")
	// ErrUnexpectedResponse: the answer was not one a raftlock node gives
	// (unknown status or code, not JSON): a proxy in the way, or another server.
	ErrUnexpectedResponse = httpwire.ErrUnexpectedResponse
	// ErrUnauthorized: the node requires a token (apiserver.Config.Token) and the
	// request carried none, or the wrong one (ClientConfig.Token). Nothing
	// was done.
	ErrUnauthorized = errors.New("api: unauthorized")
	// ErrMemberTooOld: a member of the cluster runs a raftlock build that
	// cannot read the command (upgrade it); nothing was done. It is the
	// cluster's own error (cluster.ErrMemberTooOld), so either matches.
	ErrMemberTooOld = errcode.ErrMemberTooOld
)

// Error codes, stable across versions: clients match on them, never on
// messages. doc.go lists them with their HTTP status.
const (
	CodeBadRequest       = "bad_request"           // 400: malformed JSON, unknown field or parameter, key not UTF-8 in "key"
	CodeInvalidKey       = errcode.InvalidKey      // 400: key missing, empty or too long
	CodeInvalidTTL       = errcode.InvalidTTL      // 400: ttl missing, malformed, not positive or too long
	CodeInvalidWait      = errcode.InvalidWait     // 400: wait malformed, negative or too long
	CodeInvalidOwner     = errcode.InvalidOwner    // 400: owner missing (release, extend), not 32 hex digits, or zero
	CodeInvalidList      = errcode.InvalidList     // 400: list limit not a positive integer
	CodeInvalidSession   = errcode.InvalidSession  // 400: session id not 32 hex digits or zero, session ttl or lock_delay out of range
	CodeInvalidMetadata  = errcode.InvalidMetadata // 400: metadata longer than lock.MaxMetadataLen bytes
	CodeNoSession        = errcode.NoSession       // 409: the session has ended (expired or destroyed) or never existed
	CodeKindMismatch     = errcode.KindMismatch    // 409: the key exists as another kind (or a semaphore of another limit); carries kind and limit
	CodeInvalidLimit     = errcode.InvalidLimit    // 400: a semaphore's limit outside 1..lock.MaxHolders
	CodeInvalidKind      = errcode.InvalidKind     // 400: kind unknown, or limit or shared given to a kind without them
	CodeBodyTooLarge     = "body_too_large"        // 413: request body over the limit
	CodeLocked           = errcode.Locked          // 409: held by another owner; carries token and remaining_ms
	CodeNotHeld          = errcode.NotHeld         // 409: release/extend by an owner that does not hold the key
	CodeCanceled         = "canceled"              // 409: acquire given up by a release of the same owner (or its client went away)
	CodeQueueFull        = errcode.QueueFull       // 429: too many waiters for the key
	CodeTooManyWatchers  = errcode.TooManyWatchers // 429: the node serves its maximum of blocking queries (watches)
	CodeQuotaExceeded    = errcode.QuotaExceeded   // 429: the cluster keeps its maximum of locks, sessions or waiters (the message says which)
	CodeTooManyInFlight  = "too_many_in_flight"    // 429: an operation on GET /v1/stream past the operations a stream carries at once; nothing was done
	CodeUnavailable      = errcode.Unavailable     // 503: no leader, no quorum; did not take effect
	CodeUnknownOutcome   = errcode.UnknownOutcome  // 503: may or may not have taken effect; retry with the same owner
	CodeClosed           = errcode.Closed          // 503: the node is shutting down
	CodeNoLeader         = "no_leader"             // 503: /healthz while no leader is known
	CodeLogFault         = "log_fault"             // 503: /healthz while the node cannot write its raft log (a full disk)
	CodeNotCluster       = "not_a_cluster"         // 404: /v1/cluster on a node whose store is not a cluster
	CodeNotFound         = "not_found"             // 404: unknown route
	CodeNotImplemented   = "not_implemented"       // 501: /v1/locks on a node whose store cannot list
	CodeMethodNotAllowed = "method_not_allowed"    // 405: known route, wrong method (Allow header lists the right one)
	CodeInternal         = "internal"              // 500: a bug; the message says what
	CodeUnauthorized     = "unauthorized"          // 401: token missing or wrong (apiserver.Config.Token); nothing was done
	CodeNotReady         = "not_ready"             // 503: /readyz while the cluster would not survive losing one more node
	CodeMemberTooOld     = errcode.MemberTooOld    // 503: a member's raftlock cannot read the command (upgrade it); nothing was done
	CodeHalted           = "halted"                // 503: /healthz of a node that stopped at a log entry its version cannot read

	// Answers net/http gives by itself, made JSON by JSONErrorListener.
	CodeHeadersTooLarge     = "headers_too_large"    // 431: request headers over the server's MaxHeaderBytes
	CodeUnsupportedProtocol = "unsupported_protocol" // 505: HTTP version other than 1.x (or 2 over TLS); 501: unknown transfer encoding
	CodeHTTPSRequired       = "https_required"       // 400: plain HTTP sent to a node that serves HTTPS
)

// Codes of the browser guard (apiserver.Config.AllowedHosts and
// AllowedOrigins); doc.go lists them with the others.
const (
	CodeHostNotAllowed   = "host_not_allowed"       // 403: Host header names no name of this node (DNS rebinding)
	CodeOriginNotAllowed = "origin_not_allowed"     // 403: a browser page of an origin not in apiserver.Config.AllowedOrigins
	CodeUnsupportedMedia = "unsupported_media_type" // 415: a POST without Content-Type: application/json
)

// ErrForbidden: the node refused the request before looking at it: its Host
// header is not one of the node's names (apiserver.Config.AllowedHosts; the agent's
// -allowed-hosts), or it came from a browser page whose origin is not
// allowed (apiserver.Config.AllowedOrigins; -allowed-origins). Nothing was done.
var ErrForbidden = errors.New("api: forbidden")

// TokenHeader carries the API token for clients that cannot set
// Authorization (like Consul's X-Consul-Token). "Authorization: Bearer
// <token>" works everywhere and is what Client sends.
const TokenHeader = "X-Raftlock-Token"

// ServerError is an error answer from a node that has no better Go form than
// its sentinels. errors.Is matches it against the lock sentinels its code
// stands for (lock.ErrInvalidTTL for invalid_ttl, both lock.ErrUnknownOutcome
// and lock.ErrUnavailable for unknown_outcome, ...). A held key comes back as
// *lock.HeldError instead, and a release that did not hold as (false, nil).
type ServerError struct {
	StatusCode int    // HTTP status
	Code       string // one of the Code constants, or what an unknown server said
	Message    string // the node's message, for people
}

func (e *ServerError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("api: node answered %d: %s", e.StatusCode, e.Message)
	}
	return fmt.Sprintf("api: node answered %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// Unwrap lists the sentinels the code stands for.
func (e *ServerError) Unwrap() []error { return codeSentinels(e.Code) }

func codeSentinels(code string) []error {
	if errs := errcode.Errors(code); errs != nil {
		return errs
	}
	if err, ok := codeErrors[code]; ok {
		return []error{err}
	}
	return []error{ErrUnexpectedResponse}
}

// codeErrors maps the codes that are not lock errors (package errcode) to what they match:
// a line per code.
var codeErrors = map[string]error{
	CodeBadRequest:          ErrBadRequest,
	CodeBodyTooLarge:        ErrBadRequest,
	CodeHeadersTooLarge:     ErrBadRequest,
	CodeUnsupportedProtocol: ErrBadRequest,
	CodeHTTPSRequired:       ErrBadRequest,
	CodeUnsupportedMedia:    ErrBadRequest,
	CodeCanceled:            lock.ErrNotHeld,
	CodeNoLeader:            lock.ErrUnavailable,
	CodeLogFault:            lock.ErrUnavailable,
	CodeHalted:              lock.ErrUnavailable,
	CodeNotReady:            lock.ErrUnavailable,
	CodeNotCluster:          ErrNotCluster,
	CodeNotImplemented:      errors.ErrUnsupported,
	CodeInternal:            ErrInternal,
	CodeUnauthorized:        ErrUnauthorized,
	CodePermissionDenied:    ErrPermissionDenied,
	CodeHostNotAllowed:      ErrForbidden,
	CodeOriginNotAllowed:    ErrForbidden,
}

// ValidateToken reports why token cannot serve as an API token, or nil. A
// token is sent in a header, so it must be visible ASCII: no spaces, no
// control characters, as RFC 6750 bearer tokens are. (An empty token turns
// the check off; ValidateToken accepts it.) A long random token, such as 32
// bytes from crypto/rand in hex or base64, is what to use.
func ValidateToken(token string) error {
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("api: token holds byte %#02x at offset %d: want visible ASCII without spaces", c, i)
		}
	}
	return nil
}
