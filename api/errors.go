package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

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
	ErrUnexpectedResponse = errors.New("api: unexpected response")
	// ErrUnauthorized: the node requires a token (Config.Token) and the
	// request carried none, or the wrong one (ClientConfig.Token). Nothing
	// was done.
	ErrUnauthorized = errors.New("api: unauthorized")
)

// Error codes, stable across versions: clients match on them, never on
// messages. doc.go lists them with their HTTP status.
const (
	CodeBadRequest       = "bad_request"        // 400: malformed JSON, unknown field or parameter, key not UTF-8 in "key"
	CodeInvalidKey       = "invalid_key"        // 400: key missing, empty or too long
	CodeInvalidTTL       = "invalid_ttl"        // 400: ttl missing, malformed, not positive or too long
	CodeInvalidWait      = "invalid_wait"       // 400: wait malformed, negative or too long
	CodeInvalidOwner     = "invalid_owner"      // 400: owner missing (release, extend), not 32 hex digits, or zero
	CodeInvalidList      = "invalid_list"       // 400: list limit not a positive integer
	CodeBodyTooLarge     = "body_too_large"     // 413: request body over the limit
	CodeLocked           = "locked"             // 409: held by another owner; carries token and remaining_ms
	CodeNotHeld          = "not_held"           // 409: release/extend by an owner that does not hold the key
	CodeCanceled         = "canceled"           // 409: acquire given up by a release of the same owner (or its client went away)
	CodeQueueFull        = "queue_full"         // 429: too many waiters for the key
	CodeUnavailable      = "unavailable"        // 503: no leader, no quorum; did not take effect
	CodeUnknownOutcome   = "unknown_outcome"    // 503: may or may not have taken effect; retry with the same owner
	CodeClosed           = "closed"             // 503: the node is shutting down
	CodeNoLeader         = "no_leader"          // 503: /healthz while no leader is known
	CodeLogFault         = "log_fault"          // 503: /healthz while the node cannot write its raft log (a full disk)
	CodeNotCluster       = "not_a_cluster"      // 404: /v1/cluster on a node whose store is not a cluster
	CodeNotFound         = "not_found"          // 404: unknown route
	CodeNotImplemented   = "not_implemented"    // 501: /v1/locks on a node whose store cannot list
	CodeMethodNotAllowed = "method_not_allowed" // 405: known route, wrong method (Allow header lists the right one)
	CodeInternal         = "internal"           // 500: a bug; the message says what
	CodeUnauthorized     = "unauthorized"       // 401: token missing or wrong (Config.Token); nothing was done

	// Answers net/http gives by itself, made JSON by JSONErrorListener.
	CodeHeadersTooLarge     = "headers_too_large"    // 431: request headers over the server's MaxHeaderBytes
	CodeUnsupportedProtocol = "unsupported_protocol" // 505: HTTP version other than 1.x (or 2 over TLS); 501: unknown transfer encoding
	CodeHTTPSRequired       = "https_required"       // 400: plain HTTP sent to a node that serves HTTPS
)

// errorBody is the JSON form of every error answer:
//
//	{"error":{"code":"locked","message":"...","token":41,"remaining_ms":2950}}
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the request body's field at fault, for a bad_request
	// about a field (unknown, misspelt in letter case, given twice).
	Field string `json:"field,omitempty"`
	// Set with CodeLocked (and CodeQueueFull): the holder's fencing token and
	// lease left; never the holder's owner.
	Token       uint64 `json:"token,omitempty"`
	RemainingMS *int64 `json:"remaining_ms,omitempty"`
}

// apiError is an error answer the handler is about to write.
type apiError struct {
	status int
	detail errorDetail
}

func (e *apiError) Error() string { return e.detail.Message }

func newAPIError(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, detail: errorDetail{Code: code, Message: fmt.Sprintf(format, args...)}}
}

func badRequest(format string, args ...any) *apiError {
	return newAPIError(http.StatusBadRequest, CodeBadRequest, format, args...)
}

