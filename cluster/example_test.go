package cluster_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/lock"
)

// A single node bootstraps a new cluster; other replicas of the application
// would set Join to its address instead. The node is a lock.Store.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "raftlock-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	cfg := cluster.DefaultConfig()
	cfg.NodeID = "node-1"
	cfg.DataDir = dir
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Bootstrap = true
	cfg.Logger = hclog.NewNullLogger()
	node, err := cluster.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	owner := lock.NewOwner()
	// The first call waits for the node to elect itself (about a second
	// with the default timings); it is retried within ctx.
	lease, err := node.Acquire(ctx, lock.AcquireRequest{Key: "invoice:42", Owner: owner, TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("token", lease.Token)

	info, err := node.Inspect(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("locked", info.Locked)

	released, err := node.Release(ctx, "invoice:42", owner)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released", released)
	// Output:
	// token 1
	// locked true
	// released true
}
