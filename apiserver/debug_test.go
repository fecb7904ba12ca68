package apiserver

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
)

func getRaw(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestPprofOnlyWhenEnabledAndWithTheToken(t *testing.T) {
	off := newTestNode(t, Config{Token: testToken})
	a := off.do(t, "GET", "/debug/pprof/goroutine?debug=1", "")
	assert.Equal(t, http.StatusNotFound, a.status)
	assert.Contains(t, a.raw, "-enable-pprof")

	on := newTestNode(t, Config{Token: testToken, EnablePprof: true})
	status, body := getRaw(t, on.url+"/debug/pprof/goroutine?debug=2", "")
	assert.Equal(t, http.StatusUnauthorized, status, "profiles need the token")
	assert.NotContains(t, body, "goroutine")

	status, body = getRaw(t, on.url+"/debug/pprof/goroutine?debug=2", testToken)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "goroutine ")
	status, body = getRaw(t, on.url+"/debug/pprof/", testToken)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "heap")
	status, _ = getRaw(t, on.url+"/debug/pprof/cmdline", testToken)
	assert.Equal(t, http.StatusOK, status)
}

func TestAgentConfigAndLogsRoutes(t *testing.T) {
	none := newTestNode(t, Config{})
	for _, path := range []string{"/v1/agent/config", "/v1/agent/logs"} {
		a := none.do(t, "GET", path, "")
		assert.Equal(t, http.StatusNotImplemented, a.status, path)
		assert.Equal(t, api.CodeNotImplemented, a.errorCode(), path)
	}

	ring := NewLogRing(3)
	for i := range 5 {
		fmt.Fprintf(ring, "line %d\n", i)
	}
	n := newTestNode(t, Config{Token: testToken, RecentLogs: ring,
		AgentConfig: func() any { return map[string]any{"http": "127.0.0.1:7070", "http-token": "<redacted>"} }})
	a := n.do(t, "GET", "/v1/agent/logs", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, []any{"line 2", "line 3", "line 4"}, a.body["lines"])
	assert.EqualValues(t, 2, a.body["dropped"])
	a = n.do(t, "GET", "/v1/agent/config", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, "<redacted>", a.body["http-token"])
	a = n.do(t, "GET", "/v1/agent/logs?n=1", "")
	assert.Equal(t, http.StatusBadRequest, a.status)
	assert.Equal(t, http.StatusUnauthorized, rawRequest(t, n, "GET", "/v1/agent/config", "", nil).status)
}

func TestLogRingKeepsWholeLines(t *testing.T) {
	ring := NewLogRing(10)
	_, _ = ring.Write([]byte("first "))
	_, _ = ring.Write([]byte("half\nsecond\nthi"))
	lines, dropped := ring.Lines()
	assert.Equal(t, []string{"first half", "second"}, lines, "a line waits for its end")
	assert.Zero(t, dropped)
	_, _ = ring.Write([]byte(strings.Repeat("x", MaxLogLineBytes+100) + "\n"))
	lines, _ = ring.Lines()
	require.Len(t, lines, 3)
	assert.Len(t, lines[2], MaxLogLineBytes, "a long line is cut")
	assert.True(t, strings.HasPrefix(lines[2], "third"[:3]))
}
