package apiserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/errcode"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

func TestAcquireAnswersLease(t *testing.T) {
	n := newTestNode(t, Config{})

	a := n.do(t, "POST", "/v1/acquire", `{"key":"jobs/nightly","ttl":"30s"}`)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, "jobs/nightly", a.body["key"])
	owner, _ := a.body["owner"].(string)
	_, err := lock.ParseOwner(owner)
	assert.NoError(t, err, "the node mints an owner when none is given")
	assert.Positive(t, a.body["token"])
	assert.EqualValues(t, 30000, a.body["ttl_ms"])
	assert.Greater(t, a.body["remaining_ms"], 29000.0)
	assert.LessOrEqual(t, a.body["remaining_ms"], 30000.0)

	b := n.do(t, "POST", "/v1/acquire", `{"key":"other","ttl_ms":1500}`)
	require.Equal(t, http.StatusOK, b.status, b.raw)
	assert.EqualValues(t, 1500, b.body["ttl_ms"])
	assert.Greater(t, b.body["token"], a.body["token"], "fencing tokens increase across keys")
}

func TestAcquireWithOwnerIsIdempotent(t *testing.T) {
	n := newTestNode(t, Config{})
	owner := lock.NewOwner().String()
	body := fmt.Sprintf(`{"key":"k","ttl":"10s","owner":%q}`, owner)

	first := n.do(t, "POST", "/v1/acquire", body)
	require.Equal(t, http.StatusOK, first.status, first.raw)
	again := n.do(t, "POST", "/v1/acquire", body)
	require.Equal(t, http.StatusOK, again.status, again.raw)

	assert.Equal(t, owner, first.body["owner"])
	assert.Equal(t, first.body["token"], again.body["token"], "a retry by the holder gets the same grant")
}

func TestHeldAnswerCarriesTokenNeverOwner(t *testing.T) {
	n := newTestNode(t, Config{})
	holder := n.do(t, "POST", "/v1/acquire", `{"key":"k","ttl":"10s"}`)
	require.Equal(t, http.StatusOK, holder.status)

	a := n.do(t, "POST", "/v1/acquire", `{"key":"k","ttl":"10s"}`)
	assert.Equal(t, http.StatusConflict, a.status)
	assert.Equal(t, api.CodeLocked, a.errorCode())
	assert.Equal(t, holder.body["token"], a.errorField("token"))
	assert.Greater(t, a.errorField("remaining_ms"), 9000.0)
	assert.NotContains(t, a.raw, holder.body["owner"].(string))

	info := n.do(t, "GET", "/v1/inspect?key=k", "")
	require.Equal(t, http.StatusOK, info.status, info.raw)
	assert.NotContains(t, info.raw, holder.body["owner"].(string))
	assert.NotContains(t, info.body, "owner")
}

func TestReleaseAndExtend(t *testing.T) {
	n := newTestNode(t, Config{})
	holder := n.do(t, "POST", "/v1/acquire", `{"key":"k","ttl":"1s"}`)
	require.Equal(t, http.StatusOK, holder.status)
	owner := holder.body["owner"].(string)
	stranger := lock.NewOwner().String()

	ext := n.do(t, "POST", "/v1/extend", fmt.Sprintf(`{"key":"k","owner":%q,"ttl":"1m"}`, owner))
	require.Equal(t, http.StatusOK, ext.status, ext.raw)
	assert.Equal(t, holder.body["token"], ext.body["token"], "an extend keeps the token")
	assert.Greater(t, ext.body["remaining_ms"], 59000.0)

	notHeld := n.do(t, "POST", "/v1/extend", fmt.Sprintf(`{"key":"k","owner":%q,"ttl_ms":60000}`, stranger))
	assert.Equal(t, http.StatusConflict, notHeld.status)
	assert.Equal(t, api.CodeNotHeld, notHeld.errorCode())

	wrong := n.do(t, "POST", "/v1/release", fmt.Sprintf(`{"key":"k","owner":%q}`, stranger))
	assert.Equal(t, http.StatusConflict, wrong.status)
	assert.Equal(t, api.CodeNotHeld, wrong.errorCode())
	info, err := n.store.Inspect(context.Background(), "k")
	require.NoError(t, err)
	assert.True(t, info.Locked, "a release by another owner changes nothing")

	rel := n.do(t, "POST", "/v1/release", fmt.Sprintf(`{"key":"k","owner":%q}`, owner))
	require.Equal(t, http.StatusOK, rel.status, rel.raw)
	assert.Equal(t, true, rel.body["released"])

	// A repeat (as after a lost answer) is answered as the release was.
	again := n.do(t, "POST", "/v1/release", fmt.Sprintf(`{"key":"k","owner":%q}`, owner))
	require.Equal(t, http.StatusOK, again.status, again.raw)
	assert.Equal(t, true, again.body["released"])

	gone := n.do(t, "POST", "/v1/extend", fmt.Sprintf(`{"key":"k","owner":%q,"ttl":"1s"}`, owner))
	assert.Equal(t, api.CodeNotHeld, gone.errorCode())
}

