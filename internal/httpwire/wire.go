package httpwire

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/raftlock/raftlock/lock"
)

// ErrUnexpectedResponse: the answer was not one a raftlock node gives
// (unknown status or code, not JSON): a proxy in the way, or another
// server. Package api exports it under the same name.
var ErrUnexpectedResponse = errors.New("api: unexpected response")

// The JSON the API speaks. Server and client share these types (package
// api names them by aliases), so the two cannot drift apart.

// KeyFields carries a key in a request body: "key" when it is UTF-8 text,
// "key_b64" (standard base64) when it is arbitrary bytes. Exactly one is given.
type KeyFields struct {
	Key    *string `json:"key,omitempty"`
	KeyB64 *string `json:"key_b64,omitempty"`
}

// MakeKeyFields encodes key for a request body: as text when it is UTF-8,
// as base64 otherwise.
func MakeKeyFields(key string) KeyFields {
	if utf8.ValidString(key) {
		return KeyFields{Key: &key}
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(key))
	return KeyFields{KeyB64: &b64}
}

// DecodeKey returns the key the fields carry. Its errors wrap
// lock.ErrInvalidKey (the server answers them with api.CodeInvalidKey).
func (k KeyFields) DecodeKey() (string, error) {
	switch {
	case k.Key != nil && k.KeyB64 != nil:
		return "", invalidKey("api: give key or key_b64, not both")
	case k.Key != nil:
		return *k.Key, nil
	case k.KeyB64 != nil:
		b, err := base64.StdEncoding.DecodeString(*k.KeyB64)
		if err != nil {
			return "", invalidKey(fmt.Sprintf("api: key_b64 is not standard base64: %v", err))
		}
		return string(b), nil
	default:
		return "", invalidKey("api: key is required (key for UTF-8 text, key_b64 for other bytes)")
	}
}

// invalidKey is a key field's fault: its message is the answer's, and it
// matches lock.ErrInvalidKey.
type invalidKey string

func (e invalidKey) Error() string { return string(e) }
func (e invalidKey) Unwrap() error { return lock.ErrInvalidKey }

// KeyOut carries a key in a response, the same way KeyFields does.
type KeyOut struct {
	Key    string `json:"key,omitempty"`
	KeyB64 string `json:"key_b64,omitempty"`
}

// MakeKeyOut encodes key for an answer, as MakeKeyFields does for a request.
func MakeKeyOut(key string) KeyOut {
	if utf8.ValidString(key) {
		return KeyOut{Key: key}
	}
	return KeyOut{KeyB64: base64.StdEncoding.EncodeToString([]byte(key))}
}

// DecodeKey returns the key an answer names; a malformed key_b64 matches
// ErrUnexpectedResponse.
func (k KeyOut) DecodeKey() (string, error) {
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
type Duration struct {
	d   time.Duration
	err error
}

// UnmarshalJSON keeps a malformed value's error for DurationField to report.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		d.err = fmt.Errorf(`want a duration string like "30s", not %s`, b)
		return nil
	}
	d.d, d.err = time.ParseDuration(s)
	return nil
}

// MarshalJSON writes the duration in time.Duration.String form.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.d.String()) }

// NewDuration is d as a request field.
func NewDuration(d time.Duration) *Duration { return &Duration{d: d} }

// MillisField is a whole number of milliseconds, with the same deferred
// error as duration.
type MillisField struct {
	ms  int64
	err error
}

// UnmarshalJSON keeps a malformed value's error for DurationField to report.
func (m *MillisField) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &m.ms); err != nil {
		m.err = fmt.Errorf("want a whole number of milliseconds, not %s", b)
	}
	return nil
}

// MarshalJSON writes the whole milliseconds.
func (m MillisField) MarshalJSON() ([]byte, error) { return json.Marshal(m.ms) }

// NewMillisField is ms milliseconds as a request field.
func NewMillisField(ms int64) *MillisField { return &MillisField{ms: ms} }

// MaxMillis is the largest millisecond count a time.Duration holds.
const MaxMillis = math.MaxInt64 / int64(time.Millisecond)

// DurationField reads a duration given as name ("30s") or name_ms (30000);
// at most one of the two may be present. present is false when neither is.
func DurationField(name string, s *Duration, ms *MillisField) (d time.Duration, present bool, err error) {
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
		if ms.ms > MaxMillis || ms.ms < -MaxMillis {
			return 0, false, fmt.Errorf("%s_ms %d is out of range", name, ms.ms)
		}
		return time.Duration(ms.ms) * time.Millisecond, true, nil
	default:
		return 0, false, nil
	}
}

