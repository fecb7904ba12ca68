package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/apiserver"
	"github.com/raftlock/raftlock/lock"
)

const testToken = "c0ffee-7a1e-4b1d-9d0d-token"

// TestAgentServesHTTPSWithClientCertsAndToken: an agent with -cert-file,
// -key-file, -client-ca-file and a token (from a file named in the
// environment) serves only clients that bring a certificate of the CA and
// the token; the CLI brings them with its flags and environment.
func TestAgentServesHTTPSWithClientCertsAndToken(t *testing.T) {
	ca := newTestCA(t, "api")
	serverCert, serverKey := ca.issue(t, "agent", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.issue(t, "operator", x509.ExtKeyUsageClientAuth)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600))

	a := startAgentEnv(t, []string{"RAFTLOCK_HTTP_TOKEN_FILE=" + tokenFile},
		"-dev", "-cert-file", serverCert, "-key-file", serverKey, "-client-ca-file", ca.CAFile)
	require.True(t, strings.HasPrefix(a.httpURL, "https://"), a.httpURL)
	cert, err := tls.LoadX509KeyPair(clientCert, clientKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	a.clientConfig = api.ClientConfig{Token: testToken, TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}
	a.waitLeader(t)

	tls := []string{"-ca-file", ca.CAFile, "-client-cert", clientCert, "-client-key", clientKey}
	withToken := []string{"RAFTLOCK_HTTP_TOKEN=" + testToken}

	t.Run("with certificate and token", func(t *testing.T) {
		out, stderr, code := runBinary(t, withToken, append([]string{"status", "-addr", a.httpURL}, tls...)...)
		require.Equal(t, exitOK, code, stderr)
		assert.Contains(t, out, "node:    dev (leader)")
		assert.Regexp(t, `(?m)^dev\s.*\s`+regexp.QuoteMeta(a.httpURL)+`\s+healthy\s`, out, "the API URL is https://")

		out, stderr, code = runBinary(t, nil, append([]string{"lock", "-addr", a.httpURL, "-token-file", tokenFile}, append(tls, "k", "--", "sh", "-c", `echo "token $RAFTLOCK_TOKEN"`)...)...)
		require.Equal(t, exitOK, code, stderr)
		assert.Regexp(t, `^token [1-9][0-9]*\n$`, out)

		info, err := a.client(t).Inspect(context.Background(), "k")
		require.NoError(t, err)
		assert.False(t, info.Locked, "released after the command")
	})

	t.Run("without the token", func(t *testing.T) {
		for _, cmd := range [][]string{
			{"status"}, {"locks"}, {"release", "-owner", lock.NewOwner().String(), "k"}, {"lock", "k", "--", "true"},
		} {
			_, stderr, code := runBinary(t, nil, append(append([]string{cmd[0], "-addr", a.httpURL}, tls...), cmd[1:]...)...)
			assert.Equal(t, exitDenied, code, "%v: %s", cmd, stderr)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			assert.Contains(t, stderr, "unauthorized")
			assert.Contains(t, stderr, "RAFTLOCK_HTTP_TOKEN", "says how to give one")
		}
		_, stderr, code := runBinary(t, []string{"RAFTLOCK_HTTP_TOKEN=wrong"}, append([]string{"status", "-addr", a.httpURL}, tls...)...)
		assert.Equal(t, exitDenied, code, stderr)
		assert.Contains(t, stderr, "wrong token")
	})

	t.Run("without a client certificate", func(t *testing.T) {
		_, stderr, code := runBinary(t, withToken, "status", "-addr", a.httpURL, "-ca-file", ca.CAFile)
		assert.Equal(t, exitConfig, code, "a configuration error, not an unreachable agent: %s", stderr)
		assert.Contains(t, stderr, "-client-cert", "says what to set")
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		// The agent's alert says why, unless the request crossed its hang-up
		// (TLS 1.3 ends the client's handshake before the agent checks).
		assert.Regexp(t, `tls: certificate required|connection reset by peer`, stderr)
	})

	t.Run("without trusting the agent", func(t *testing.T) {
		_, stderr, code := runBinary(t, withToken, "status", "-addr", a.httpURL, "-client-cert", clientCert, "-client-key", clientKey)
		assert.Equal(t, exitConfig, code, "a configuration error, not an unreachable agent: %s", stderr)
		assert.Contains(t, stderr, "-ca-file", "says what to set")
		assert.Contains(t, stderr, "certificate signed by unknown authority")
	})

	t.Run("plain HTTP to the HTTPS port", func(t *testing.T) {
		_, stderr, code := runBinary(t, withToken, "status", "-addr", "http://"+a.httpAddr)
		assert.Equal(t, exitError, code, stderr)
		assert.Contains(t, stderr, "use an https:// address")
	})

	t.Run("healthz needs the certificate, not the token", func(t *testing.T) {
		cfg := a.clientConfig
		cfg.Token = ""
		c, err := api.NewClient(a.httpURL, cfg)
		require.NoError(t, err)
		h, err := c.Health(context.Background())
		require.NoError(t, err)
		assert.True(t, h.Ready)
	})
}

