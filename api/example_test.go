package api_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/apiserver"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// A node serves its store over HTTP; a program elsewhere uses package lock
// through the client as if the store were local.
func Example() {
	store := memstore.New() // a *cluster.Node in production
	defer store.Close()
	node := httptest.NewServer(apiserver.NewHandler(store, apiserver.Config{}))
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

// A client given several nodes of a cluster sends each request to the one
// that last answered, and moves on to the next when it cannot reach it.
func ExampleNewFailoverClient() {
	store := memstore.New()
	defer store.Close()
	node := httptest.NewServer(apiserver.NewHandler(store, apiserver.Config{}))
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
