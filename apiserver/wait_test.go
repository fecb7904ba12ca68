package apiserver

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/raftlock/raftlock/api"
)

// Every route that waits refuses a wait past its longest the same way,
// 400 invalid_wait naming the field, what was sent and the longest, rather
// than cut it short in silence (a watch of wait=100000h answered after ten
// minutes as if nothing changed).
func TestEveryWaitIsCheckedAlike(t *testing.T) {
	n := newTestNode(t, Config{})
	for _, tc := range []struct {
		name, method, path, body string
		field, mention, longest  string
	}{
		{"acquire", "POST", "/v1/acquire", `{"key":"a","ttl":"1s","wait":"100000h"}`, "wait", `"100000h0m0s"`, "24h0m0s"},
		{"acquire wait_ms", "POST", "/v1/acquire", `{"key":"a","ttl":"1s","wait_ms":360000000000}`, "wait_ms", "360000000000", "24h0m0s"},
		{"inspect", "GET", "/v1/inspect?key=a&index=0&wait=100000h", "", "wait", `"100000h"`, "10m0s"},
		{"locks", "GET", "/v1/locks?prefix=a&index=0&wait=100000h", "", "wait", `"100000h"`, "10m0s"},
		{"inspect just past", "GET", "/v1/inspect?key=a&index=0&wait=10m1s", "", "wait", `"10m1s"`, "10m0s"},
		{"inspect negative", "GET", "/v1/inspect?key=a&index=0&wait=-1s", "", "wait", `"-1s"`, "zero or more"},
		{"acquire negative", "POST", "/v1/acquire", `{"key":"a","ttl":"1s","wait":"-1s"}`, "wait", `"-1s"`, "zero or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := n.do(t, tc.method, tc.path, tc.body)
			assert.Equal(t, http.StatusBadRequest, a.status, a.raw)
			assert.Equal(t, api.CodeInvalidWait, a.errorCode())
			assert.Equal(t, tc.field, a.errorField("field"))
			assert.Contains(t, a.errorField("message"), tc.mention)
			assert.Contains(t, a.errorField("message"), tc.longest)
		})
	}
	// The longest is a wait like any other: taken (a watch answers at once
	// for index 0, an acquire of a free key at once).
	assert.Equal(t, http.StatusOK, n.do(t, "GET", "/v1/inspect?key=a&index=0&wait=10m", "").status)
	assert.Equal(t, http.StatusOK, n.do(t, "POST", "/v1/acquire", `{"key":"a","ttl":"1s","wait":"24h"}`).status)
}