// TestPeerTLSCluster: three agents with -peer-* flags form a cluster over
// mutual TLS; an agent whose certificate another CA signed cannot join, says
// why, and the cluster keeps serving.
func TestPeerTLSCluster(t *testing.T) {
	ca := newTestCA(t, "peers")
	dir := t.TempDir()
	first := startAgent(t, append(ca.peerFlags(t, "a"), "-node-id", "a", "-data-dir", filepath.Join(dir, "a"), "-bind", "127.0.0.1:0", "-bootstrap")...)
	first.waitLeader(t)
	agents := []*agent{first}
	for _, id := range []string{"b", "c"} {
		// The environment works as well as the flags.
		cert, key := ca.issue(t, id)
		env := []string{"RAFTLOCK_PEER_CERT_FILE=" + cert, "RAFTLOCK_PEER_KEY_FILE=" + key, "RAFTLOCK_PEER_CA_FILE=" + ca.CAFile}
		agents = append(agents, startAgentEnv(t, env, "-node-id", id, "-data-dir", filepath.Join(dir, id), "-bind", "127.0.0.1:0", "-join", first.raftAddr))
	}
	for _, a := range agents {
		a.waitLeader(t)
	}

	// Strangers' agents try to join while the cluster works. Their
	// certificates come from another CA. One trusts only that CA, so it
	// refuses the members; the other also trusts the cluster's CA (a CA
	// certificate is no secret), so only the members' check of its
	// certificate can stop it.
	stranger := newTestCA(t, "stranger")
	bundle := filepath.Join(t.TempDir(), "both-cas.pem")
	strangerPEM, err := os.ReadFile(stranger.CAFile)
	require.NoError(t, err)
	clusterPEM, err := os.ReadFile(ca.CAFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bundle, append(strangerPEM, clusterPEM...), 0o600))
	strangers := map[string][]string{
		"d": stranger.peerFlags(t, "d"),
		"e": append(stranger.peerFlags(t, "e"), "-peer-ca-file", bundle), // the last -peer-ca-file wins
	}
	type joinResult struct {
		id, stderr string
		err        error
	}
	joins := make(chan joinResult, len(strangers))
	for id, flags := range strangers {
		cmd := exec.Command(binary, append([]string{"agent", "-log-level", "error", "-http", "127.0.0.1:0", "-node-id", id,
			"-data-dir", filepath.Join(dir, id), "-bind", "127.0.0.1:0", "-join", first.raftAddr}, flags...)...)
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		go func() {
			err := cmd.Wait()
			joins <- joinResult{id, stderr.String(), err}
		}()
	}

	owner := lock.NewOwner()
	lease, err := agents[2].client(t).Acquire(context.Background(), lock.AcquireRequest{Key: "shared", Owner: owner, TTL: time.Minute})
	require.NoError(t, err, "a follower forwards to the leader over TLS")
	for _, a := range agents {
		info, err := a.client(t).Inspect(context.Background(), "shared")
		require.NoError(t, err)
		assert.Equal(t, lease.Token, info.Token, "replicated over TLS")
	}

	for range strangers {
		var got joinResult
		select {
		case got = <-joins:
		case <-time.After(45 * time.Second):
			t.Fatal("a stranger's agent neither joined nor gave up")
		}
		id, stderr := got.id, got.stderr
		t.Logf("the stranger's agent %s said: %s", id, stderr)
		var exit *exec.ExitError
		require.ErrorAs(t, got.err, &exit)
		assert.Equal(t, exitError, exit.ExitCode())
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		assert.Contains(t, stderr, "join")
		if id == "d" {
			assert.Contains(t, stderr, "does not pass -peer-ca-file", "says which check failed")
			assert.Contains(t, stderr, "certificate signed by unknown authority")
		} else {
			// TLS 1.3: the dialer's handshake ends before the member checks its
			// certificate, so the refusal reaches it as the member's alert or,
			// if its first write comes first, as the member hanging up (a reset, or a broken pipe on the hello frame every connection now starts with).
			assert.Regexp(t, `remote error: tls:|connection reset by peer|broken pipe|connection lost|EOF`, stderr, "the member's refusal")
		}
	}

	st, err := first.client(t).Cluster(context.Background())
	require.NoError(t, err)
	assert.Len(t, st.Members, 3, "the stranger was not added")
	released, err := first.client(t).Release(context.Background(), "shared", owner)
	require.NoError(t, err)
	assert.True(t, released, "the cluster still serves")
}