func TestInspectAndList(t *testing.T) {
	n := newTestNode(t, Config{})
	for _, key := range []string{"jobs/a", "jobs/b", "mail/x"} {
		a := n.do(t, "POST", "/v1/acquire", fmt.Sprintf(`{"key":%q,"ttl":"1m"}`, key))
		require.Equal(t, http.StatusOK, a.status, a.raw)
	}

	held := n.do(t, "GET", "/v1/inspect?key="+url.QueryEscape("jobs/a"), "")
	require.Equal(t, http.StatusOK, held.status, held.raw)
	assert.Equal(t, true, held.body["locked"])
	assert.Positive(t, held.body["token"])
	assert.Greater(t, held.body["remaining_ms"], 59000.0)
	assert.EqualValues(t, 0, held.body["waiters"])

	free := n.do(t, "GET", "/v1/inspect?key=nobody", "")
	require.Equal(t, http.StatusOK, free.status, free.raw)
	assert.Equal(t, false, free.body["locked"])

	list := n.do(t, "GET", "/v1/locks?prefix=jobs/", "")
	require.Equal(t, http.StatusOK, list.status, list.raw)
	locks, _ := list.body["locks"].([]any)
	require.Len(t, locks, 2)
	assert.Equal(t, "jobs/a", locks[0].(map[string]any)["key"])
	assert.Equal(t, "jobs/b", locks[1].(map[string]any)["key"])
	assert.Equal(t, false, list.body["more"])
	assert.NotContains(t, list.raw, "owner")

	page := n.do(t, "GET", "/v1/locks?limit=1&after=jobs/a", "")
	require.Equal(t, http.StatusOK, page.status, page.raw)
	locks, _ = page.body["locks"].([]any)
	require.Len(t, locks, 1)
	assert.Equal(t, "jobs/b", locks[0].(map[string]any)["key"])
	assert.Equal(t, true, page.body["more"])
}

func TestBinaryKeysTravelAsBase64(t *testing.T) {
	n := newTestNode(t, Config{})
	key := "bin/\xff\x00/.."
	b64 := base64.StdEncoding.EncodeToString([]byte(key))

	a := n.do(t, "POST", "/v1/acquire", fmt.Sprintf(`{"key_b64":%q,"ttl":"1m"}`, b64))
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, b64, a.body["key_b64"])
	assert.NotContains(t, a.body, "key")

	info, err := n.store.Inspect(context.Background(), key)
	require.NoError(t, err)
	assert.True(t, info.Locked, "the store got the exact bytes")

	inspect := n.do(t, "GET", "/v1/inspect?key="+url.QueryEscape(key), "")
	require.Equal(t, http.StatusOK, inspect.status, inspect.raw)
	assert.Equal(t, true, inspect.body["locked"])
	assert.Equal(t, b64, inspect.body["key_b64"])
}

