package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// One session per process: every lock taken through the session-bound
// client ends with the session, so a process that crashes frees all its
// locks within the session TTL, and Close frees them at once.
func ExampleClient_NewSession() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	sess, err := c.NewSession(ctx) // DefaultSessionTTL, renewed every TTL/3
	if err != nil {
		panic(err)
	}
	sc := c.WithSession(sess)

	ran, err := sc.Lock("reports/daily", lock.Metadata("host=worker-1")).Run(ctx, func(ctx context.Context) error {
		info, _ := c.Inspect(ctx, "reports/daily")
		fmt.Println("held by:", info.Metadata)
		return nil // ctx is canceled if the session ends meanwhile
	})
	fmt.Println("ran:", ran, "err:", err)

	other := sc.Lock("jobs/7")
	if err := other.Acquire(ctx); err != nil {
		panic(err)
	}
	_ = sess.Close(ctx) // releases jobs/7 with every other lock of the session
	info, _ := c.Inspect(ctx, "jobs/7")
	fmt.Println("jobs/7 locked after Close:", info.Locked)
	// Output:
	// held by: host=worker-1
	// ran: true err: <nil>
	// jobs/7 locked after Close: false
}

// MaxHold caps how long Run holds a lock, although the keep-alive would
// keep it: at the cap the callback's context is canceled and the lock
// released.
func ExampleMaxHold() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)

	ran, err := c.Lock("batch").Run(context.Background(), func(ctx context.Context) error {
		<-ctx.Done() // a callback that would run for ever
		fmt.Println("stopped:", errors.Is(context.Cause(ctx), lock.ErrMaxHold))
		return nil
	}, lock.MaxHold(50*time.Millisecond))
	fmt.Println("ran:", ran, "err:", err)
	// Output:
	// stopped: true
	// ran: true err: <nil>
}
