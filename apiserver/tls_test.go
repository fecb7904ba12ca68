package apiserver

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/locktest"
	"github.com/raftlock/raftlock/lock/memstore"
)

// tlsNode is a Handler over a memory store served over HTTPS (HTTP/2 when
// the client offers it, as the agent serves it), whose certificate a
// throwaway CA signed.
type tlsNode struct {
	url   string
	store *memstore.Store
	ca    *testCA
	http2 *atomic.Int32 // requests served over HTTP/2
}

// newTLSNode serves cfg's handler over HTTPS; with clientCA, only clients
// presenting a certificate of ca get past the handshake.
func newTLSNode(t testing.TB, cfg Config, clientCA bool) *tlsNode {
	t.Helper()
	ca := newTestCA(t)
	store := memstore.New()
	h := NewHandler(store, cfg)
	n := &tlsNode{store: store, ca: ca, http2: &atomic.Int32{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			n.http2.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point of some tests
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "node")}, MinVersion: tls.VersionTLS12}
	if clientCA {
		srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
		srv.TLS.ClientCAs = ca.pool
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = store.Close() }) // first, so parked long-polls end
	n.url = srv.URL
	return n
}

// clientTLS trusts the node's CA and presents cert when given.
func (n *tlsNode) clientTLS(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: n.ca.pool, Certificates: certs, MinVersion: tls.VersionTLS12}
}

// TestClientConformanceOverHTTPS: the whole store contract holds over
// HTTP/2 with TLS, client certificates and a token, as the agent serves it.
func TestClientConformanceOverHTTPS(t *testing.T) {
	var nodes []*tlsNode
	locktest.TestStore(t, func(t *testing.T) lock.Store {
		n := newTLSNode(t, Config{Token: testToken}, true)
		nodes = append(nodes, n)
		// api.Client's own transport speaks HTTP/1.1; curl and other clients
		// may well pick HTTP/2, so the suite runs over it.
		tr := &http.Transport{TLSClientConfig: n.clientTLS(n.ca.issue(t, "client")), ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		c, err := api.NewClient(n.url, api.ClientConfig{Token: testToken, HTTPClient: &http.Client{Transport: tr}})
		require.NoError(t, err)
		return c
	})
	served := int32(0)
	for _, n := range nodes {
		served += n.http2.Load()
	}
	assert.Positive(t, served, "the suite ran over HTTP/2")
}

func TestHTTPSWithClientCertificates(t *testing.T) {
	n := newTLSNode(t, Config{}, true)
	ctx := context.Background()
	req := lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute}

	withCert, err := api.NewClient(n.url, api.ClientConfig{TLS: n.clientTLS(n.ca.issue(t, "client"))})
	require.NoError(t, err)
	lease, err := withCert.Acquire(ctx, req)
	require.NoError(t, err, "a client with a certificate of the CA is served")
	assert.Positive(t, lease.Token)
	assert.Zero(t, n.http2.Load(), "Client speaks HTTP/1.1")

	stranger := newTestCA(t)
	refused := map[string]*tls.Config{
		"no client certificate":            n.clientTLS(),
		"certificate of another authority": n.clientTLS(stranger.issue(t, "stranger")),
	}
	for name, cfg := range refused {
		t.Run(name, func(t *testing.T) {
			c, err := api.NewClient(n.url, api.ClientConfig{TLS: cfg})
			require.NoError(t, err)
			_, err = c.Inspect(ctx, "k")
			require.Error(t, err)
			assert.ErrorIs(t, err, lock.ErrUnavailable)
			// TLS 1.3: the client's handshake ends before the node checks its
			// certificate; the node's alert says why, unless the client's
			// request crossed the node's hang-up (then: a reset).
			assert.Regexp(t, `remote error: tls:|connection reset by peer`, err.Error())
			_, err = c.Release(ctx, "k", req.Owner)
			assert.Error(t, err)
			_, err = c.Health(ctx)
			assert.Error(t, err, "the handshake fails before any route, /healthz included")
		})
	}

	t.Run("client that does not trust the node", func(t *testing.T) {
		c, err := api.NewClient(n.url, api.ClientConfig{TLS: &tls.Config{Certificates: []tls.Certificate{n.ca.issue(t, "client")}}})
		require.NoError(t, err)
		_, err = c.Acquire(ctx, lock.AcquireRequest{Key: "other", Owner: lock.NewOwner(), TTL: time.Minute})
		assert.ErrorIs(t, err, lock.ErrUnavailable)
		assert.NotErrorIs(t, err, lock.ErrUnknownOutcome, "nothing was sent to a node we could not verify")
		assert.ErrorContains(t, err, "certificate")
	})

	info, err := n.store.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked, "refused clients released nothing")
	assert.Equal(t, lease.Token, info.Token)
}

func TestClientTLSConfig(t *testing.T) {
	_, err := api.NewClient("https://127.0.0.1:1", api.ClientConfig{TLS: &tls.Config{}, HTTPClient: &http.Client{}})
	assert.ErrorContains(t, err, "both TLS and HTTPClient")

	// The client keeps its own copy: changing the config afterwards changes nothing.
	n := newTLSNode(t, Config{}, false)
	cfg := n.clientTLS()
	c, err := api.NewClient(n.url, api.ClientConfig{TLS: cfg})
	require.NoError(t, err)
	cfg.RootCAs = nil
	_, err = c.Inspect(context.Background(), "k")
	assert.NoError(t, err)
}