// TestBadRequests: every route refuses bad input with the documented status
// and code, and changes nothing.
func TestBadRequests(t *testing.T) {
	n := newTestNode(t, Config{MaxBodyBytes: 4 << 10})
	holder := n.do(t, "POST", "/v1/acquire", `{"key":"held","ttl":"1m"}`)
	require.Equal(t, http.StatusOK, holder.status)
	owner := holder.body["owner"].(string)
	longKey := strings.Repeat("k", lock.MaxKeyLen+1)
	zeroOwner := strings.Repeat("0", 32)

	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		// Routes and methods.
		{"unknown route", "GET", "/v1/nope", "", 404, api.CodeNotFound},
		{"root", "GET", "/", "", 404, api.CodeNotFound},
		{"trailing slash", "POST", "/v1/acquire/", `{"key":"a","ttl":"1s"}`, 404, api.CodeNotFound},
		{"acquire by GET", "GET", "/v1/acquire", "", 405, api.CodeMethodNotAllowed},
		{"release by PUT", "PUT", "/v1/release", `{}`, 405, api.CodeMethodNotAllowed},
		{"inspect by POST", "POST", "/v1/inspect", `{"key":"a"}`, 405, api.CodeMethodNotAllowed},
		{"healthz by DELETE", "DELETE", "/healthz", "", 405, api.CodeMethodNotAllowed},
		{"metrics by POST", "POST", "/metrics", "", 405, api.CodeMethodNotAllowed},
		{"cluster of a memory store", "GET", "/v1/cluster", "", 404, api.CodeNotCluster},
		{"cluster by POST", "POST", "/v1/cluster", `{}`, 405, api.CodeMethodNotAllowed},
		{"locks by DELETE", "DELETE", "/v1/locks", "", 405, api.CodeMethodNotAllowed},

		// Acquire.
		{"acquire malformed JSON", "POST", "/v1/acquire", `{"key":`, 400, api.CodeBadRequest},
		{"acquire not an object", "POST", "/v1/acquire", `["key"]`, 400, api.CodeBadRequest},
		{"acquire empty body", "POST", "/v1/acquire", ``, 400, api.CodeBadRequest},
		{"acquire unknown field", "POST", "/v1/acquire", `{"key":"a","ttl":"1s","colour":"red"}`, 400, api.CodeBadRequest},
		{"acquire trailing data", "POST", "/v1/acquire", `{"key":"a","ttl":"1s"} {}`, 400, api.CodeBadRequest},
		{"acquire body not UTF-8", "POST", "/v1/acquire", "{\"key\":\"\xff\",\"ttl\":\"1s\"}", 400, api.CodeBadRequest},
		{"acquire oversized body", "POST", "/v1/acquire", `{"key":"` + strings.Repeat("x", 5<<10) + `","ttl":"1s"}`, 413, api.CodeBodyTooLarge},
		{"acquire missing key", "POST", "/v1/acquire", `{"ttl":"1s"}`, 400, api.CodeInvalidKey},
		{"acquire empty key", "POST", "/v1/acquire", `{"key":"","ttl":"1s"}`, 400, api.CodeInvalidKey},
		{"acquire oversized key", "POST", "/v1/acquire", `{"key":"` + longKey + `","ttl":"1s"}`, 400, api.CodeInvalidKey},
		{"acquire key and key_b64", "POST", "/v1/acquire", `{"key":"a","key_b64":"YQ==","ttl":"1s"}`, 400, api.CodeInvalidKey},
		{"acquire bad key_b64", "POST", "/v1/acquire", `{"key_b64":"!!","ttl":"1s"}`, 400, api.CodeInvalidKey},
		{"acquire missing ttl", "POST", "/v1/acquire", `{"key":"a"}`, 400, api.CodeInvalidTTL},
		{"acquire null ttl", "POST", "/v1/acquire", `{"key":"a","ttl":null}`, 400, api.CodeInvalidTTL},
		{"acquire negative ttl", "POST", "/v1/acquire", `{"key":"a","ttl":"-1s"}`, 400, api.CodeInvalidTTL},
		{"acquire zero ttl_ms", "POST", "/v1/acquire", `{"key":"a","ttl_ms":0}`, 400, api.CodeInvalidTTL},
		{"acquire absurd ttl", "POST", "/v1/acquire", `{"key":"a","ttl":"1000h"}`, 400, api.CodeInvalidTTL},
		{"acquire huge ttl_ms", "POST", "/v1/acquire", `{"key":"a","ttl_ms":99999999999999999}`, 400, api.CodeInvalidTTL},
		{"acquire ttl as number", "POST", "/v1/acquire", `{"key":"a","ttl":30}`, 400, api.CodeInvalidTTL},
		{"acquire ttl_ms as string", "POST", "/v1/acquire", `{"key":"a","ttl_ms":"30"}`, 400, api.CodeInvalidTTL},
		{"acquire ttl_ms fractional", "POST", "/v1/acquire", `{"key":"a","ttl_ms":1.5}`, 400, api.CodeInvalidTTL},
		{"acquire ttl not a duration", "POST", "/v1/acquire", `{"key":"a","ttl":"30 seconds"}`, 400, api.CodeInvalidTTL},
		{"acquire ttl and ttl_ms", "POST", "/v1/acquire", `{"key":"a","ttl":"1s","ttl_ms":1000}`, 400, api.CodeInvalidTTL},
		{"acquire negative wait", "POST", "/v1/acquire", `{"key":"a","ttl":"1s","wait":"-1s"}`, 400, api.CodeInvalidWait},
		{"acquire negative wait_ms", "POST", "/v1/acquire", `{"key":"a","ttl":"1s","wait_ms":-5}`, 400, api.CodeInvalidWait},
		{"acquire absurd wait", "POST", "/v1/acquire", `{"key":"a","ttl":"1s","wait":"1000h"}`, 400, api.CodeInvalidWait},
		{"acquire bad owner hex", "POST", "/v1/acquire", `{"key":"a","ttl":"1s","owner":"xyz"}`, 400, api.CodeInvalidOwner},
		{"acquire zero owner", "POST", "/v1/acquire", `{"key":"a","ttl":"1s","owner":"` + zeroOwner + `"}`, 400, api.CodeInvalidOwner},
		{"acquire held", "POST", "/v1/acquire", `{"key":"held","ttl":"1s"}`, 409, api.CodeLocked},

		// Release.
		{"release malformed JSON", "POST", "/v1/release", `{"key":"held","owner":`, 400, api.CodeBadRequest},
		{"release unknown field", "POST", "/v1/release", `{"key":"held","owner":"` + owner + `","ttl":"1s"}`, 400, api.CodeBadRequest},
		{"release missing owner", "POST", "/v1/release", `{"key":"held"}`, 400, api.CodeInvalidOwner},
		{"release bad owner hex", "POST", "/v1/release", `{"key":"held","owner":"` + strings.Repeat("g", 32) + `"}`, 400, api.CodeInvalidOwner},
		{"release missing key", "POST", "/v1/release", `{"owner":"` + owner + `"}`, 400, api.CodeInvalidKey},
		{"release oversized key", "POST", "/v1/release", `{"key":"` + longKey + `","owner":"` + owner + `"}`, 400, api.CodeInvalidKey},
		{"release oversized body", "POST", "/v1/release", `{"key":"` + strings.Repeat("x", 5<<10) + `"}`, 413, api.CodeBodyTooLarge},
		{"release not held", "POST", "/v1/release", `{"key":"free","owner":"` + owner + `"}`, 409, api.CodeNotHeld},

		// Extend.
		{"extend malformed JSON", "POST", "/v1/extend", `nope`, 400, api.CodeBadRequest},
		{"extend missing owner", "POST", "/v1/extend", `{"key":"held","ttl":"1s"}`, 400, api.CodeInvalidOwner},
		{"extend missing ttl", "POST", "/v1/extend", `{"key":"held","owner":"` + owner + `"}`, 400, api.CodeInvalidTTL},
		{"extend negative ttl", "POST", "/v1/extend", `{"key":"held","owner":"` + owner + `","ttl":"-5s"}`, 400, api.CodeInvalidTTL},
		{"extend oversized key", "POST", "/v1/extend", `{"key":"` + longKey + `","owner":"` + owner + `","ttl":"1s"}`, 400, api.CodeInvalidKey},
		{"extend oversized body", "POST", "/v1/extend", strings.Repeat(" ", 5<<10) + `{}`, 413, api.CodeBodyTooLarge},
		{"extend not held", "POST", "/v1/extend", `{"key":"free","owner":"` + owner + `","ttl":"1s"}`, 409, api.CodeNotHeld},

		// Inspect.
		{"inspect missing key", "GET", "/v1/inspect", "", 400, api.CodeInvalidKey},
		{"inspect empty key", "GET", "/v1/inspect?key=", "", 400, api.CodeInvalidKey},
		{"inspect oversized key", "GET", "/v1/inspect?key=" + longKey, "", 400, api.CodeInvalidKey},
		{"inspect unknown parameter", "GET", "/v1/inspect?key=a&owner=b", "", 400, api.CodeBadRequest},
		{"inspect repeated key", "GET", "/v1/inspect?key=a&key=b", "", 400, api.CodeBadRequest},
		{"inspect malformed query", "GET", "/v1/inspect?key=%zz", "", 400, api.CodeBadRequest},

		// List, cluster, health.
		{"list zero limit", "GET", "/v1/locks?limit=0", "", 400, api.CodeInvalidList},
		{"list bad limit", "GET", "/v1/locks?limit=ten", "", 400, api.CodeInvalidList},
		{"list unknown parameter", "GET", "/v1/locks?key=a", "", 400, api.CodeBadRequest},
		{"list oversized prefix", "GET", "/v1/locks?prefix=" + longKey, "", 400, api.CodeInvalidKey},
		{"cluster with a query", "GET", "/v1/cluster?verbose=1", "", 400, api.CodeBadRequest},
		{"inspect parameter in another case", "GET", "/v1/inspect?KEY=a", "", 400, api.CodeBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := n.do(t, tc.method, tc.path, tc.body)
			assert.Equal(t, tc.status, a.status, a.raw)
			assert.Equal(t, tc.code, a.errorCode(), a.raw)
			msg, _ := a.errorField("message").(string)
			assert.NotEmpty(t, msg, "every error says what was wrong")
			if tc.status == 405 {
				assert.NotEmpty(t, a.header.Get("Allow"))
			}
		})
	}

	// Nothing above changed the locks: "held" is still held by its owner,
	// and no other key was taken.
	list, err := n.store.List(context.Background(), lock.ListRequest{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "held", list[0].Key)
	assert.Equal(t, holder.body["token"], float64(list[0].Token))
}

