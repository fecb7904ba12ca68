package lock_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// BenchmarkMemoryStoreAcquireRelease measures one acquire and one release on
// the store directly: serially on one key, and in parallel on distinct keys
// (every goroutine its own key, so the figure is the store's mutex and state
// machine, not contention).
func BenchmarkMemoryStoreAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		st := memstore.New()
		defer st.Close()
		o := lock.NewOwner()
		for b.Loop() {
			if _, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: o, TTL: time.Minute}); err != nil {
				b.Fatal(err)
			}
			if ok, err := st.Release(ctx, "k", o); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		st := memstore.New()
		defer st.Close()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			key := "k" + strconv.FormatInt(next.Add(1), 10)
			o := lock.NewOwner()
			for pb.Next() {
				if _, err := st.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: o, TTL: time.Minute}); err != nil {
					b.Error(err)
					return
				}
				if ok, err := st.Release(ctx, key, o); err != nil || !ok {
					b.Error(ok, err)
					return
				}
			}
		})
	})
	b.Run("handle", func(b *testing.B) {
		st := memstore.New()
		defer st.Close()
		l := lock.New(st).Lock("k")
		for b.Loop() {
			if err := l.Acquire(ctx); err != nil {
				b.Fatal(err)
			}
			if ok, err := l.Release(ctx); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
}

// BenchmarkHandOff passes one key back and forth between two goroutines
// through handles. Each releases only once the other queues for the key (seen
// through Inspect), so every release hands the key to a waiter and wakes it:
// one op is one release, hand-off and wake-up, plus the waiter's next acquire
// and the polling for it.
func BenchmarkHandOff(b *testing.B) {
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()
	rounds := max(b.N/2, 1)
	waitForWaiter := func() error {
		for {
			info, err := st.Inspect(ctx, "k")
			if err != nil || info.Waiters > 0 {
				return err
			}
			runtime.Gosched()
		}
	}
	// play takes the key rounds times, handing it to the other player after
	// each take except, for the player who takes last, the last one.
	play := func(l *lock.Lock, handOffLast bool, holds chan<- struct{}) error {
		for i := range rounds {
			if err := l.Acquire(ctx); err != nil {
				return err
			}
			if i == 0 && holds != nil {
				close(holds)
			}
			if handOffLast || i < rounds-1 {
				if err := waitForWaiter(); err != nil {
					return err
				}
			}
			if ok, err := l.Release(ctx); err != nil || !ok {
				return fmt.Errorf("release: %v %w", ok, err)
			}
		}
		return nil
	}
	c := lock.New(st)
	b.ResetTimer()
	done := make(chan error, 2)
	firstHolds := make(chan struct{})
	go func() { done <- play(c.Lock("k"), true, firstHolds) }()
	// The takes alternate from the start: the second player queues only
	// once the first holds the key.
	select {
	case <-firstHolds:
	case err := <-done:
		b.Fatal(err)
	}
	go func() { done <- play(c.Lock("k"), false, nil) }()
	for range 2 {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
