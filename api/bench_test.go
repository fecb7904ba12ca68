package api

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// BenchmarkHTTPAcquireRelease: one acquire and one release, client -> HTTP
// (loopback) -> handler -> memory store, so the figure is the API's own cost.
// "serial" is one caller's latency; "parallel" spreads GOMAXPROCS*4 callers
// over distinct keys and measures throughput.
func BenchmarkHTTPAcquireRelease(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		n := newTestNode(b, Config{})
		ctx := context.Background()
		owner := lock.NewOwner()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: "bench", Owner: owner, TTL: time.Minute}); err != nil {
				b.Fatal(err)
			}
			if ok, err := n.client.Release(ctx, "bench", owner); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		n := newTestNode(b, Config{})
		ctx := context.Background()
		var next atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("bench/%d", next.Add(1))
			owner := lock.NewOwner()
			for pb.Next() {
				if _, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute}); err != nil {
					b.Error(err)
					return
				}
				if ok, err := n.client.Release(ctx, key, owner); err != nil || !ok {
					b.Error(ok, err)
					return
				}
			}
		})
	})
}