func TestListUnsupported(t *testing.T) {
	store := memstore.New()
	n := newTestNodeOver(t, storeOnly{store}, Config{}, func() { _ = store.Close() })
	a := n.do(t, "GET", "/v1/locks", "")
	assert.Equal(t, http.StatusNotImplemented, a.status)
	assert.Equal(t, api.CodeNotImplemented, a.errorCode())
}

// storeOnly hides every optional ability of the store it wraps.
type storeOnly struct{ lock.Store }

// TestStoreErrorsMapToCodes: what a store returns reaches the client with the
// documented status and code.
func TestStoreErrorsMapToCodes(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{&lock.HeldError{Key: "k", Token: 7, Remaining: 1500 * time.Millisecond}, 409, api.CodeLocked},
		{fmt.Errorf("%w (key %q)", lock.ErrNotHeld, "k"), 409, api.CodeNotHeld},
		{fmt.Errorf("%w: 65536 wait", lock.ErrQueueFull), 429, api.CodeQueueFull},
		{fmt.Errorf("cluster: no leader: %w", lock.ErrUnavailable), 503, api.CodeUnavailable},
		{fmt.Errorf("cluster: leadership lost: %w: %w", lock.ErrUnknownOutcome, lock.ErrUnavailable), 503, api.CodeUnknownOutcome},
		{lock.ErrClosed, 503, api.CodeClosed},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), 503, api.CodeUnknownOutcome},
		{fmt.Errorf("disk on fire"), 500, api.CodeInternal},
	}
	for _, tc := range cases {
		t.Run(tc.code, func(t *testing.T) {
			n := newTestNodeOver(t, failingStore{tc.err}, Config{}, nil)
			a := n.do(t, "POST", "/v1/acquire", `{"key":"k","ttl":"1s"}`)
			assert.Equal(t, tc.status, a.status, a.raw)
			assert.Equal(t, tc.code, a.errorCode(), a.raw)
			if tc.code == api.CodeLocked {
				assert.EqualValues(t, 7, a.errorField("token"))
				assert.EqualValues(t, 1500, a.errorField("remaining_ms"))
			}
		})
	}

	t.Run("timeout of a read is unavailable", func(t *testing.T) {
		n := newTestNodeOver(t, failingStore{context.DeadlineExceeded}, Config{}, nil)
		a := n.do(t, "GET", "/v1/inspect?key=k", "")
		assert.Equal(t, api.CodeUnavailable, a.errorCode(), a.raw)
	})
}

