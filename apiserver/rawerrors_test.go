package apiserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock/memstore"
)

// serveWithJSONErrors serves a memory store's handler as the agent does:
// NewServer's settings, through JSONErrorListener, over TLS when ca is given.
func serveWithJSONErrors(t *testing.T, ca *testCA) *httptest.Server {
	t.Helper()
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	srv := httptest.NewUnstartedServer(NewHandler(store, Config{}))
	std := NewServer("", srv.Config.Handler)
	srv.Config.ReadHeaderTimeout, srv.Config.MaxHeaderBytes = std.ReadHeaderTimeout, std.MaxHeaderBytes
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Listener = JSONErrorListener(srv.Listener)
	if ca != nil {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "node")}, MinVersion: tls.VersionTLS12}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// rawExchange writes request on a new connection to addr and reads the
// answer until the server closes.
func rawExchange(t *testing.T, addr, request string) *http.Response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	// The server may answer before it has read everything (431): write
	// on the side, and ignore the error of a write it cut short.
	go func() { _, _ = io.WriteString(conn, request) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	return resp
}

// jsonErrorCode checks that resp is a JSON error answer and returns its code.
func jsonErrorCode(t *testing.T, resp *http.Response) (code, message string) {
	t.Helper()
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), string(raw))
	var body api.ErrorBody
	require.NoError(t, json.Unmarshal(raw, &body), "not JSON: %q", raw)
	return body.Error.Code, body.Error.Message
}

// TestServerOwnErrorsAreJSON: what net/http answers by itself, before the
// handler, is JSON with a code through JSONErrorListener.
func TestServerOwnErrorsAreJSON(t *testing.T) {
	srv := serveWithJSONErrors(t, nil)
	addr := srv.Listener.Addr().String()
	cases := []struct {
		name, request string
		status        int
		code, says    string
	}{
		{"headers too large", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 2*ServerMaxHeaderBytes) + "\r\n\r\n",
			431, api.CodeHeadersTooLarge, "Header Fields Too Large"},
		{"malformed request line", "NONSENSE\r\n\r\n", 400, api.CodeBadRequest, "Bad Request"},
		{"missing Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, api.CodeBadRequest, "missing required Host header"},
		{"HTTP version", "GET /healthz HTTP/3.0\r\nHost: x\r\n\r\n", 505, api.CodeUnsupportedProtocol, "unsupported protocol version"},
		{"transfer encoding", "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, api.CodeUnsupportedProtocol, "transfer encoding"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := rawExchange(t, addr, tc.request)
			assert.Equal(t, tc.status, resp.StatusCode)
			code, msg := jsonErrorCode(t, resp)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, msg, tc.says)
		})
	}

	t.Run("answers of the handler are untouched", func(t *testing.T) {
		resp := rawExchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
		defer resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		var h api.HealthResponse
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&h))
		assert.Equal(t, "ok", h.Status)
	})
}

// TestPlainHTTPToTheHTTPSPortIsJSON: plain HTTP to a node that serves HTTPS
// gets a JSON 400 https_required, which the api.Client reports as such.
func TestPlainHTTPToTheHTTPSPortIsJSON(t *testing.T) {
	srv := serveWithJSONErrors(t, newTestCA(t))
	addr := srv.Listener.Addr().String()
	resp := rawExchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	code, msg := jsonErrorCode(t, resp)
	assert.Equal(t, api.CodeHTTPSRequired, code)
	assert.Contains(t, msg, "https://")

	c, err := api.NewClient("http://"+addr, api.ClientConfig{})
	require.NoError(t, err)
	_, err = c.Inspect(context.Background(), "k")
	assert.ErrorIs(t, err, api.ErrBadRequest)
	var se *api.ServerError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, api.CodeHTTPSRequired, se.Code)
	assert.Contains(t, err.Error(), "https://")
}