// AcquireRequest is the body of POST /v1/acquire.
type AcquireRequest struct {
	KeyFields
	TTL    *Duration    `json:"ttl,omitempty"`
	TTLMS  *MillisField `json:"ttl_ms,omitempty"`
	Wait   *Duration    `json:"wait,omitempty"`
	WaitMS *MillisField `json:"wait_ms,omitempty"`
	Owner  *string      `json:"owner,omitempty"` // optional: the node mints one when absent
	// Session binds the lock to a session (POST /v1/session/create): it
	// then has no lease of its own, so ttl must be absent, and it ends with
	// the session.
	Session *string `json:"session,omitempty"`
	// Metadata is shown with the holder by inspect and list: UTF-8 text,
	// at most lock.MaxMetadataLen bytes.
	Metadata *string `json:"metadata,omitempty"`
	// Kind is what the key is to be: "mutex" (the default), "semaphore"
	// (with limit) or "rwlock" (shared: true for a read, false or absent
	// for the write). Absent, limit means "semaphore" and shared "rwlock".
	Kind *string `json:"kind,omitempty"`
	// Limit is a semaphore's n: 1..lock.MaxHolders holders at once.
	Limit *int `json:"limit,omitempty"`
	// Shared asks a read/write lock for a read hold.
	Shared *bool `json:"shared,omitempty"`
	// Keys, instead of key or key_b64, asks for a multi-key lock: every
	// key of the set (1..lock.MaxKeys distinct keys, in any order)
	// at once, all or nothing, with one lease and one fencing token. The
	// keys are mutex keys (no kind, limit or shared) and the set has a
	// ttl, never a session. Release or extend any key of the set (with the
	// answer's owner) to release or extend the whole set.
	Keys []string `json:"keys,omitempty"`
	// KeysB64 is keys for keys that are not UTF-8 text: each in standard
	// base64. Give keys or keys_b64, not both.
	KeysB64 []string `json:"keys_b64,omitempty"`
}

// DecodeKeys returns what the request asks for: a multi-key set (keys,
// sorted; key its first) when it gives keys, or one key (keys nil). Its
// errors wrap lock.ErrInvalidKey. A set with a key twice or too many keys
// is left to the store's validation, which names the fault.
func (r AcquireRequest) DecodeKeys() (key string, keys []string, err error) {
	switch {
	case r.Keys == nil && r.KeysB64 == nil:
		key, err = r.DecodeKey()
		return key, nil, err
	case r.Key != nil || r.KeyB64 != nil:
		return "", nil, invalidKey("api: give key (or key_b64) or keys (or keys_b64), not both")
	case r.Keys != nil && r.KeysB64 != nil:
		return "", nil, invalidKey("api: give keys or keys_b64, not both")
	case r.Keys != nil:
		keys = slices.Clone(r.Keys)
	default:
		keys = make([]string, len(r.KeysB64))
		for i, k := range r.KeysB64 {
			b, err := base64.StdEncoding.DecodeString(k)
			if err != nil {
				return "", nil, invalidKey(fmt.Sprintf("api: keys_b64[%d] is not standard base64: %v", i, err))
			}
			keys[i] = string(b)
		}
	}
	if len(keys) == 0 {
		return "", nil, invalidKey("api: keys is empty: a multi-key lock takes 1 to " + strconv.Itoa(lock.MaxKeys) + " keys")
	}
	slices.Sort(keys)
	return keys[0], keys, nil
}

// MakeKeysFields encodes a multi-key set for a request body: as keys when
// every key is UTF-8 text, as keys_b64 otherwise.
func MakeKeysFields(keys []string) (text, b64 []string) {
	for _, k := range keys {
		if !utf8.ValidString(k) {
			b64 = make([]string, len(keys))
			for i, k := range keys {
				b64[i] = base64.StdEncoding.EncodeToString([]byte(k))
			}
			return nil, b64
		}
	}
	return keys, nil
}