// Every lock error code is answered with its own code and a status the
// table gives, and the Go client reads it back as the same lock sentinels.
func TestEveryLockErrorCodeHasAStatus(t *testing.T) {
	for _, code := range errcode.All() {
		status, ok := lockCodeStatus[code]
		require.True(t, ok, "no HTTP status for lock code %q", code)
		err := fmt.Errorf("store: %w", errors.Join(errcode.Errors(code)...))
		e := storeError(err, true)
		assert.Equal(t, code, e.detail.Code)
		assert.Equal(t, status, e.status, code)
		back := &api.ServerError{StatusCode: e.status, Code: e.detail.Code}
		for _, s := range errcode.Errors(code) {
			assert.ErrorIs(t, back, s, code)
		}
	}
}

// failingStore answers every call with err.
type failingStore struct{ err error }

func (s failingStore) Acquire(context.Context, lock.AcquireRequest) (lock.Lease, error) {
	return lock.Lease{}, s.err
}
func (s failingStore) Release(context.Context, string, lock.Owner) (bool, error) { return false, s.err }
func (s failingStore) Extend(context.Context, string, lock.Owner, time.Duration) (lock.Lease, error) {
	return lock.Lease{}, s.err
}
func (s failingStore) Inspect(context.Context, string) (lock.KeyInfo, error) {
	return lock.KeyInfo{}, s.err
}

