package api_test

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
	"github.com/raftlock/raftlock/lock"
)

// A node serves its store over HTTP; a program elsewhere uses package lock
// through the client as if the store were local.
func Example() {
	store := lock.NewMemoryStore() // a *cluster.Node in production
	defer store.Close()
	node := httptest.NewServer(api.NewHandler(store, api.Config{}))
	defer node.Close()

	client, err := api.NewClient(node.URL, api.ClientConfig{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	locks := lock.New(client)

	report := locks.Lock("reports/daily", lock.TTL(time.Minute))
	if err := report.Acquire(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired, fencing token", report.Token())

	info, err := client.Inspect(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("locked:", info.Locked, "token:", info.Token)

	ok, err := locks.Lock("reports/daily").TryAcquire(ctx)
	fmt.Println("another handle got it:", ok, err)

	released, err := report.Release(ctx)
	fmt.Println("released:", released, err)
	// Output:
	// acquired, fencing token 1
	// locked: true token: 1
	// another handle got it: false <nil>
	// released: true <nil>
}

// NewServer's timeouts bound every phase of a request except an acquire's
// wait; JSONErrorListener makes the answers net/http gives by itself (431,
// a malformed request) JSON too. Shut it down with a deadline, since
// Shutdown waits for long-polls.
func ExampleNewServer() {
	store := lock.NewMemoryStore()
	defer store.Close()
	srv := api.NewServer("127.0.0.1:8300", api.NewHandler(store, api.Config{}))
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if err := srv.Serve(api.JSONErrorListener(ln)); !errors.Is(err, http.ErrServerClosed) {
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
	store := lock.NewMemoryStore()
	defer store.Close()
	node := httptest.NewServer(api.NewHandler(store, api.Config{Token: "7f3e9c2a51d84b06"}))
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

// A client given several nodes of a cluster sends each request to the one
// that last answered, and moves on to the next when it cannot reach it.
func ExampleNewFailoverClient() {
	store := lock.NewMemoryStore()
	defer store.Close()
	node := httptest.NewServer(api.NewHandler(store, api.Config{}))
	defer node.Close()

	client, err := api.NewFailoverClient([]string{"http://127.0.0.1:1", node.URL}, api.ClientConfig{})
	if err != nil {
		log.Fatal(err)
	}
	owner := lock.NewOwner()
	lease, err := client.Acquire(context.Background(), lock.AcquireRequest{Key: "jobs/nightly", Owner: owner, TTL: time.Minute})
	fmt.Println("token:", lease.Token, err)
	fmt.Println("now talking to the second node:", client.Endpoint() == node.URL)
	// Output:
	// token: 1 <nil>
	// now talking to the second node: true
}
