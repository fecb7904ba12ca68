package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// post sends a POST as the test builds it and returns the status and the
// error code of the JSON answer ("" for none).
func post(t *testing.T, a *agent, path, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, a.httpURL+path, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var answer struct {
		Error struct{ Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(raw, &answer), "every answer is JSON: %s", raw)
	return resp.StatusCode, answer.Error.Code
}

// A -dev agent refuses what a web page sends, and still serves curl, the CLI
// and the names it was given (-allowed-hosts, -allowed-origins, here from
// the environment).
func TestDevAgentKeepsWebPagesOut(t *testing.T) {
	a := startAgentEnv(t, []string{"RAFTLOCK_ALLOWED_ORIGINS=https://ops.example.com"}, "-dev", "-allowed-hosts", "locks.example.com")
	a.waitLeader(t)
	const body = `{"key":"web","ttl":"30s"}`

	status, code := post(t, a, "/v1/acquire", body, map[string]string{"Content-Type": "text/plain;charset=UTF-8", "Origin": "https://evil.example"})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Equal(t, "origin_not_allowed", code)
	status, code = post(t, a, "/v1/acquire", body, map[string]string{"Content-Type": "text/plain;charset=UTF-8"})
	assert.Equal(t, http.StatusUnsupportedMediaType, status)
	assert.Equal(t, "unsupported_media_type", code)
	status, code = post(t, a, "/v1/acquire", body, map[string]string{"Content-Type": "application/json", "Host": "rebound.evil.example"})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Equal(t, "host_not_allowed", code)
	status, code = post(t, a, "/v1/leave", "", map[string]string{"Origin": "https://evil.example"})
	assert.Equal(t, http.StatusForbidden, status, code)

	// What programs and allowed pages send.
	status, code = post(t, a, "/v1/acquire", body, map[string]string{"Content-Type": "application/json", "Host": "localhost"})
	assert.Equal(t, http.StatusOK, status, code)
	status, code = post(t, a, "/v1/acquire", `{"key":"web2","ttl":"30s"}`, map[string]string{"Content-Type": "application/json", "Host": "LOCKS.example.com:7070"})
	assert.Equal(t, http.StatusOK, status, code)
	status, code = post(t, a, "/v1/acquire", `{"key":"web3","ttl":"30s"}`, map[string]string{"Content-Type": "application/json", "Origin": "https://ops.example.com"})
	assert.Equal(t, http.StatusOK, status, code)
	if _, err := exec.LookPath("curl"); err == nil {
		out, err := exec.Command("curl", "-s", "--json", `{"key":"curl","ttl":"30s"}`, a.httpURL+"/v1/acquire").Output()
		require.NoError(t, err)
		assert.Contains(t, string(out), `"token"`, "curl --json, as the README shows")
	}
	stdout, stderr, exit := cli(t, a, "lock", "cli", "--", "echo", "ran")
	assert.Equal(t, 0, exit, stderr)
	assert.Equal(t, "ran\n", stdout)
}

func TestBrowserFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-allowed-origins", "ops.example.com"},
		{"-allowed-origins", "https://ops.example.com/app"},
		{"-allowed-hosts", "*.example.com"},
		{"-max-http-conns", "-1"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := exec.Command(binary, append([]string{"agent", "-dev", "-http", "127.0.0.1:0"}, args...)...)
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, exitUsage, ee.ExitCode())
			assert.Equal(t, 1, strings.Count(errOut.String(), "\n"), "one line: %q", errOut.String())
			assert.Contains(t, errOut.String(), args[0])
			assert.Empty(t, out.String())
		})
	}
}

func TestBrowserGuardHostsAreTheAgentsNames(t *testing.T) {
	origins, hosts, err := allowedBrowsers("https://ops.example.com, http://localhost:3000", "lb.example.com")
	require.NoError(t, err)
	hosts = append(hosts, ownHostNames("node1.internal:7070", "https://api.example.com:8443", "10.0.0.7:7071", nil)...)
	assert.Equal(t, []string{"https://ops.example.com", "http://localhost:3000"}, origins)
	assert.Equal(t, []string{"lb.example.com", "node1.internal", "api.example.com"}, hosts, "IPs need no listing")

	_, hosts, err = allowedBrowsers("", "")
	require.NoError(t, err)
	hosts = append(hosts, ownHostNames("0.0.0.0:7070", "", "", nil)...)
	assert.Len(t, hosts, 1, "listening everywhere, the machine's name is one of the agent's")
}
