package lock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// A transfer locks both accounts at once, all or nothing, with one fencing
// token for the pair. A second transfer listing the same accounts in the
// other order waits for the first instead of deadlocking, and an auditor
// locking one account alone finds it held.
func ExampleClient_LockAll() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	transfer := c.LockAll([]string{"accounts/alice", "accounts/bob"}, lock.TTL(time.Minute))
	reverse := c.LockAll([]string{"accounts/bob", "accounts/alice"}, lock.TTL(time.Minute))
	if err := transfer.Acquire(ctx); err != nil {
		panic(err)
	}
	alice, _ := c.Inspect(ctx, "accounts/alice")
	bob, _ := c.Inspect(ctx, "accounts/bob")
	fmt.Println("one token for the set:", alice.Token == transfer.Token() && bob.Token == transfer.Token())

	ok, err := reverse.TryAcquire(ctx)
	fmt.Println("reverse order acquired:", ok, err)
	ok, err = c.Lock("accounts/bob").TryAcquire(ctx)
	fmt.Println("bob alone acquired:", ok, err)

	// Releasing the set frees both keys in one step.
	if _, err := transfer.Release(ctx); err != nil {
		panic(err)
	}
	ran, err := reverse.Run(ctx, func(ctx context.Context) error {
		fmt.Println("reverse holds", reverse.Keys(), "with a newer token:", reverse.Token() > transfer.Token())
		return nil
	})
	fmt.Println(ran, err)
	// Output:
	// one token for the set: true
	// reverse order acquired: false <nil>
	// bob alone acquired: false <nil>
	// reverse holds [accounts/alice accounts/bob] with a newer token: true
	// true <nil>
}
