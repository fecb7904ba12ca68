package lockhttp

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/raftlock/raftlock/internal/errcode"
	"github.com/raftlock/raftlock/lock"
)

// body is the JSON the default responses write.
type body struct {
	Error string `json:"error"`           // locked, unavailable, invalid_key, internal
	Key   string `json:"key,omitempty"`   // the lock's key
	Token uint64 `json:"token,omitempty"` // the holder's fencing token, when locked and known
	// Reserved, when locked: nobody holds the key; it is kept for a
	// waiting multi-key acquire.
	Reserved bool `json:"reserved,omitempty"`
}

// WriteLocked is the default OnLocked response: 409 Conflict with
// {"error":"locked","key":...,"token":...} ("reserved":true and no token for
// a key nobody holds that is kept for a waiting multi-key acquire). An
// OnLocked function may call it
// after setting headers of its own (Retry-After, for instance).
func WriteLocked(w http.ResponseWriter, r *http.Request, held *lock.HeldError) {
	b := body{Error: errcode.Locked}
	if held != nil {
		b.Key, b.Token, b.Reserved = held.Key, held.Token, held.Reserved
	}
	writeJSON(w, http.StatusConflict, b)
}

// WriteError is the default OnError response: 400 {"error":"invalid_key"}
// for a key the store refuses, 500 {"error":"internal"} for a misconfigured
// middleware (a TTL or Wait out of range, a nil argument), and
// 503 {"error":"unavailable"} for everything else: the store could not answer,
// or the request's context ended while it waited. The codes are those the
// HTTP API gives the same lock errors. The error's text is not sent: it may
// name internal hosts.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	switch code := errcode.Of(err); {
	case code == errcode.InvalidKey:
		writeJSON(w, http.StatusBadRequest, body{Error: code})
	case code == errcode.InvalidTTL, code == errcode.InvalidWait, errors.Is(err, ErrNilArgument):
		writeJSON(w, http.StatusInternalServerError, body{Error: "internal"})
	default:
		// lock.ErrUnavailable, ErrUnknownOutcome, ErrQueueFull,
		// ErrQuotaExceeded, ErrClosed, a transport error of a remote store,
		// or the request's context: all mean "not now", and a retry may
		// succeed.
		writeJSON(w, http.StatusServiceUnavailable, body{Error: errcode.Unavailable})
	}
}

func writeJSON(w http.ResponseWriter, status int, b body) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(b) // the client may be gone; nothing to do about it
}