// KindFields is the lock.AcquireRequest fields an AcquireRequest's kind,
// limit and shared stand for; the error matches lock.ErrInvalidKind or
// lock.ErrInvalidLimit and names the field.
func (r AcquireRequest) KindFields() (kind lock.Kind, limit int, shared bool, err error) {
	switch {
	case r.Kind != nil:
		if kind, err = lock.ParseKind(*r.Kind); err != nil {
			return 0, 0, false, fmt.Errorf("kind: %w", err)
		}
	case r.Limit != nil:
		kind = lock.KindSemaphore
	case r.Shared != nil:
		kind = lock.KindRWLock
	}
	if r.Limit != nil {
		if kind != lock.KindSemaphore {
			return 0, 0, false, fmt.Errorf("%w: limit: only a semaphore has one (kind is %v)", lock.ErrInvalidKind, kind)
		}
		limit = *r.Limit
	}
	if kind == lock.KindSemaphore && (limit < 1 || limit > lock.MaxHolders) {
		return 0, 0, false, fmt.Errorf("%w: limit must be between 1 and %d (got %d)", lock.ErrInvalidLimit, lock.MaxHolders, limit)
	}
	if r.Shared != nil {
		if kind != lock.KindRWLock {
			return 0, 0, false, fmt.Errorf("%w: shared: only a read/write lock has shared holds (kind is %v)", lock.ErrInvalidKind, kind)
		}
		shared = *r.Shared
	}
	return kind, limit, shared, nil
}

// SetKind sets the fields standing for kind, limit and shared (none for
// a mutex, so that a mutex acquire reads as before kinds existed).
func (r *AcquireRequest) SetKind(kind lock.Kind, limit int, shared bool) {
	switch kind {
	case lock.KindSemaphore:
		r.Limit = &limit
	case lock.KindRWLock:
		r.Shared = &shared
	}
}

// SessionCreateRequest is the body of POST /v1/session/create.
type SessionCreateRequest struct {
	// ID is optional: the node mints one when absent. Send your own to make
	// a retry idempotent (a create of a live session changes nothing).
	ID          *string      `json:"id,omitempty"`
	TTL         *Duration    `json:"ttl,omitempty"`
	TTLMS       *MillisField `json:"ttl_ms,omitempty"`
	LockDelay   *Duration    `json:"lock_delay,omitempty"`
	LockDelayMS *MillisField `json:"lock_delay_ms,omitempty"`
}

// SessionRequest is the body of POST /v1/session/renew and
// POST /v1/session/destroy.
type SessionRequest struct {
	ID *string `json:"id,omitempty"`
}

// SessionResponse answers a session create or renew. The ID is a secret:
// whoever knows it can bind locks to the session or end it.
type SessionResponse struct {
	ID          string `json:"id"`
	TTLMS       int64  `json:"ttl_ms"`
	RemainingMS int64  `json:"remaining_ms"` // counted from when the request reached the node
	// Locks, for a renew: the keys the session holds or waits for (absent
	// from older servers' answers).
	Locks int `json:"locks,omitempty"`
}

// SessionInfoResponse answers GET /v1/session/info.
type SessionInfoResponse struct {
	ID          string `json:"id"`
	Live        bool   `json:"live"`
	TTLMS       int64  `json:"ttl_ms,omitempty"`
	RemainingMS int64  `json:"remaining_ms,omitempty"`
	LockDelayMS int64  `json:"lock_delay_ms,omitempty"`
	Locks       int    `json:"locks,omitempty"` // keys the session holds or waits for
}

// SessionDestroyResponse answers a destroy that ended the session.
type SessionDestroyResponse struct {
	ID        string `json:"id"`
	Destroyed bool   `json:"destroyed"`
}

// ReleaseRequest is the body of POST /v1/release.
type ReleaseRequest struct {
	KeyFields
	Owner *string `json:"owner,omitempty"`
}

// ExtendRequest is the body of POST /v1/extend.
type ExtendRequest struct {
	KeyFields
	Owner *string      `json:"owner,omitempty"`
	TTL   *Duration    `json:"ttl,omitempty"`
	TTLMS *MillisField `json:"ttl_ms,omitempty"`
}

// LeaseResponse answers a granted acquire or an extend.
type LeaseResponse struct {
	KeyOut
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	TTLMS       int64  `json:"ttl_ms"`
	RemainingMS int64  `json:"remaining_ms"`
	// Keys: a multi-key acquire's whole set, sorted (key is its first);
	// absent otherwise. KeysB64 instead when a key is not UTF-8 text.
	Keys    []string `json:"keys,omitempty"`
	KeysB64 []string `json:"keys_b64,omitempty"`
}

// ReleaseResponse answers a release that released.
type ReleaseResponse struct {
	KeyOut
	Released bool `json:"released"`
}

