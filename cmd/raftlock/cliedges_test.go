package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/apiserver"
	"github.com/raftlock/raftlock/lock/memstore"
)

// Usage errors that used to pass, each refused in one line that names
// what was typed and what to do.
func TestUsageErrorsNameWhatToFix(t *testing.T) {
	dir := t.TempDir()
	spaced := filepath.Join(dir, "spaced-token")
	writeFile(t, spaced, "has a space-0123456789abcdef\n")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		// -n 0 was a plain mutex.
		{[]string{"lock", "-n", "0", "k", "--", "true"}, []string{"-n must be between 1 and 65536 (got 0)", "leave -n out for a plain lock"}},
		{[]string{"lock", "-n", "-3", "k", "--", "true"}, []string{"-n must be between 1 and 65536 (got -3)"}},
		// The command's first word was taken for KEY.
		{[]string{"lock", "--", "echo", "hi"}, []string{"KEY is missing", "raftlock lock [flags] KEY -- COMMAND"}},
		{[]string{"lock", "-ttl", "5s", "--", "echo"}, []string{"KEY is missing"}},
		// The error named -http-token, which was not typed.
		{[]string{"agent", "-dev", "-http", "127.0.0.1:0", "-http-token-file", spaced}, []string{"-http-token-file " + spaced + ": "}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, stderr, code := runBinary(t, nil, tc.args...)
			assert.Equal(t, exitUsage, code, stderr)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			for _, w := range tc.want {
				assert.Contains(t, stderr, w)
			}
			assert.NotContains(t, stderr, "-http-token:")
			assert.Empty(t, out)
		})
	}

	// Still fine: a KEY that starts with '-' after --, and -n 1.
	_, stderr, code := runBinary(t, nil, "lock", "-addr", "http://127.0.0.1:1", "--", "-k", "--", "true")
	assert.Equal(t, exitUnavailable, code, "got past the usage checks: %s", stderr)
	_, stderr, code = runBinary(t, nil, "lock", "-addr", "http://127.0.0.1:1", "-n", "1", "k", "--", "true")
	assert.Equal(t, exitUnavailable, code, "got past the usage checks: %s", stderr)
}

// raftlock locks prints nothing to stdout, not even the table's header,
// when the agent refuses the token (401) or its right (403).
func TestLocksPrintsNothingWhenRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acl.json")
	writeFile(t, path, aclFile)
	tokens, err := loadTokens(path, aclShared)
	require.NoError(t, err)
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	srv := httptest.NewServer(apiserver.NewHandler(store, apiserver.Config{Token: aclShared, Tokens: tokens}))
	t.Cleanup(srv.Close)

	for _, tc := range []struct{ name, token, prefix string }{
		{"wrong token", "wrong-secret-0123456789abcdef", ""},
		{"no right on the prefix", aclJobs, "other/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runBinary(t, nil, "locks", "-addr", srv.URL, "-token", tc.token, tc.prefix)
			assert.Equal(t, exitDenied, code, stderr)
			assert.Empty(t, out)
		})
	}
	out, stderr, code := runBinary(t, nil, "locks", "-addr", srv.URL, "-token", aclJobs, "jobs/")
	require.Equal(t, exitOK, code, stderr)
	assert.True(t, strings.HasPrefix(out, "KEY"), "the header once the answer is in: %q", out)
}

// The token flags' error names the file flag when the token came from a file.
func TestTokenErrorNamesTheFlagGiven(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte("has a space-0123456789abcdef"), 0o600))
	fs := newFlagSet("agent", "", "", nil, nil)
	fs.onCommandLine = map[string]bool{"http-token-file": true}
	_, err := token(fs, "http-token", "", "http-token-file", path, apiserver.ValidateSecret)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "-http-token-file "+path+": "), err.Error())
	_, err = token(fs, "http-token", "has a space-0123456789abcdef", "http-token-file", "", apiserver.ValidateSecret)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "-http-token: "), err.Error())
}
