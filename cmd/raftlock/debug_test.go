package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// readBundle reads a debug bundle, a .tar.gz or a directory, as file name -> contents.
func readBundle(t *testing.T, path string) map[string]string {
	t.Helper()
	files := map[string]string{}
	if !strings.HasSuffix(path, ".tar.gz") {
		entries, err := os.ReadDir(path)
		require.NoError(t, err)
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(path, e.Name()))
			require.NoError(t, err)
			files[e.Name()] = string(b)
		}
		return files
	}
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[filepath.Base(h.Name)] = string(b)
	}
	return files
}

func TestDebugBundleHoldsStatusConfigLogsAndGoroutinesButNoSecret(t *testing.T) {
	secret := "debug-bundle-token-6f1c2a"
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(secret+"\n"), 0o600))
	ca := newTestCA(t, "api")
	certFile, keyFile := ca.issue(t, "agent", x509.ExtKeyUsageServerAuth)
	keyPEM, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	a := startAgent(t, "-dev", "-enable-pprof", "-log-level", "info", "-http-token-file", tokenFile, "-cert-file", certFile, "-key-file", keyFile)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	a.clientConfig = api.ClientConfig{Token: secret, TLS: &tls.Config{RootCAs: pool}}
	a.waitLeader(t)
	_, err = a.client(t).Acquire(context.Background(), lock.AcquireRequest{Key: "billing/invoice-42", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)

	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	stdout, stderr, code := runBinary(t, nil, "debug", "-addr", a.httpURL, "-ca-file", ca.CAFile, "-token-file", tokenFile, "-o", out)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "wrote "+out)
	assert.NotContains(t, stdout, "not collected")

	files := readBundle(t, out)
	for _, name := range []string{"index.json", "cluster.json", "health.json", "config.json", "logs.json", "metrics.txt", "locks.json", "goroutines.txt", "heap.pprof"} {
		assert.NotEmpty(t, files[name], "%s is in the bundle", name)
	}
	for name, body := range files {
		assert.NotContains(t, body, secret, "%s holds the token", name)
		assert.NotContains(t, body, "PRIVATE KEY", "%s holds a key", name)
		assert.NotContains(t, body, strings.TrimSpace(string(keyPEM)), "%s holds the key file", name)
	}
	assert.Contains(t, files["goroutines.txt"], "goroutine ")
	assert.Contains(t, files["cluster.json"], `"node_id":"dev"`)
	assert.Contains(t, files["locks.json"], "billing/invoice-42")
	assert.Contains(t, files["metrics.txt"], "raftlock_api_operations_total")

	var cfg struct {
		Flags  map[string]string `json:"flags"`
		NodeID string            `json:"node_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(files["config.json"]), &cfg))
	assert.Equal(t, "dev", cfg.NodeID)
	assert.Equal(t, tokenFile, cfg.Flags["http-token-file"], "a file's path is no secret")
	assert.Equal(t, keyFile, cfg.Flags["key-file"])
	assert.Equal(t, "true", cfg.Flags["enable-pprof"])

	var logs api.AgentLogsResponse
	require.NoError(t, json.Unmarshal([]byte(files["logs.json"]), &logs))
	assert.NotEmpty(t, logs.Lines, "the agent logs at info while it starts")

	var index debugIndex
	require.NoError(t, json.Unmarshal([]byte(files["index.json"]), &index))
	assert.Empty(t, index.Missing)
	assert.Equal(t, a.httpURL, index.Agent)
}

func TestDebugWithoutPprofSaysWhatIsMissing(t *testing.T) {
	secret := "flag-token-3d9e-0c4b7a"
	a := startAgent(t, "-dev", "-http-token", secret)
	a.clientConfig = api.ClientConfig{Token: secret}
	a.waitLeader(t)

	dir := filepath.Join(t.TempDir(), "bundle")
	stdout, stderr, code := runBinary(t, []string{"RAFTLOCK_HTTP_TOKEN=" + secret}, "debug", "-addr", a.httpURL, "-o", dir)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "not collected: goroutines.txt (profiling is off: start the agent with -enable-pprof")

	files := readBundle(t, dir)
	assert.NotContains(t, files, "goroutines.txt")
	for name, body := range files {
		assert.NotContains(t, body, secret, "%s holds the token", name)
	}
	var cfg struct {
		Flags map[string]string `json:"flags"`
	}
	require.NoError(t, json.Unmarshal([]byte(files["config.json"]), &cfg))
	assert.Equal(t, redacted, cfg.Flags["http-token"], "the token flag is redacted")
	var index debugIndex
	require.NoError(t, json.Unmarshal([]byte(files["index.json"]), &index))
	assert.Contains(t, index.Missing["goroutines.txt"], "-enable-pprof")
}

func TestDebugRefusesBadUse(t *testing.T) {
	a := startAgent(t, "-dev", "-http-token", "right-token-5e0a9c27")
	a.clientConfig = api.ClientConfig{Token: "right-token-5e0a9c27"}
	a.waitLeader(t)

	out := filepath.Join(t.TempDir(), "b.tar.gz")
	_, stderr, code := runBinary(t, nil, "debug", "-addr", a.httpURL, "-token", "wrong", "-o", out)
	assert.Equal(t, exitDenied, code, stderr)
	assert.NoFileExists(t, out, "nothing written without the token")

	existing := t.TempDir()
	_, stderr, code = runBinary(t, nil, "debug", "-addr", a.httpURL, "-token", "right-token-5e0a9c27", "-o", existing)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "-o "+existing+" exists already")

	_, stderr, code = runBinary(t, nil, "debug", "-addr", a.httpURL, "extra")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, `unexpected argument "extra"`)
}
