package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/apiserver"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

const (
	aclShared = "shared-secret-0123456789abcdef"
	aclOps    = "ops-secret-0123456789abcdef"
	aclJobs   = "jobs-secret-0123456789abcdef"
	aclNew    = "new-secret-0123456789abcdef"
)

const aclFile = `{
  "tokens": [
    {"name": "ops", "secret": "` + aclOps + `", "rules": [{"prefix": "", "right": "admin"}]},
    {"name": "jobs", "secret": "` + aclJobs + `", "rules": [{"prefix": "jobs/", "right": "lock"}]}
  ]
}`

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
}

// statusAs is the HTTP status of GET path with secret.
func statusAs(t *testing.T, url, secret, path string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// TestReloadTokens runs what the agent does on SIGHUP against a handler in
// this process: a good file is put in force, a bad one changes nothing and
// the log says why, without a secret.
func TestReloadTokens(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "acl.json")
	writeFile(t, path, aclFile)
	tokens, err := loadTokens(path, aclShared)
	require.NoError(t, err)
	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs})
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	h := apiserver.NewHandler(store, apiserver.Config{Token: aclShared, Tokens: tokens})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	inspect := "/v1/inspect?key=jobs%2F1"
	require.Equal(t, http.StatusOK, statusAs(t, srv.URL, aclJobs, inspect))

	// Good: the new file's tokens in force, the old ones gone.
	writeFile(t, path, `{"tokens": [{"name": "new", "secret": "`+aclNew+`", "rules": [{"prefix": "jobs/", "right": "read"}]}]}`)
	require.True(t, reloadTokens(path, aclShared, h, logger))
	assert.Equal(t, http.StatusOK, statusAs(t, srv.URL, aclNew, inspect))
	assert.Equal(t, http.StatusUnauthorized, statusAs(t, srv.URL, aclJobs, inspect))
	assert.Equal(t, http.StatusOK, statusAs(t, srv.URL, aclShared, inspect), "the shared token stays")
	assert.Contains(t, logs.String(), "API tokens reloaded")
	assert.Contains(t, logs.String(), `names=["new"]`)
	assert.NotContains(t, logs.String(), "other users", "the file is 0600")
	require.NoError(t, os.Chmod(path, 0o644))
	logs.Reset()
	require.True(t, reloadTokens(path, aclShared, h, logger))
	assert.Contains(t, logs.String(), "a file of secrets may be read by other users")
	assert.Contains(t, logs.String(), "flag=-http-acl-file")
	assert.Contains(t, logs.String(), "chmod 600")

	// Bad: each keeps the tokens in force and logs the file, place and problem.
	for _, bad := range []struct{ content, want string }{
		{`{"tokens": [`, "not valid JSON"},
		{`{"tokens": [{"name": "x", "secret": "` + aclOps + `", "rules": [{"prefix": "", "right": "root"}]}]}`, `tokens[0].rules[0].right: unknown right \"root\"`},
		{`{"tokens": [{"name": "", "secret": "` + aclOps + `", "rules": []}]}`, "tokens[0].name: the name is empty"},
		{`{"tokens": [{"name": "x", "secret": "` + aclShared + `", "rules": []}]}`, "same secret as the shared token"},
	} {
		logs.Reset()
		writeFile(t, path, bad.content)
		assert.False(t, reloadTokens(path, aclShared, h, logger))
		out := logs.String()
		assert.Contains(t, out, "[ERROR]")
		assert.Contains(t, out, "the tokens in force stay")
		assert.Contains(t, out, "token file "+path)
		assert.Contains(t, out, bad.want)
		assert.Contains(t, out, "what_to_do")
		for _, secret := range []string{aclShared, aclOps, aclJobs, aclNew} {
			assert.NotContains(t, out, secret)
		}
		assert.Equal(t, http.StatusOK, statusAs(t, srv.URL, aclNew, inspect), "still in force after %q", bad.content)
	}
	require.NoError(t, os.Remove(path))
	assert.False(t, reloadTokens(path, aclShared, h, logger))
	assert.Equal(t, http.StatusOK, statusAs(t, srv.URL, aclNew, inspect))

	logs.Reset()
	assert.False(t, reloadTokens("", aclShared, h, logger))
	assert.Contains(t, logs.String(), "no -http-acl-file")
}

