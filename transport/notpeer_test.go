package transport

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCallToHTTPServerFailsAtOnce: an address that is an HTTP server (an
// agent's API port given as a peer) fails the call with ErrNotPeer saying
// so, instead of waiting for the caller's context (the server waits for the
// rest of a request that never comes) or reporting an unknown frame type.
func TestCallToHTTPServerFailsAtOnce(t *testing.T) {
	requireNoLeaks(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	client := listen(t, Config{})
	ctx := testCtx(t)

	_, err := client.Call(ctx, srv.Listener.Addr().String(), []byte("join me"))
	require.Error(t, err)
	assert.NoError(t, ctx.Err(), "answered before the caller gave up")
	assert.ErrorIs(t, err, ErrNotPeer)
	assert.ErrorIs(t, err, ErrNotSent, "nothing there acted on it")
	assert.ErrorContains(t, err, "answered HTTP")
	assert.ErrorContains(t, err, "-bind")
}

// TestPlainCallToTLSPeerSaysTLS: a transport without TLS calling one that
// requires it learns why the peer hung up.
func TestPlainCallToTLSPeerSaysTLS(t *testing.T) {
	requireNoLeaks(t)
	serverTLS, clientTLS := selfSignedTLS(t)
	server := listen(t, Config{ServerTLS: serverTLS, ClientTLS: clientTLS})
	server.Handle(echo)
	client := listen(t, Config{})
	ctx := testCtx(t)

	_, err := client.Call(ctx, server.Addr().String(), []byte("hello"))
	require.Error(t, err)
	assert.NoError(t, ctx.Err())
	assert.ErrorIs(t, err, ErrNotPeer)
	assert.ErrorContains(t, err, "speaks TLS")
	assert.ErrorContains(t, err, "-peer-cert-file")
}

// TestPeersIgnoreTheHTTPProbe: the probe every connection starts with
// changes nothing between peers, with and without TLS.
func TestPeersIgnoreTheHTTPProbe(t *testing.T) {
	requireNoLeaks(t)
	serverTLS, clientTLS := selfSignedTLS(t)
	for _, cfg := range []Config{{}, {ServerTLS: serverTLS, ClientTLS: clientTLS}} {
		server := listen(t, cfg)
		server.Handle(echo)
		client := listen(t, cfg)
		for range 20 {
			res, err := client.Call(testCtx(t), server.Addr().String(), []byte("ping"))
			require.NoError(t, err)
			assert.Equal(t, "ping", string(res))
		}
	}
}