// TestRepeatAcquireReportsTheLeaseItHas: the holder acquiring again with
// another TTL changes nothing, and the answer describes the lease as it is
// (same token, ttl_ms and remaining_ms of that lease), not one of the TTL
// asked.
func TestRepeatAcquireReportsTheLeaseItHas(t *testing.T) {
	n := newTestNode(t, Config{})
	first := n.do(t, "POST", "/v1/acquire", `{"key":"k","ttl":"1m"}`)
	require.Equal(t, http.StatusOK, first.status, first.raw)
	assert.EqualValues(t, 60000, first.body["ttl_ms"], "a new grant's term is the TTL asked")
	owner := first.body["owner"].(string)

	for _, ttl := range []string{"5m", "10s"} {
		for _, wait := range []string{"", `,"wait":"1s"`} {
			a := n.do(t, "POST", "/v1/acquire", `{"key":"k","ttl":"`+ttl+`","owner":"`+owner+`"`+wait+`}`)
			require.Equal(t, http.StatusOK, a.status, a.raw)
			assert.Equal(t, first.body["token"], a.body["token"], "the same grant")
			ttlMS, remainingMS := a.body["ttl_ms"].(float64), a.body["remaining_ms"].(float64)
			assert.LessOrEqual(t, ttlMS, float64(60000), "ttl %s%s: not the TTL asked", ttl, wait)
			assert.Greater(t, ttlMS, float64(10000), "ttl %s%s: not the TTL asked", ttl, wait)
			assert.LessOrEqual(t, remainingMS, float64(60000), "the lease was not lengthened")
			assert.Greater(t, remainingMS, float64(10000), "the lease was not shortened")
		}
	}
	info, err := n.store.Inspect(context.Background(), "k")
	require.NoError(t, err)
	assert.LessOrEqual(t, info.Remaining, time.Minute, "the store's lease is the first one")
}
