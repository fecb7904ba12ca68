package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// Run is the form to reach for: it acquires, runs the callback, and always
// releases, also when the callback fails or panics.
func ExampleLock_Run() {
	store := memstore.New() // this process only; a cluster node in production
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	ran, err := c.Lock("invoice:42").Run(ctx, func(ctx context.Context) error {
		fmt.Println("charging invoice 42")
		return nil
	})
	fmt.Println("ran:", ran, "err:", err)
	// Output:
	// charging invoice 42
	// ran: true err: <nil>
}

// TryRun does not wait: when another worker holds the lock, the callback does
// not run and ran is false.
func ExampleLock_TryRun() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	other := c.Lock("invoice:42")
	if err := other.Acquire(ctx); err != nil {
		panic(err)
	}
	ran, err := c.Lock("invoice:42").TryRun(ctx, func(ctx context.Context) error {
		fmt.Println("charging invoice 42 twice!")
		return nil
	})
	fmt.Println("ran:", ran, "err:", err)
	// Output:
	// ran: false err: <nil>
}

// Acquire and Release, when the lock's lifetime does not fit one callback.
// You own the release: defer it right after the acquire.
func ExampleLock_Acquire() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	l := c.Lock("migration", lock.TTL(5*time.Minute))
	if err := l.Acquire(ctx, lock.Wait(0)); err != nil {
		fmt.Println("someone else is migrating:", err)
		return
	}
	defer func() {
		released, err := l.Release(ctx)
		fmt.Println("released:", released, err)
	}()
	fmt.Println("migrating with token", l.Token())
	// Output:
	// migrating with token 1
	// released: true <nil>
}

// Extend from inside long work pushes the expiry out another TTL. It returns
// ErrNotHeld once the lease is lost, so the work stops instead of carrying on
// unprotected. (Run extends for you; this is for Acquire'd locks.)
func ExampleLock_Extend() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	l := c.Lock("import", lock.TTL(time.Minute))
	if err := l.Acquire(ctx); err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	for batch := 1; batch <= 3; batch++ {
		// ... process the batch ...
		if err := l.Extend(ctx); err != nil {
			fmt.Println("lost the lock, stopping:", err)
			return
		}
		left, _ := l.Remaining()
		fmt.Printf("batch %d done, more than 59s left: %v\n", batch, left > 59*time.Second)
	}
	// Output:
	// batch 1 done, more than 59s left: true
	// batch 2 done, more than 59s left: true
	// batch 3 done, more than 59s left: true
}

// Serialize hands a held lock to another process (through a queue, a job
// argument, ...), which restores it to extend and release the same lease.
func ExampleClient_Restore() {
	store := memstore.New()
	defer store.Close()
	ctx := context.Background()

	// Worker A takes the lock and dispatches the rest of the work.
	workerA := lock.New(store)
	l := workerA.Lock("import:99", lock.TTL(time.Minute))
	if err := l.Acquire(ctx); err != nil {
		panic(err)
	}
	job := l.Serialize()

	// Worker B, later, finishes the work under the same lock.
	workerB := lock.New(store)
	restored, err := workerB.Restore(job)
	if err != nil {
		panic(err)
	}
	if err := restored.Extend(ctx); err != nil {
		panic(err)
	}
	fmt.Println("B holds", restored.Key(), "with token", restored.Token())
	released, err := restored.Release(ctx)
	fmt.Println("B released:", released, err)

	// A's handle releases too. The lease is one owner's, shared by both
	// handles, and a release is idempotent: A hears that it was released,
	// by B, and holds nothing.
	released, err = l.Release(ctx)
	fmt.Println("A released:", released, err)
	// Output:
	// B holds import:99 with token 1
	// B released: true <nil>
	// A released: true <nil>
}

