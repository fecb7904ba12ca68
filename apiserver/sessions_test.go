package apiserver

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

func TestSessionRoutes(t *testing.T) {
	n := newTestNode(t, Config{})
	c := n.do(t, "POST", "/v1/session/create", `{"ttl":"30s","lock_delay":"1s"}`)
	require.Equal(t, http.StatusOK, c.status, c.raw)
	id, _ := c.body["id"].(string)
	_, err := lock.ParseSessionID(id)
	require.NoError(t, err, "the node mints an id when none is given")
	assert.EqualValues(t, 30000, c.body["ttl_ms"])
	assert.LessOrEqual(t, c.body["remaining_ms"], 30000.0)

	// Two locks bound to it, with metadata.
	for _, k := range []string{"a", "b"} {
		a := n.do(t, "POST", "/v1/acquire", fmt.Sprintf(`{"key":%q,"session":%q,"metadata":"pid=%s"}`, k, id, k))
		require.Equal(t, http.StatusOK, a.status, a.raw)
	}
	i := n.do(t, "GET", "/v1/inspect?key=a", "")
	require.Equal(t, http.StatusOK, i.status, i.raw)
	assert.Equal(t, "pid=a", i.body["metadata"])
	assert.Equal(t, true, i.body["locked"])
	assert.NotContains(t, i.raw, id, "a read never shows the session")
	l := n.do(t, "GET", "/v1/locks", "")
	require.Equal(t, http.StatusOK, l.status, l.raw)
	assert.Contains(t, l.raw, `"metadata":"pid=b"`)

	info := n.do(t, "GET", "/v1/session/info?id="+id, "")
	require.Equal(t, http.StatusOK, info.status, info.raw)
	assert.Equal(t, true, info.body["live"])
	assert.EqualValues(t, 2, info.body["locks"])
	assert.EqualValues(t, 1000, info.body["lock_delay_ms"])
	bad := n.do(t, "GET", "/v1/session/info?id=zz", "")
	assert.Equal(t, api.CodeInvalidSession, bad.errorCode())

	r := n.do(t, "POST", "/v1/session/renew", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, http.StatusOK, r.status, r.raw)
	assert.EqualValues(t, 30000, r.body["ttl_ms"])

	d := n.do(t, "POST", "/v1/session/destroy", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, http.StatusOK, d.status, d.raw)
	assert.Equal(t, true, d.body["destroyed"])
	for _, k := range []string{"a", "b"} {
		i := n.do(t, "GET", "/v1/inspect?key="+k, "")
		assert.Equal(t, false, i.body["locked"], "the destroy released %s", k)
	}

	r = n.do(t, "POST", "/v1/session/renew", fmt.Sprintf(`{"id":%q}`, id))
	assert.Equal(t, http.StatusConflict, r.status)
	assert.Equal(t, api.CodeNoSession, r.errorCode())
	d = n.do(t, "POST", "/v1/session/destroy", fmt.Sprintf(`{"id":%q}`, id))
	require.Equal(t, http.StatusOK, d.status, "a repeat of the destroy (as after a lost answer) is answered as it was: %s", d.raw)
	assert.Equal(t, true, d.body["destroyed"])
	d = n.do(t, "POST", "/v1/session/destroy", fmt.Sprintf(`{"id":%q}`, lock.NewSessionID().String()))
	assert.Equal(t, http.StatusConflict, d.status, "a session never created")
	assert.Equal(t, api.CodeNoSession, d.errorCode())
	gone := n.do(t, "GET", "/v1/session/info?id="+id, "")
	require.Equal(t, http.StatusOK, gone.status, gone.raw)
	assert.Equal(t, false, gone.body["live"])
	a := n.do(t, "POST", "/v1/acquire", fmt.Sprintf(`{"key":"c","session":%q}`, id))
	assert.Equal(t, http.StatusConflict, a.status)
	assert.Equal(t, api.CodeNoSession, a.errorCode())

	// A create with the caller's id is idempotent.
	mine := lock.NewSessionID().String()
	body := fmt.Sprintf(`{"id":%q,"ttl_ms":20000}`, mine)
	first := n.do(t, "POST", "/v1/session/create", body)
	require.Equal(t, http.StatusOK, first.status, first.raw)
	again := n.do(t, "POST", "/v1/session/create", body)
	require.Equal(t, http.StatusOK, again.status, again.raw)
	assert.Equal(t, mine, again.body["id"])
}

func TestSessionBadRequests(t *testing.T) {
	n := newTestNode(t, Config{})
	id := lock.NewSessionID().String()
	for _, tc := range []struct {
		path, body, code, names string
	}{
		{"/v1/session/create", `{}`, api.CodeInvalidSession, "ttl"},
		{"/v1/session/create", `{"ttl":"0s"}`, api.CodeInvalidSession, "ttl"},
		{"/v1/session/create", `{"ttl":30}`, api.CodeInvalidSession, "ttl"},
		{"/v1/session/create", `{"ttl":"1s","lock_delay":"2m"}`, api.CodeInvalidSession, "lock delay"},
		{"/v1/session/create", `{"ttl":"1s","id":"xyz"}`, api.CodeInvalidSession, "id"},
		{"/v1/session/create", `{"ttl":"1s","TTL":"1s"}`, api.CodeBadRequest, "TTL"},
		{"/v1/session/renew", `{}`, api.CodeInvalidSession, "id"},
		{"/v1/session/renew", `{"id":"00000000000000000000000000000000"}`, api.CodeInvalidSession, "zero"},
		{"/v1/session/destroy", `{"session":"x"}`, api.CodeBadRequest, "session"},
		{"/v1/acquire", fmt.Sprintf(`{"key":"k","ttl":"1s","session":%q}`, id), api.CodeInvalidTTL, "ttl or session"},
		{"/v1/acquire", `{"key":"k","session":"nope"}`, api.CodeInvalidSession, "session"},
		{"/v1/acquire", `{"key":"k"}`, api.CodeInvalidTTL, "ttl"},
		{"/v1/acquire", fmt.Sprintf(`{"key":"k","ttl":"1s","metadata":%q}`, strings.Repeat("m", lock.MaxMetadataLen+1)), api.CodeInvalidMetadata, "metadata"},
	} {
		a := n.do(t, "POST", tc.path, tc.body)
		assert.Equal(t, http.StatusBadRequest, a.status, "%s %s: %s", tc.path, tc.body, a.raw)
		assert.Equal(t, tc.code, a.errorCode(), "%s %s", tc.path, tc.body)
		assert.Contains(t, a.raw, tc.names, "%s %s: the message names the field", tc.path, tc.body)
	}
	assert.False(t, n.do(t, "GET", "/v1/inspect?key=k", "").body["locked"].(bool), "nothing was acquired")
}
