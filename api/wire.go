package api

import (
	"time"

	"github.com/raftlock/raftlock/internal/httpwire"
	"github.com/raftlock/raftlock/lock"
)

// The JSON the API speaks: its request and answer types and their JSON
// codec live in internal/httpwire, which the server (package apiserver)
// uses too, so that each body is written and read by one piece of code.
// They are named here by aliases, so that a program keeps naming them
// api.AcquireRequest and so on; their fields and methods are httpwire's
// (go doc github.com/raftlock/raftlock/internal/httpwire shows them, and
// docs/http.md describes the JSON).

// Request bodies.
type (
	// KeyFields carries a key in a request body: "key" when it is UTF-8
	// text, "key_b64" (standard base64) when it is arbitrary bytes.
	KeyFields = httpwire.KeyFields
	// Duration is a request's duration field ("30s"), as ttl and wait.
	Duration = httpwire.Duration
	// MillisField is a request's whole-milliseconds field, as ttl_ms.
	MillisField = httpwire.MillisField
	// AcquireRequest is the body of POST /v1/acquire.
	AcquireRequest = httpwire.AcquireRequest
	// ReleaseRequest is the body of POST /v1/release.
	ReleaseRequest = httpwire.ReleaseRequest
	// ExtendRequest is the body of POST /v1/extend.
	ExtendRequest = httpwire.ExtendRequest
	// SessionCreateRequest is the body of POST /v1/session/create.
	SessionCreateRequest = httpwire.SessionCreateRequest
	// SessionRequest is the body of POST /v1/session/renew and
	// POST /v1/session/destroy.
	SessionRequest = httpwire.SessionRequest
	// BatchRequest is the body of POST /v1/batch.
	BatchRequest = httpwire.BatchRequest
	// BatchOp is one operation of a batch.
	BatchOp = httpwire.BatchOp
)

// Answers.
type (
	// KeyOut carries a key in an answer, the same way KeyFields does.
	KeyOut = httpwire.KeyOut
	// LeaseResponse answers a granted acquire or an extend.
	LeaseResponse = httpwire.LeaseResponse
	// ReleaseResponse answers a release that released.
	ReleaseResponse = httpwire.ReleaseResponse
	// SessionResponse answers a session create or renew.
	SessionResponse = httpwire.SessionResponse
	// SessionInfoResponse answers GET /v1/session/info.
	SessionInfoResponse = httpwire.SessionInfoResponse
	// SessionDestroyResponse answers a destroy that ended the session.
	SessionDestroyResponse = httpwire.SessionDestroyResponse
	// KeyInfo answers GET /v1/inspect and is one entry of GET /v1/locks.
	KeyInfo = httpwire.KeyInfo
	// HoldOut is one hold of a semaphore or rwlock in KeyInfo.Holds.
	HoldOut = httpwire.HoldOut
	// ListResponse answers GET /v1/locks.
	ListResponse = httpwire.ListResponse
	// LeaveResponse answers POST /v1/leave.
	LeaveResponse = httpwire.LeaveResponse
	// ReadyResponse answers GET /readyz.
	ReadyResponse = httpwire.ReadyResponse
	// HealthResponse answers GET /healthz.
	HealthResponse = httpwire.HealthResponse
	// BatchResponse answers POST /v1/batch.
	BatchResponse = httpwire.BatchResponse
	// BatchResult is one operation's answer in a BatchResponse.
	BatchResult = httpwire.BatchResult
	// ErrorBody is the JSON form of every error answer:
	//
	//	{"error":{"code":"locked","message":"...","token":41,"remaining_ms":2950}}
	ErrorBody = httpwire.ErrorBody
	// ErrorDetail is the "error" object of an error answer.
	ErrorDetail = httpwire.ErrorDetail
)

// Operations a batch may carry: the names of their own routes.
const (
	BatchAcquire = httpwire.BatchAcquire // POST /v1/acquire without wait: a batch answers when all its operations are done
	BatchRelease = httpwire.BatchRelease // POST /v1/release
	BatchExtend  = httpwire.BatchExtend  // POST /v1/extend
)

// MaxBatchOps is the most operations one POST /v1/batch may carry.
const MaxBatchOps = httpwire.MaxBatchOps

// MakeKeyFields encodes key for a request body: as text when it is UTF-8,
// as base64 otherwise.
func MakeKeyFields(key string) KeyFields { return httpwire.MakeKeyFields(key) }

// MakeKeyOut encodes key for an answer, as MakeKeyFields does for a request.
func MakeKeyOut(key string) KeyOut { return httpwire.MakeKeyOut(key) }

// MakeKeysFields encodes a multi-key set for a request body: as keys when
// every key is UTF-8 text, as keys_b64 otherwise.
func MakeKeysFields(keys []string) (text, b64 []string) { return httpwire.MakeKeysFields(keys) }

// MakeKeyInfo is the answer describing info of key; Remaining is rounded
// down to milliseconds.
func MakeKeyInfo(key string, info lock.KeyInfo) KeyInfo { return httpwire.MakeKeyInfo(key, info) }

// NewDuration is d as a request field.
func NewDuration(d time.Duration) *Duration { return httpwire.NewDuration(d) }

// DurationField reads a duration given as name ("30s") or name_ms (30000);
// at most one of the two may be present. present is false when neither is.
func DurationField(name string, s *Duration, ms *MillisField) (d time.Duration, present bool, err error) {
	return httpwire.DurationField(name, s, ms)
}

// Millis is d in whole milliseconds, rounded down: a remaining time must
// never be overstated.
func Millis(d time.Duration) int64 { return httpwire.Millis(d) }
