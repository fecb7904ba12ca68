package memstore_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// A memory store behind the lock API: a second handle on the key finds it
// held.
func ExampleNew() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	first := c.Lock("invoice:42")
	if err := first.Acquire(ctx); err != nil {
		fmt.Println(err)
		return
	}
	got, err := c.Lock("invoice:42").TryAcquire(ctx)
	fmt.Println(got, err)
	// Output: false <nil>
}

// Quotas lets a test see how a program handles a store that is full.
func ExampleQuotas() {
	store := memstore.New(memstore.Quotas(1, 0, 0)) // one lock at most
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	_, _ = c.Lock("a").TryAcquire(ctx)
	_, err := c.Lock("b").TryAcquire(ctx)
	fmt.Println(errors.Is(err, lock.ErrQuotaExceeded))
	// Output: true
}