func TestPeerCertificateMustPassThePeerCA(t *testing.T) {
	ca, other := newTestCA(t, "peers"), newTestCA(t, "other")
	cert, key := ca.issue(t, "a")
	serverOnly, serverOnlyKey := ca.issue(t, "server-only", x509.ExtKeyUsageServerAuth)
	for name, flags := range map[string][]string{
		"signed by another CA": {"-peer-cert-file", cert, "-peer-key-file", key, "-peer-ca-file", other.CAFile},
		"not for client auth":  {"-peer-cert-file", serverOnly, "-peer-key-file", serverOnlyKey, "-peer-ca-file", ca.CAFile},
		"key of another cert":  {"-peer-cert-file", cert, "-peer-key-file", serverOnlyKey, "-peer-ca-file", ca.CAFile},
		"CA file not PEM":      {"-peer-cert-file", cert, "-peer-key-file", key, "-peer-ca-file", key},
	} {
		t.Run(name, func(t *testing.T) {
			out, stderr, code := runBinary(t, nil, append([]string{"agent", "-dev", "-http", "127.0.0.1:0"}, flags...)...)
			assert.Equal(t, exitUsage, code, stderr)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			assert.Contains(t, stderr, "-peer-")
			assert.Empty(t, out, "the agent did not start")
		})
	}
}

