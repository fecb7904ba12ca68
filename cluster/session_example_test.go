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

// An embedded node's process makes one session at startup and binds its
// locks to it: if the process crashes, its locks are free within the
// session TTL, however many it held; a clean shutdown frees them at once.
func ExampleNode_CreateSession() {
	dir, err := os.MkdirTemp("", "raftlock-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := cluster.DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.BindAddr, cfg.Bootstrap = "node-1", dir, "127.0.0.1:0", true
	cfg.Logger = hclog.NewNullLogger()
	node, err := cluster.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := node.Ready(ctx); err != nil {
		log.Fatal(err)
	}

	c := lock.New(node)
	sess, err := c.NewSession(ctx, lock.SessionTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	locks := c.WithSession(sess) // every lock of this process ends with sess

	for _, key := range []string{"shard/1", "shard/2"} {
		if err := locks.Lock(key, lock.Metadata("replica "+cfg.NodeID)).Acquire(ctx); err != nil {
			log.Fatal(err)
		}
	}
	held, _ := c.List(ctx, lock.ListRequest{Prefix: "shard/"})
	fmt.Println("held:", len(held), "by", held[0].Metadata)

	if err := sess.Close(ctx); err != nil { // on shutdown: all released in one step
		log.Fatal(err)
	}
	held, _ = c.List(ctx, lock.ListRequest{Prefix: "shard/"})
	fmt.Println("held after Close:", len(held))
	// Output:
	// held: 2 by replica node-1
	// held after Close: 0
}
