package lock_test

import (
	"context"
	"fmt"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// Watch yields a key's state now, then each change, without polling.
func ExampleClient_Watch() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	l := c.Lock("invoice:42")
	for info, err := range c.Watch(ctx, "invoice:42") {
		if err != nil {
			fmt.Println("watch ended:", err)
			break
		}
		fmt.Println("locked:", info.Locked, "waiters:", info.Waiters)
		switch {
		case !info.Locked && l.Token() == 0:
			_ = l.Acquire(ctx) // someone takes it
		case info.Locked:
			_, _ = l.Release(ctx) // and gives it back
		default:
			stop() // seen it all; the loop ends with ctx's error
		}
	}
	// Output:
	// locked: false waiters: 0
	// locked: true waiters: 0
	// locked: false waiters: 0
	// watch ended: lock: watch: context canceled
}

// WatchKey is one blocking query: give it the index of the previous answer
// and it returns when the key has changed since (or the wait ends).
func ExampleClient_WatchKey() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	info, index, _ := c.WatchKey(ctx, "invoice:42", lock.WatchQuery{}) // index 0: at once
	fmt.Println("locked:", info.Locked)

	go func() { _ = c.Lock("invoice:42").Acquire(ctx) }()
	info, _, _ = c.WatchKey(ctx, "invoice:42", lock.WatchQuery{Index: index}) // blocks until the acquire
	fmt.Println("locked:", info.Locked)
	// Output:
	// locked: false
	// locked: true
}

// WatchPrefix yields the held keys under a prefix each time one changes.
func ExampleClient_WatchPrefix() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	for locks, err := range c.WatchPrefix(ctx, "jobs/") {
		if err != nil {
			break
		}
		fmt.Println(len(locks), "jobs running")
		if len(locks) == 2 {
			break
		}
		_ = c.Lock(fmt.Sprintf("jobs/%d", len(locks))).Acquire(ctx)
	}
	// Output:
	// 0 jobs running
	// 1 jobs running
	// 2 jobs running
}