func TestAPIURL(t *testing.T) {
	bound := func(s string) net.Addr {
		a, err := net.ResolveTCPAddr("tcp", s)
		require.NoError(t, err)
		return a
	}
	cases := []struct {
		name            string
		explicit, bound string
		advertise, bind string
		https           bool
		want            string
	}{
		{name: "bound host", bound: "127.0.0.1:7070", bind: "127.0.0.1:7071", want: "http://127.0.0.1:7070"},
		{name: "https", bound: "10.0.0.7:7070", https: true, want: "https://10.0.0.7:7070"},
		{name: "wildcard: advertise's host", bound: "0.0.0.0:7070", advertise: "10.0.0.7:7071", bind: "0.0.0.0:7071", want: "http://10.0.0.7:7070"},
		{name: "wildcard v6: advertise's name", bound: "[::]:7070", advertise: "node1.example:7071", want: "http://node1.example:7070"},
		{name: "wildcard: bind's host", bound: "0.0.0.0:7070", bind: "10.0.0.8:7071", want: "http://10.0.0.8:7070"},
		{name: "wildcard: v6 bind", bound: "[::]:7070", bind: "[fd00::8]:7071", https: true, want: "https://[fd00::8]:7070"},
		{name: "wildcard everywhere: unknown", bound: "0.0.0.0:7070", advertise: "", bind: "0.0.0.0:7071", want: ""},
		{name: "wildcard advertise is no help", bound: "[::]:7070", advertise: "[::]:7071", bind: ":7071", want: ""},
		{name: "explicit host:port", explicit: "lb.example:443", bound: "0.0.0.0:7070", https: true, want: "https://lb.example:443"},
		{name: "explicit URL kept", explicit: "http://proxy.example:8080/raftlock/", bound: "127.0.0.1:7070", https: true, want: "http://proxy.example:8080/raftlock"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := apiURL(c.explicit, bound(c.bound), c.advertise, c.bind, c.https)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
	for _, bad := range []string{"ftp://x:1", "http://0.0.0.0:7070", "http://:7070", "http://x:1/?q", "%zz"} {
		_, err := apiURL(bad, bound("127.0.0.1:7070"), "", "", false)
		assert.Error(t, err, bad)
	}
}

// The shared token, from -http-token or -http-token-file, must be as long
// as every -http-acl-file secret (apiserver.MinSecretLen), and the error
// names the flag that gave it.
func TestAgentTokenHasTheSecretsMinimum(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("abcde\n"), 0o600))
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"-http-token-file", short}, "-http-token-file " + short + ":"},
		{[]string{"-http-token", "abcde"}, "-http-token:"},
		{[]string{"-http-token", "0123456789abcde"}, "-http-token:"}, // 15: one short
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			// -max-http-conns -1 is refused after the token is read: an
			// agent that took the token stops there rather than run.
			code := agentCommand(append([]string{"-dev", "-http", "127.0.0.1:0", "-max-http-conns", "-1"}, tc.args...), &stdout, &stderr)
			assert.Equal(t, exitUsage, code, stderr.String())
			assert.Contains(t, stderr.String(), tc.flag)
			assert.Contains(t, stderr.String(), fmt.Sprintf("shorter than %d", apiserver.MinSecretLen))
			assert.NotContains(t, stderr.String(), "abcde", "the secret is never repeated")
		})
	}
}

// Every file of secrets the agent reads warns when other users may read
// it, as the -http-acl-file does: one check of the mode.
func TestSecretFilesOthersMayReadAreWarnedAbout(t *testing.T) {
	dir := t.TempDir()
	files := map[string]os.FileMode{"token": 0o666, "gossip.keys": 0o644, "api-key.pem": 0o640, "peer-key.pem": 0o600}
	for name, mode := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte("x"), 0o600))
		require.NoError(t, os.Chmod(path, mode))
	}
	f := &agentFlags{httpTokenFile: filepath.Join(dir, "token"), gossipKeyFile: filepath.Join(dir, "gossip.keys"),
		keyFile: filepath.Join(dir, "api-key.pem"), peerKey: filepath.Join(dir, "peer-key.pem")}
	var logs bytes.Buffer
	f.warnSharedSecretFiles(hclog.New(&hclog.LoggerOptions{Output: &logs}))
	for _, flag := range []string{"-http-token-file", "-gossip-key-file", "-key-file"} {
		assert.Contains(t, logs.String(), "flag="+flag, "warned about %s", flag)
	}
	assert.NotContains(t, logs.String(), "flag=-peer-key-file", "0600 is private")
	assert.Equal(t, 3, strings.Count(logs.String(), "[WARN]"))
	assert.Contains(t, logs.String(), "chmod 600")
}
