package apiserver

import (
	"net/http"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// Every route that waits takes its wait through checkWait, so that a wait
// past its route's longest is refused the same way everywhere (400
// invalid_wait, naming what was sent and the longest), never cut short in
// silence: a caller told "at most 10m" polls again; a caller whose hour
// became ten minutes believes the key did not change.
const (
	// maxAcquireWait is the longest an acquire may queue (POST
	// /v1/acquire, and its stream form): the store's own bound.
	maxAcquireWait = lock.MaxWait
	// maxWatchWait is the longest a blocking query blocks (GET /v1/inspect
	// and /v1/locks with index): after it the caller asks again with the
	// index it got, as with Consul.
	maxWatchWait = lock.MaxWatchWait
)

// checkWait checks a wait, d, that field of a request gave (raw is what
// was sent, for the message): from zero to limit.
func checkWait(field, raw string, d, limit time.Duration) (time.Duration, *apiError) {
	switch {
	case d < 0:
		return 0, invalidWait(field, "api: %s %s is negative: want a duration of zero or more (e.g. 30s, 5m)", field, raw)
	case d > limit:
		return 0, invalidWait(field, "api: %s %s is longer than this route waits (at most %v): ask for %v or less, and ask again if need be", field, raw, limit, limit)
	}
	return d, nil
}

// invalidWait is the one error of a wait refused: 400 invalid_wait, naming
// the field.
func invalidWait(field, format string, args ...any) *apiError {
	e := newAPIError(http.StatusBadRequest, api.CodeInvalidWait, format, args...)
	e.detail.Field = field
	return e
}

// queryWait reads a query's wait parameter (a Go duration), up to limit.
func queryWait(raw string, limit time.Duration) (time.Duration, *apiError) {
	d, err := time.ParseDuration(raw)
	if err != nil {
		return 0, invalidWait("wait", "api: wait %q is not a duration of zero or more (e.g. 30s, 5m)", raw)
	}
	return checkWait("wait", strconv.Quote(raw), d, limit)
}

// bodyWait reads a request body's wait ("30s") or wait_ms, up to limit;
// 0 when it gives neither.
func bodyWait(wait *api.Duration, waitMS *api.MillisField, limit time.Duration) (time.Duration, *apiError) {
	d, _, err := api.DurationField("wait", wait, waitMS)
	field := "wait"
	if waitMS != nil && wait == nil {
		field = "wait_ms"
	}
	if err != nil {
		return 0, invalidWait(field, "api: %v", err)
	}
	raw := strconv.Quote(d.String())
	if field == "wait_ms" {
		raw = strconv.FormatInt(d.Milliseconds(), 10)
	}
	return checkWait(field, raw, d, limit)
}