// TestAgentACLFile runs the binary: a bad file stops it at start; a good
// one gives each token its rights; release -force needs admin and is
// audited; SIGHUP reloads the file.
func TestAgentACLFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "acl.json")

	writeFile(t, path, "{\"tokens\": [\n  {\"name\": \"a\", \"secret\": \""+aclOps+"\", \"rules\": [{\"prefix\": \"\", \"right\": \"write\"}]}\n]}")
	var stderr bytes.Buffer
	cmd := exec.Command(binary, "agent", "-dev", "-http", "127.0.0.1:0", "-bind", "127.0.0.1:0", "-http-acl-file", path)
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitUsage, ee.ExitCode())
	assert.Contains(t, stderr.String(), "-http-acl-file: token file "+path+": line 2: tokens[0].rules[0].right: unknown right \"write\"")
	assert.Contains(t, stderr.String(), "fix the file")
	assert.NotContains(t, stderr.String(), aclOps)

	writeFile(t, path, aclFile)
	a := startAgent(t, "-dev", "-log-level", "info", "-http-acl-file", path)
	a.clientConfig = api.ClientConfig{Token: aclJobs}
	a.waitLeader(t)
	jobs := a.client(t)
	ctx := context.Background()
	lease, err := jobs.Acquire(ctx, lock.AcquireRequest{Key: "jobs/stuck", Owner: lock.NewOwner(), TTL: time.Hour})
	require.NoError(t, err)
	_, err = jobs.Acquire(ctx, lock.AcquireRequest{Key: "other", Owner: lock.NewOwner(), TTL: time.Hour})
	assert.ErrorIs(t, err, api.ErrPermissionDenied)

	_, stderrOut, code := runBinary(t, nil, "lock", "-addr", a.httpURL, "-token", aclJobs, "other", "--", "true")
	assert.Equal(t, exitDenied, code, "lock without the right: %s", stderrOut)
	assert.Contains(t, stderrOut, `may not acquire "other"`)
	_, stderrOut, code = runBinary(t, nil, "locks", "-addr", a.httpURL, "-token", aclJobs, "other/")
	assert.Equal(t, exitDenied, code, "locks under a prefix it may not read: %s", stderrOut)
	_, stderrOut, code = runBinary(t, nil, "release", "-addr", a.httpURL, "-token", aclJobs, "-force", "jobs/stuck")
	assert.Equal(t, exitDenied, code)
	assert.Contains(t, stderrOut, "permission_denied")
	assert.Contains(t, stderrOut, "admin right")
	out, stderrOut, code := runBinary(t, nil, "release", "-addr", a.httpURL, "-token", aclOps, "-force", "jobs/stuck")
	require.Equal(t, exitOK, code, stderrOut)
	assert.Contains(t, out, `released "jobs/stuck"`)
	_, stderrOut, code = runBinary(t, nil, "release", "-addr", a.httpURL, "-token", aclOps, "-force", "jobs/stuck")
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderrOut, `"jobs/stuck" is not held by anyone`)
	_, stderrOut, code = runBinary(t, nil, "release", "-addr", a.httpURL, "-token", aclOps, "-force", "-owner", lock.NewOwner().String(), "jobs/stuck")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderrOut, "give -owner or -force, not both")
	require.Eventually(t, func() bool { return strings.Contains(a.logs.String(), "force-release") }, 10*time.Second, 10*time.Millisecond)
	logs := a.logs.String()
	assert.Regexp(t, `\[INFO\] +raftlock\.http: api: force-release: ended a lease: caller=ops key=jobs/stuck token=`+
		strconv.FormatUint(lease.Token, 10)+` remote=127\.0\.0\.1:\d+`, logs)

	// SIGHUP: the new file's token works, the old ones do not.
	writeFile(t, path, `{"tokens": [{"name": "new", "secret": "`+aclNew+`", "rules": [{"prefix": "", "right": "read"}]}]}`)
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		return statusAs(t, a.httpURL, aclNew, "/v1/locks") == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, http.StatusUnauthorized, statusAs(t, a.httpURL, aclOps, "/v1/locks"))
	// A bad file on SIGHUP keeps the agent, and the tokens, running.
	writeFile(t, path, `{"tokens": 7}`)
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(a.logs.String(), "was not reloaded") }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, http.StatusOK, statusAs(t, a.httpURL, aclNew, "/v1/locks"))
	for _, secret := range []string{aclOps, aclJobs, aclNew} {
		assert.NotContains(t, a.logs.String(), secret)
	}
}
