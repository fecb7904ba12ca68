package lock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// A semaphore lets at most n holders in at once: here two of three
// workers get a slot, and the third finds the semaphore full. Each holder
// has its own fencing token and lease.
func ExampleClient_Semaphore() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	var workers []*lock.Lock
	for range 3 {
		w := c.Semaphore("render-slots", 2)
		ok, err := w.TryAcquire(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println("got a slot:", ok)
		workers = append(workers, w)
	}
	info, _ := c.Inspect(ctx, "render-slots")
	fmt.Printf("%v of %d, %d holders\n", info.Kind, info.Limit, info.Holders)

	// Asking for another limit while the key exists is an error, not a
	// silent change.
	_, err := c.Semaphore("render-slots", 4).TryAcquire(ctx)
	fmt.Println(errors.Is(err, lock.ErrKindMismatch), err)

	for _, w := range workers[:2] {
		if _, err := w.Release(ctx); err != nil {
			panic(err)
		}
	}
	// Output:
	// got a slot: true
	// got a slot: true
	// got a slot: false
	// semaphore of 2, 2 holders
	// true lock: key "render-slots" is a semaphore of 2; asked for a semaphore of 4
}

// Readers share a read/write lock; a writer waits until they are done and
// then holds it alone. A reader that comes while a writer waits queues
// behind the writer, so a stream of readers never starves writers.
func ExampleClient_RWLock() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()
	config := c.RWLock("config")

	r1, r2 := config.Reader(), config.Reader()
	for _, r := range []*lock.Lock{r1, r2} {
		if err := r.Acquire(ctx); err != nil {
			panic(err)
		}
	}
	info, _ := c.Inspect(ctx, "config")
	fmt.Println("readers:", info.Holders, "shared:", info.Shared)

	w := config.Writer()
	ok, _ := w.TryAcquire(ctx)
	fmt.Println("writer while reading:", ok)

	for _, r := range []*lock.Lock{r1, r2} {
		if _, err := r.Release(ctx); err != nil {
			panic(err)
		}
	}
	ran, err := w.Run(ctx, func(ctx context.Context) error {
		info, _ := c.Inspect(ctx, "config")
		fmt.Println("writing alone:", info.Holders == 1 && !info.Shared)
		return nil
	})
	fmt.Println(ran, err)
	// Output:
	// readers: 2 shared: true
	// writer while reading: false
	// writing alone: true
	// true <nil>
}