// KeyInfo answers GET /v1/inspect and is one entry of GET /v1/locks. It
// never carries the holder's owner.
type KeyInfo struct {
	KeyOut
	Locked      bool   `json:"locked"`
	Token       uint64 `json:"token,omitempty"`
	RemainingMS int64  `json:"remaining_ms"`
	Waiters     int    `json:"waiters"`
	Metadata    string `json:"metadata,omitempty"` // the holder's, as given at acquire
	// Delayed: nobody holds the key, but a session's lock-delay keeps it
	// for remaining_ms (locked is true).
	Delayed bool `json:"delayed,omitempty"`
	// Kind ("mutex", "semaphore", "rwlock"), while locked. For a semaphore
	// limit is its n; for a semaphore or rwlock, holders counts its holders
	// and shared says readers hold it, token is the newest holder's and
	// remaining_ms the longest hold left. A mutex's holders is 1 (0 while
	// a lock-delay keeps it).
	Kind    string `json:"kind,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Holders int    `json:"holders,omitempty"`
	Shared  bool   `json:"shared,omitempty"`
	// Holds: a semaphore's or rwlock's holds in grant (token) order, each
	// with its own token, time left, metadata and mode (a slot kept by a
	// lock-delay is "delayed" and has no metadata); absent for a mutex. Never an owner. A
	// list answer may carry only the oldest few of a key's holds (holders
	// counts them all); inspect carries up to 4096.
	Holds []HoldOut `json:"holds,omitempty"`
	// SetKeys: the key is held as one of a multi-key grant, whose keys
	// these are, sorted (SetKeysB64 instead when a key is not UTF-8 text).
	SetKeys    []string `json:"set_keys,omitempty"`
	SetKeysB64 []string `json:"set_keys_b64,omitempty"`
	// Reserved: nobody holds the key (locked is false), but it is kept for
	// a multi-key waiter that still waits for another of its keys.
	Reserved bool `json:"reserved,omitempty"`
}

// HoldOut is one hold of a semaphore or rwlock in KeyInfo.Holds.
type HoldOut struct {
	Token       uint64 `json:"token"`
	RemainingMS int64  `json:"remaining_ms"`
	Metadata    string `json:"metadata,omitempty"`
	Shared      bool   `json:"shared,omitempty"`
	// Delayed: nobody holds this slot; the session that held it (with
	// token) expired, and its lock-delay keeps the slot free until
	// remaining_ms ends. It still counts in holders.
	Delayed bool `json:"delayed,omitempty"`
}

// MakeKeyInfo is the answer describing info of key; Remaining is rounded
// down to milliseconds.
func MakeKeyInfo(key string, info lock.KeyInfo) KeyInfo {
	var setText, setB64 []string
	if len(info.SetKeys) > 0 {
		setText, setB64 = MakeKeysFields(info.SetKeys)
	}
	return KeyInfo{
		KeyOut:      MakeKeyOut(key),
		Locked:      info.Locked,
		Token:       info.Token,
		RemainingMS: Millis(info.Remaining),
		Waiters:     info.Waiters,
		Metadata:    info.Metadata,
		Delayed:     info.Delayed,
		Kind:        kindName(info),
		Limit:       info.Limit,
		Holders:     info.Holders,
		Shared:      info.Shared,
		Holds:       makeHolds(info.Holds),
		SetKeys:     setText,
		SetKeysB64:  setB64,
		Reserved:    info.Reserved,
	}
}

func makeHolds(holds []lock.HoldInfo) []HoldOut {
	if len(holds) == 0 {
		return nil
	}
	out := make([]HoldOut, len(holds))
	for i, h := range holds {
		out[i] = HoldOut{Token: h.Token, RemainingMS: Millis(h.Remaining), Metadata: h.Metadata, Shared: h.Shared, Delayed: h.Delayed}
	}
	return out
}

// kindName is KeyInfo.Kind for info: its kind's name while locked.
func kindName(info lock.KeyInfo) string {
	if !info.Locked {
		return ""
	}
	return info.Kind.String()
}

// Info is the lock.KeyInfo the answer describes. An unknown kind (from a
// newer node) reads as the mutex.
func (k KeyInfo) Info() lock.KeyInfo {
	kind, _ := lock.ParseKind(k.Kind)
	return lock.KeyInfo{
		Locked:    k.Locked,
		Token:     k.Token,
		Remaining: time.Duration(k.RemainingMS) * time.Millisecond,
		Waiters:   k.Waiters,
		Metadata:  k.Metadata,
		Delayed:   k.Delayed,
		Kind:      kind,
		Limit:     k.Limit,
		Holders:   k.Holders,
		Shared:    k.Shared,
		Holds:     k.holds(),
		SetKeys:   k.setKeys(),
		Reserved:  k.Reserved,
	}
}

func (k KeyInfo) holds() []lock.HoldInfo {
	if len(k.Holds) == 0 {
		return nil
	}
	out := make([]lock.HoldInfo, len(k.Holds))
	for i, h := range k.Holds {
		out[i] = lock.HoldInfo{Token: h.Token, Remaining: time.Duration(h.RemainingMS) * time.Millisecond, Metadata: h.Metadata, Shared: h.Shared, Delayed: h.Delayed}
	}
	return out
}

// setKeys is the set's keys the answer names; a set_keys_b64 entry that
// is not base64 (no node writes one) drops the whole list rather than
// report a wrong key.
func (k KeyInfo) setKeys() []string {
	if k.SetKeysB64 == nil {
		return slices.Clone(k.SetKeys)
	}
	keys := make([]string, len(k.SetKeysB64))
	for i, s := range k.SetKeysB64 {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil
		}
		keys[i] = string(b)
	}
	return keys
}

// ListResponse answers GET /v1/locks.
type ListResponse struct {
	Locks []KeyInfo `json:"locks"`
	// More: further keys match; ask again with after set to NextAfter when
	// it is present, else to the last key of this page.
	More bool `json:"more"`
	// NextAfter, with More, is where the next page starts (its after): set
	// when the node skipped keys the caller's token may not read, so that
	// a page may hold fewer locks than asked, even none.
	NextAfter *KeyOut `json:"next_after,omitempty"`
}

// LeaveResponse answers POST /v1/leave.
type LeaveResponse struct {
	Status string `json:"status"` // "left"
	NodeID string `json:"node_id,omitempty"`
}

// ReadyResponse answers GET /readyz, 200 when the cluster would survive
// losing one more node and 503 not_ready when not; the 503 also carries the
// usual "error" object, whose message says why. As for HealthResponse,
// everything but status (and the error's code) is for a known token only.
type ReadyResponse struct {
	Status           string       `json:"status"` // "ready" or api.CodeNotReady
	NodeID           string       `json:"node_id,omitempty"`
	LeaderID         string       `json:"leader_id,omitempty"`
	FailureTolerance *int         `json:"failure_tolerance,omitempty"` // nil while unknown
	Reason           string       `json:"reason,omitempty"`            // why not ready
	Error            *ErrorDetail `json:"error,omitempty"`
}

// HealthResponse answers GET /healthz, 200 when ready and 503 when not; the
// 503 also carries the usual "error" object. The node and leader fields are
// only for a caller with a token the node knows (or any caller of a node
// without tokens): without one, status is all.
type HealthResponse struct {
	Status     string       `json:"status"` // "ok", api.CodeNoLeader, api.CodeLogFault or api.CodeHalted
	NodeID     string       `json:"node_id,omitempty"`
	Role       string       `json:"role,omitempty"`
	LeaderID   string       `json:"leader_id,omitempty"`
	LeaderAddr string       `json:"leader_addr,omitempty"`
	Error      *ErrorDetail `json:"error,omitempty"`
}

// ErrorBody is the JSON form of every error answer:
//
//	{"error":{"code":"locked","message":"...","token":41,"remaining_ms":2950}}
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the "error" object of an error answer.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the request body's field at fault, for a bad_request
	// about a field (unknown, misspelt in letter case, given twice).
	Field string `json:"field,omitempty"`
	// Set with api.CodeLocked (and api.CodeQueueFull): the holder's fencing token and
	// lease left; never the holder's owner.
	Token       uint64 `json:"token,omitempty"`
	RemainingMS *int64 `json:"remaining_ms,omitempty"`
	// Reserved, with api.CodeLocked: nobody holds the key; it is kept for a
	// multi-key acquire waiting at the head of its queue for its other
	// keys (token and remaining_ms are absent).
	Reserved bool `json:"reserved,omitempty"`
	// Set with api.CodeKindMismatch: what the key is ("semaphore" and its
	// limit, "rwlock", "mutex").
	Kind  string `json:"kind,omitempty"`
	Limit int    `json:"limit,omitempty"`
	// Set with api.CodeKindMismatch for a multi-key acquire (keys): the key of
	// the set that is of another kind; with api.CodeLocked for one: the set's
	// first key that is not free (held, or reserved), when the node can tell.
	Key string `json:"key,omitempty"`
}

// Millis is d in whole milliseconds, rounded down: a remaining time must
// never be overstated.
func Millis(d time.Duration) int64 {
	if d < 0 {
		return 0
	}
	return int64(d / time.Millisecond)
}
