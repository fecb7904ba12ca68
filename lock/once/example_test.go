package once_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
	"github.com/raftlock/raftlock/lock/once"
)

// Three replicas run the same job every 20ms; each tick runs on one of them.
// Here the replicas are goroutines sharing one memory store. Replicas in
// separate processes need a store they share (a cluster node, the API client):
// with a memory store each, every replica would run every tick.
func ExamplePerTick() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx, cancel := context.WithCancel(context.Background())

	var mu sync.Mutex
	runs := make(map[time.Time]int) // tick → how many replicas ran it
	report := func(ctx context.Context, t once.Tick) error {
		mu.Lock()
		defer mu.Unlock()
		runs[t.Time]++
		if len(runs) == 3 {
			cancel() // enough for the example
		}
		return nil
	}

	var replicas sync.WaitGroup
	for range 3 {
		replicas.Go(func() {
			_ = once.PerTick(ctx, c, "report", once.Every(20*time.Millisecond), report)
		})
	}
	replicas.Wait()

	onceEach := true
	for _, n := range runs {
		onceEach = onceEach && n == 1
	}
	fmt.Println("every tick ran on exactly one replica:", onceEach)
	// Output:
	// every tick ran on exactly one replica: true
}

// Every ticks on round marks of the wall clock, the same on every replica
// whatever its time zone.
func ExampleEvery() {
	every5 := once.Every(5 * time.Minute)
	t := every5(time.Date(2026, 11, 30, 4, 32, 10, 0, time.UTC))
	fmt.Println(t, "→", every5(t))
	// Output:
	// 2026-11-30 04:35:00 +0000 UTC → 2026-11-30 04:40:00 +0000 UTC
}