// storeError turns what a lock.Store returned into the answer for the
// client. write says whether the operation changes state, so that a timeout
// reads as "outcome unknown" for writes and "unavailable" for reads.
func storeError(err error, write bool) *apiError {
	var held *lock.HeldError
	switch {
	case errors.As(err, &held):
		e := newAPIError(http.StatusConflict, CodeLocked, "%s", err.Error())
		e.detail.Token = held.Token
		ms := millis(held.Remaining)
		e.detail.RemainingMS = &ms
		return e
	case errors.Is(err, lock.ErrLocked):
		return newAPIError(http.StatusConflict, CodeLocked, "%s", err.Error())
	case errors.Is(err, lock.ErrNotHeld):
		return newAPIError(http.StatusConflict, CodeNotHeld, "%s", err.Error())
	case errors.Is(err, lock.ErrInvalidKey):
		return newAPIError(http.StatusBadRequest, CodeInvalidKey, "%s", err.Error())
	case errors.Is(err, lock.ErrInvalidTTL):
		return newAPIError(http.StatusBadRequest, CodeInvalidTTL, "%s", err.Error())
	case errors.Is(err, lock.ErrInvalidWait):
		return newAPIError(http.StatusBadRequest, CodeInvalidWait, "%s", err.Error())
	case errors.Is(err, lock.ErrInvalidOwner):
		return newAPIError(http.StatusBadRequest, CodeInvalidOwner, "%s", err.Error())
	case errors.Is(err, lock.ErrInvalidList):
		return newAPIError(http.StatusBadRequest, CodeInvalidList, "%s", err.Error())
	case errors.Is(err, lock.ErrQueueFull):
		return newAPIError(http.StatusTooManyRequests, CodeQueueFull, "%s", err.Error())
	// Unknown outcome before unavailable: an error may match both, and the
	// more cautious answer wins.
	case errors.Is(err, lock.ErrUnknownOutcome):
		return newAPIError(http.StatusServiceUnavailable, CodeUnknownOutcome, "%s", err.Error())
	case errors.Is(err, lock.ErrClosed):
		return newAPIError(http.StatusServiceUnavailable, CodeClosed, "%s", err.Error())
	case errors.Is(err, lock.ErrUnavailable):
		return newAPIError(http.StatusServiceUnavailable, CodeUnavailable, "%s", err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		// The handler's own time limit ran out inside the store.
		if write {
			return newAPIError(http.StatusServiceUnavailable, CodeUnknownOutcome, "api: the node did not answer in time: %v", err)
		}
		return newAPIError(http.StatusServiceUnavailable, CodeUnavailable, "api: the node did not answer in time: %v", err)
	case errors.Is(err, context.Canceled):
		// The client went away: nobody reads this but the metrics.
		return newAPIError(http.StatusConflict, CodeCanceled, "api: request canceled: %v", err)
	default:
		return newAPIError(http.StatusInternalServerError, CodeInternal, "api: %v", err)
	}
}

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
	switch code {
	case CodeBadRequest, CodeBodyTooLarge, CodeHeadersTooLarge, CodeUnsupportedProtocol, CodeHTTPSRequired:
		return []error{ErrBadRequest}
	case CodeInvalidKey:
		return []error{lock.ErrInvalidKey}
	case CodeInvalidTTL:
		return []error{lock.ErrInvalidTTL}
	case CodeInvalidWait:
		return []error{lock.ErrInvalidWait}
	case CodeInvalidOwner:
		return []error{lock.ErrInvalidOwner}
	case CodeInvalidList:
		return []error{lock.ErrInvalidList}
	case CodeLocked:
		return []error{lock.ErrLocked}
	case CodeNotHeld, CodeCanceled:
		return []error{lock.ErrNotHeld}
	case CodeQueueFull:
		return []error{lock.ErrQueueFull}
	case CodeUnavailable, CodeNoLeader, CodeLogFault:
		return []error{lock.ErrUnavailable}
	case CodeUnknownOutcome:
		return []error{lock.ErrUnknownOutcome, lock.ErrUnavailable}
	case CodeClosed:
		return []error{lock.ErrClosed}
	case CodeNotCluster:
		return []error{ErrNotCluster}
	case CodeNotImplemented:
		return []error{errors.ErrUnsupported}
	case CodeInternal:
		return []error{ErrInternal}
	case CodeUnauthorized:
		return []error{ErrUnauthorized}
	case CodeHostNotAllowed, CodeOriginNotAllowed:
		return []error{ErrForbidden}
	case CodeUnsupportedMedia:
		return []error{ErrBadRequest}
	default:
		return []error{ErrUnexpectedResponse}
	}
}

// millis is d in whole milliseconds, rounded down: a remaining time must
// never be overstated.
func millis(d time.Duration) int64 {
	if d < 0 {
		return 0
	}
	return int64(d / time.Millisecond)
}
