package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/raftlock/raftlock/lock"
)

// The JSON the API speaks. Server and client share these types, so the two
// cannot drift apart.

// keyFields carries a key in a request body: "key" when it is UTF-8 text,
// "key_b64" (standard base64) when it is arbitrary bytes. Exactly one is given.
type keyFields struct {
	Key    *string `json:"key,omitempty"`
	KeyB64 *string `json:"key_b64,omitempty"`
}

func makeKeyFields(key string) keyFields {
	if utf8.ValidString(key) {
		return keyFields{Key: &key}
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(key))
	return keyFields{KeyB64: &b64}
}

func (k keyFields) key() (string, *apiError) {
	switch {
	case k.Key != nil && k.KeyB64 != nil:
		return "", newAPIError(http.StatusBadRequest, CodeInvalidKey, "api: give key or key_b64, not both")
	case k.Key != nil:
		return *k.Key, nil
	case k.KeyB64 != nil:
		b, err := base64.StdEncoding.DecodeString(*k.KeyB64)
		if err != nil {
			return "", newAPIError(http.StatusBadRequest, CodeInvalidKey, "api: key_b64 is not standard base64: %v", err)
		}
		return string(b), nil
	default:
		return "", newAPIError(http.StatusBadRequest, CodeInvalidKey, "api: key is required (key for UTF-8 text, key_b64 for other bytes)")
	}
}

// keyOut carries a key in a response, the same way keyFields does.
type keyOut struct {
	Key    string `json:"key,omitempty"`
	KeyB64 string `json:"key_b64,omitempty"`
}

func makeKeyOut(key string) keyOut {
	if utf8.ValidString(key) {
		return keyOut{Key: key}
	}
	return keyOut{KeyB64: base64.StdEncoding.EncodeToString([]byte(key))}
}

func (k keyOut) key() (string, error) {
	if k.KeyB64 == "" {
		return k.Key, nil
	}
	b, err := base64.StdEncoding.DecodeString(k.KeyB64)
	if err != nil {
		return "", fmt.Errorf("%w: key_b64: %v", ErrUnexpectedResponse, err)
	}
	return string(b), nil
}

// duration is a JSON string in Go's time.ParseDuration form ("30s", "1m30s",
// "250ms"). Numbers are refused so that "ttl": 30 cannot mean 30ns by
// mistake. A malformed value does not fail the JSON decoding: the error is
// kept, so that the answer can name the field (invalid_ttl, invalid_wait)
// rather than call the whole body malformed.
type duration struct {
	d   time.Duration
	err error
}

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		d.err = fmt.Errorf(`want a duration string like "30s", not %s`, b)
		return nil
	}
	d.d, d.err = time.ParseDuration(s)
	return nil
}

func (d duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.d.String()) }

func durationPtr(d time.Duration) *duration { return &duration{d: d} }

// millisField is a whole number of milliseconds, with the same deferred
// error as duration.
type millisField struct {
	ms  int64
	err error
}

func (m *millisField) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &m.ms); err != nil {
		m.err = fmt.Errorf("want a whole number of milliseconds, not %s", b)
	}
	return nil
}

func (m millisField) MarshalJSON() ([]byte, error) { return json.Marshal(m.ms) }

// maxMillis is the largest millisecond count a time.Duration holds.
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

// durationField reads a duration given as name ("30s") or name_ms (30000);
// at most one of the two may be present. present is false when neither is.
func durationField(name string, s *duration, ms *millisField) (d time.Duration, present bool, err error) {
	switch {
	case s != nil && ms != nil:
		return 0, false, fmt.Errorf("give %s or %s_ms, not both", name, name)
	case s != nil:
		if s.err != nil {
			return 0, false, fmt.Errorf("%s: %w", name, s.err)
		}
		return s.d, true, nil
	case ms != nil:
		if ms.err != nil {
			return 0, false, fmt.Errorf("%s_ms: %w", name, ms.err)
		}
		if ms.ms > maxMillis || ms.ms < -maxMillis {
			return 0, false, fmt.Errorf("%s_ms %d is out of range", name, ms.ms)
		}
		return time.Duration(ms.ms) * time.Millisecond, true, nil
	default:
		return 0, false, nil
	}
}

