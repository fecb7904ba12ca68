package apiserver_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/apiserver"
	"github.com/raftlock/raftlock/lock/memstore"
)

// NewServer's timeouts bound every phase of a request except an acquire's
// wait; JSONErrorListener makes the answers net/http gives by itself (431,
// a malformed request) JSON too. Shut it down with a deadline, since
// Shutdown waits for long-polls.
func ExampleNewServer() {
	store := memstore.New()
	defer store.Close()
	srv := apiserver.NewServer("127.0.0.1:8300", apiserver.NewHandler(store, apiserver.Config{}))
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if err := srv.Serve(apiserver.JSONErrorListener(ln)); !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
	}()

	// ... on shutdown:
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close() // long-polls still parked: cut them
	}
}

// A node that requires a token refuses every request without it but
// /healthz; a client sends it with ClientConfig.Token. Serve it over TLS
// (http.Server.TLSConfig, ServeTLS) so that nobody on the path reads it.
func ExampleConfig_token() {
	store := memstore.New()
	defer store.Close()
	node := httptest.NewServer(apiserver.NewHandler(store, apiserver.Config{Token: "7f3e9c2a51d84b06"}))
	defer node.Close()
	ctx := context.Background()

	anonymous, err := api.NewClient(node.URL, api.ClientConfig{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = anonymous.Inspect(ctx, "reports/daily")
	fmt.Println("without the token:", errors.Is(err, api.ErrUnauthorized))
	health, err := anonymous.Health(ctx)
	fmt.Println("health without the token:", health.Ready, err)

	client, err := api.NewClient(node.URL, api.ClientConfig{Token: "7f3e9c2a51d84b06"})
	if err != nil {
		log.Fatal(err)
	}
	info, err := client.Inspect(ctx, "reports/daily")
	fmt.Println("with the token:", info.Locked, err)
	// Output:
	// without the token: true
	// health without the token: true <nil>
	// with the token: false <nil>
}
