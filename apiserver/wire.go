package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/errcode"
	"github.com/raftlock/raftlock/internal/httpwire"
	"github.com/raftlock/raftlock/lock"
)

// apiError is an error answer the handler is about to write.
type apiError struct {
	status int
	detail api.ErrorDetail
}

func (e *apiError) Error() string { return e.detail.Message }

func newAPIError(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, detail: api.ErrorDetail{Code: code, Message: fmt.Sprintf(format, args...)}}
}

func badRequest(format string, args ...any) *apiError {
	return newAPIError(http.StatusBadRequest, api.CodeBadRequest, format, args...)
}

// storeError turns what a lock.Store returned into the answer for the
// client: the lock error's code (errcode.Of) with its status. write says
// whether the operation changes state, so that a timeout reads as "outcome
// unknown" for writes and "unavailable" for reads.
func storeError(err error, write bool) *apiError {
	if code := errcode.Of(err); code != "" {
		e := newAPIError(lockCodeStatus[code], code, "%s", err.Error())
		if held := (*lock.HeldError)(nil); errors.As(err, &held) && held.Reserved {
			e.detail.Reserved = true
		} else if held != nil {
			e.detail.Token = held.Token
			ms := api.Millis(held.Remaining)
			e.detail.RemainingMS = &ms
		}
		if mismatch := (*lock.KindMismatchError)(nil); errors.As(err, &mismatch) {
			e.detail.Kind, e.detail.Limit = mismatch.Kind.String(), mismatch.Limit
		}
		return e
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		// The handler's own time limit ran out inside the store.
		if write {
			return newAPIError(http.StatusServiceUnavailable, api.CodeUnknownOutcome, "api: the node did not answer in time: %v", err)
		}
		return newAPIError(http.StatusServiceUnavailable, api.CodeUnavailable, "api: the node did not answer in time: %v", err)
	case errors.Is(err, context.Canceled):
		// The client went away: nobody reads this but the metrics.
		return newAPIError(http.StatusConflict, api.CodeCanceled, "api: request canceled: %v", err)
	default:
		return newAPIError(http.StatusInternalServerError, api.CodeInternal, "api: %v", err)
	}
}

// lockCodeStatus is the HTTP status of each lock error code: a line per
// code (a test checks that every errcode.All has one).
var lockCodeStatus = map[string]int{
	errcode.Locked:         http.StatusConflict,
	errcode.NotHeld:        http.StatusConflict,
	errcode.InvalidKey:     http.StatusBadRequest,
	errcode.InvalidTTL:     http.StatusBadRequest,
	errcode.InvalidWait:    http.StatusBadRequest,
	errcode.InvalidOwner:   http.StatusBadRequest,
	errcode.InvalidList:    http.StatusBadRequest,
	errcode.QueueFull:      http.StatusTooManyRequests,
	errcode.UnknownOutcome: http.StatusServiceUnavailable,
	errcode.Closed:         http.StatusServiceUnavailable,
	errcode.Unavailable:    http.StatusServiceUnavailable,

	errcode.InvalidSession:  http.StatusBadRequest,
	errcode.InvalidMetadata: http.StatusBadRequest,
	errcode.NoSession:       http.StatusConflict,
	// A kind mismatch conflicts with the key's state, not with the
	// request's form: the same acquire succeeds once the key is gone.
	errcode.KindMismatch: http.StatusConflict,
	errcode.InvalidLimit: http.StatusBadRequest,
	errcode.InvalidKind:  http.StatusBadRequest,

	errcode.TooManyWatchers: http.StatusTooManyRequests,

	// 429, as etcd's "database space exceeded" (gRPC RESOURCE_EXHAUSTED,
	// which HTTP gateways answer 429) and as queue_full: the request is
	// well formed, and the same one succeeds once state is freed. (507 is
	// WebDAV's, and says nothing to a client's retry policy.)
	errcode.QuotaExceeded: http.StatusTooManyRequests,
	// Not the request's fault, nor the key's: the cluster cannot do it
	// until its upgrade is complete, and will then (as 503 says of a
	// service that is temporarily unable). Nothing was done.
	errcode.MemberTooOld: http.StatusServiceUnavailable,
}

// readJSON decodes the request body into v (a pointer to a request struct):
// one JSON object, every field name exactly one of v's (letter case
// included) and given once, nothing after it, at most limit bytes, valid
// UTF-8 and no lone surrogate escape (a JSON decoder would silently turn
// either into U+FFFD and so change the key); see decodeStrict. It
// reads the body to its end, which also lets net/http notice a client that
// goes away during a long-poll.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) *apiError {
	body, e := readLimited(w, r, limit)
	if e != nil {
		return e
	}
	return decodeBody(body, v)
}

// readNoFields reads the body of a route that takes no fields (POST
// /v1/leave): none at all, as clients send, or a JSON object without fields
// ({}), under the same rules and limit as readJSON. Anything else is
// refused, so that a caller who thinks it passes an option learns it does
// not before the route acts.
func readNoFields(w http.ResponseWriter, r *http.Request, limit int64) *apiError {
	body, e := readLimited(w, r, limit)
	if e != nil || len(bytes.TrimSpace(body)) == 0 {
		return e
	}
	var none struct{}
	return decodeBody(body, &none)
}

// readLimited reads the whole request body, at most limit bytes (413 past it).
func readLimited(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apiError) {
	body, err := readBody(w, r, limit)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, newAPIError(http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, "api: request body is larger than %d bytes", limit)
		}
		return nil, badRequest("api: reading request body: %v", err)
	}
	return body, nil
}

// decodeBody decodes a request body already read (readJSON's, or a batched
// or streamed operation's) into v: a JSON object of v's fields and nothing
// else, as readJSON says.
func decodeBody(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("api: request body is empty; want a JSON object")
	}
	if !utf8.Valid(body) {
		return badRequest("api: request body is not valid UTF-8; send keys that are not text as key_b64")
	}
	if httpwire.DecodeFast(body, v) {
		return nil // what decodeStrict would decode, without its cost
	}
	if e := decodeStrict(body, v); e != nil {
		apiErr := badRequest("%s", e.msg)
		apiErr.detail.Field = e.field
		return apiErr
	}
	return nil
}

// writeJSON writes v with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if b, ok := httpwire.AppendAnswer(make([]byte, 0, 160), v); ok {
		_, _ = w.Write(append(b, '\n')) // what the encoder below writes
		return
	}
	enc := json.NewEncoder(w)
	_ = enc.Encode(v) // the client may be gone; nothing useful to do about it
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, api.ErrorBody{Error: e.detail})
}

// parseLimit reads a positive decimal limit.
func parseLimit(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("limit must be a positive integer, not %q", s)
	}
	return n, nil
}