// Waiting for a held lock is bounded by the Wait option (which answers a
// *HeldError) or by the context (which answers the context's error).
func ExampleWait() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	holder := c.Lock("report", lock.TTL(time.Minute))
	if err := holder.Acquire(ctx); err != nil {
		panic(err)
	}

	err := c.Lock("report").Acquire(ctx, lock.Wait(20*time.Millisecond))
	var held *lock.HeldError
	if errors.As(err, &held) {
		fmt.Printf("still held after the wait: key %s, holder's token %d\n", held.Key, held.Token)
	}

	timeoutCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	err = c.Lock("report").Acquire(timeoutCtx)
	fmt.Println("context ran out:", errors.Is(err, context.DeadlineExceeded))

	// A waiter is handed the lock the moment the holder releases it.
	got := make(chan error)
	go func() { got <- c.Lock("report").Acquire(ctx, lock.Wait(time.Minute)) }()
	holder.Release(ctx)
	fmt.Println("waiter acquired:", <-got == nil)
	// Output:
	// still held after the wait: key report, holder's token 1
	// context ran out: true
	// waiter acquired: true
}

// Hooks observe every handle of a client: for metrics, logs, traces.
func ExampleWithHooks() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store, lock.WithHooks(lock.Hooks{
		OnAcquired: func(ctx context.Context, e lock.AcquiredEvent) {
			fmt.Printf("acquired %s token=%d ttl=%v\n", e.Key, e.Token, e.TTL)
		},
		OnReleased: func(ctx context.Context, e lock.ReleasedEvent) {
			fmt.Printf("released %s token=%d lost=%v\n", e.Key, e.Token, e.Lost)
		},
		OnContended: func(ctx context.Context, e lock.ContendedEvent) {
			fmt.Printf("contended %s (holder's token %d)\n", e.Key, e.Token)
		},
	}))
	ctx := context.Background()

	_, _ = c.Lock("payouts", lock.TTL(time.Minute)).Run(ctx, func(ctx context.Context) error {
		_, _ = c.Lock("payouts").TryRun(ctx, func(ctx context.Context) error { return nil })
		return nil
	})
	// Output:
	// acquired payouts token=1 ttl=1m0s
	// contended payouts (holder's token 1)
	// released payouts token=1 lost=false
}

// storage is a resource that takes fencing tokens: it refuses a write whose
// token is lower than one it has already seen, so a holder whose lease ran
// out while it was paused cannot overwrite its successor's work.
type storage struct {
	mu      sync.Mutex
	highest uint64
	value   string
}

func (s *storage) Write(token uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return fmt.Errorf("stale token %d (seen %d)", token, s.highest)
	}
	s.highest, s.value = token, value
	return nil
}

// Pass the fencing token to the resource the lock protects.
func ExampleLock_Token() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()
	var db storage

	// A takes the lock and is paused (a GC pause, a swapped-out VM) past its lease.
	a := c.Lock("config", lock.TTL(10*time.Millisecond))
	if err := a.Acquire(ctx); err != nil {
		panic(err)
	}
	// B is handed the lock when A's lease runs out, and writes.
	b := c.Lock("config", lock.TTL(time.Minute))
	if err := b.Acquire(ctx, lock.Wait(time.Minute)); err != nil {
		panic(err)
	}
	fmt.Println("B writes:", db.Write(b.Token(), "from B"))
	// A wakes up and tries to write: the token gives it away.
	fmt.Println("A writes:", db.Write(a.Token(), "from A"))
	fmt.Println("value:", db.value)
	// Output:
	// B writes: <nil>
	// A writes: stale token 1 (seen 2)
	// value: from B
}

// A store that implements Lister can list the held locks.
func ExampleClient_List() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()
	for _, key := range []string{"job/nightly", "job/hourly", "invoice:42"} {
		if err := c.Lock(key).Acquire(ctx); err != nil {
			panic(err)
		}
	}
	locks, err := c.List(ctx, lock.ListRequest{Prefix: "job/"})
	if err != nil {
		panic(err)
	}
	for _, l := range locks {
		fmt.Println(l.Key, "token", l.Token)
	}
	// Output:
	// job/hourly token 2
	// job/nightly token 1
}