// acquireRequest is the body of POST /v1/acquire.
type acquireRequest struct {
	keyFields
	TTL    *duration    `json:"ttl,omitempty"`
	TTLMS  *millisField `json:"ttl_ms,omitempty"`
	Wait   *duration    `json:"wait,omitempty"`
	WaitMS *millisField `json:"wait_ms,omitempty"`
	Owner  *string      `json:"owner,omitempty"` // optional: the node mints one when absent
}

// releaseRequest is the body of POST /v1/release.
type releaseRequest struct {
	keyFields
	Owner *string `json:"owner,omitempty"`
}

// extendRequest is the body of POST /v1/extend.
type extendRequest struct {
	keyFields
	Owner *string      `json:"owner,omitempty"`
	TTL   *duration    `json:"ttl,omitempty"`
	TTLMS *millisField `json:"ttl_ms,omitempty"`
}

// leaseResponse answers a granted acquire or an extend.
type leaseResponse struct {
	keyOut
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	TTLMS       int64  `json:"ttl_ms"`
	RemainingMS int64  `json:"remaining_ms"`
}

// releaseResponse answers a release that released.
type releaseResponse struct {
	keyOut
	Released bool `json:"released"`
}

// keyInfo answers GET /v1/inspect and is one entry of GET /v1/locks. It
// never carries the holder's owner.
type keyInfo struct {
	keyOut
	Locked      bool   `json:"locked"`
	Token       uint64 `json:"token,omitempty"`
	RemainingMS int64  `json:"remaining_ms"`
	Waiters     int    `json:"waiters"`
}

func makeKeyInfo(key string, info lock.KeyInfo) keyInfo {
	return keyInfo{
		keyOut:      makeKeyOut(key),
		Locked:      info.Locked,
		Token:       info.Token,
		RemainingMS: millis(info.Remaining),
		Waiters:     info.Waiters,
	}
}

func (k keyInfo) info() lock.KeyInfo {
	return lock.KeyInfo{
		Locked:    k.Locked,
		Token:     k.Token,
		Remaining: time.Duration(k.RemainingMS) * time.Millisecond,
		Waiters:   k.Waiters,
	}
}

// listResponse answers GET /v1/locks.
type listResponse struct {
	Locks []keyInfo `json:"locks"`
	// More: further keys match; ask again with after set to the last key of this page.
	More bool `json:"more"`
}

// healthResponse answers GET /healthz, 200 when ready and 503 when not; the
// 503 also carries the usual "error" object.
// leaveResponse answers POST /v1/leave.
type leaveResponse struct {
	Status string `json:"status"` // "left"
	NodeID string `json:"node_id,omitempty"`
}

type healthResponse struct {
	Status     string       `json:"status"` // "ok", CodeNoLeader or CodeLogFault
	NodeID     string       `json:"node_id,omitempty"`
	Role       string       `json:"role,omitempty"`
	LeaderID   string       `json:"leader_id,omitempty"`
	LeaderAddr string       `json:"leader_addr,omitempty"`
	Error      *errorDetail `json:"error,omitempty"`
}

// readJSON decodes the request body into v (a pointer to a request struct):
// one JSON object, every field name exactly one of v's (letter case
// included) and given once, nothing after it, at most limit bytes, valid
// UTF-8 and no lone surrogate escape (a JSON decoder would silently turn
// either into U+FFFD and so change the key); see checkStrictJSON. It
// reads the body to its end, which also lets net/http notice a client that
// goes away during a long-poll.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) *apiError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return newAPIError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "api: request body is larger than %d bytes", limit)
		}
		return badRequest("api: reading request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("api: request body is empty; want a JSON object")
	}
	if !utf8.Valid(body) {
		return badRequest("api: request body is not valid UTF-8; send keys that are not text as key_b64")
	}
	if e := checkStrictJSON(body, jsonFieldNames(reflect.TypeOf(v).Elem())); e != nil {
		apiErr := badRequest("%s", e.msg)
		apiErr.detail.Field = e.field
		return apiErr
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("api: malformed JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("api: unexpected data after the JSON object")
	}
	return nil
}

// writeJSON writes v with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v) // the client may be gone; nothing useful to do about it
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, errorBody{Error: e.detail})
}

// parseLimit reads a positive decimal limit.
func parseLimit(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("limit must be a positive integer, not %q", s)
	}
	return n, nil
}
