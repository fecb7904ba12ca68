package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// One op is an acquire and a release of a free key: two commits on a
// 3-node cluster over real TCP with fsync on. The parallel runs use many
// goroutines per core, as many request handlers of an application would,
// so that proposal batching has something to batch.
func BenchmarkAcquireReleaseLeader(b *testing.B) {
	c := newCluster(b, 3, nil)
	benchAcquireRelease(b, c.leader())
}

func BenchmarkAcquireReleaseFollower(b *testing.B) {
	c := newCluster(b, 3, nil)
	benchAcquireRelease(b, c.follower())
}

// One op is one acquire of a fresh key through a follower, never released,
// by many goroutines at once: a fill of held locks, where proposals batch
// and the forwarding round trip (follower and leader, one process) is most
// of each command's allocations.
func BenchmarkFillThroughFollower(b *testing.B) {
	c := newCluster(b, 3, func(cfg *Config) { cfg.MaxLocks = Unlimited })
	f := c.follower()
	var seq atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		owner := lock.NewOwner()
		for pb.Next() {
			key := fmt.Sprintf("fill/%08d", seq.Add(1))
			if _, err := f.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: time.Hour}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquires/s")
	b.ReportMetric(0, "ns/op")
}

// One op is one hand-off: callers on the two followers contend for one
// key, each acquiring it with a wait and releasing it as soon as it is
// granted, so every grant but the first goes to a waiter.
func BenchmarkHandOffFollowers(b *testing.B) {
	c := newCluster(b, 3, nil)
	l := c.leader()
	var fs []*Node
	for _, n := range c.nodes {
		if n != l {
			fs = append(fs, n)
		}
	}
	var seq atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		s := fs[int(seq.Add(1))%len(fs)]
		ctx := context.Background()
		for pb.Next() {
			owner := lock.NewOwner()
			if _, err := s.Acquire(ctx, lock.AcquireRequest{Key: "contended", Owner: owner, TTL: time.Minute, Wait: time.Minute}); err != nil {
				b.Error(err)
				return
			}
			if ok, err := s.Release(ctx, "contended", owner); err != nil || !ok {
				b.Error(ok, err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handoffs/s")
	b.ReportMetric(0, "ns/op")
}

func benchAcquireRelease(b *testing.B, s lock.Store) {
	b.Run("serial", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := range b.N {
			lat = append(lat, acquireRelease(b, s, fmt.Sprintf("serial/%d", i)))
		}
		reportLatencies(b, lat)
	})
	b.Run("parallel", func(b *testing.B) {
		var (
			mu  sync.Mutex // protects all
			all = make([]time.Duration, 0, b.N)
			seq atomic.Int64
		)
		b.SetParallelism(32)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var lat []time.Duration
			for pb.Next() {
				lat = append(lat, acquireRelease(b, s, fmt.Sprintf("parallel/%d", seq.Add(1))))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
		reportLatencies(b, all)
	})
}

func acquireRelease(b *testing.B, s lock.Store, key string) time.Duration {
	ctx := context.Background()
	owner := lock.NewOwner()
	start := time.Now()
	if _, err := s.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute}); err != nil {
		b.Fatal(err)
	}
	if ok, err := s.Release(ctx, key, owner); err != nil || !ok {
		b.Fatal(ok, err)
	}
	return time.Since(start)
}

func reportLatencies(b *testing.B, lat []time.Duration) {
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op") // ops/s says it better
}

// One op is one session renewal, through a follower, among 10,000
// sessions renewed by many goroutines at once (a fleet whose processes
// each keep one session alive). It reports the raft entries and the CPU
// time (of the whole 3-node cluster, in this process) per renewal; the
// goal for entries/op is well under one half (renewals share entries).
func BenchmarkSessionRenewals(b *testing.B) {
	c := newCluster(b, 3, nil)
	l, f := c.leader(), c.follower()
	ctx := context.Background()
	const sessions = 10000
	ids := make([]lock.SessionID, sessions)
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < sessions; i += 64 {
				ids[i] = lock.NewSessionID()
				if _, err := f.CreateSession(ctx, lock.SessionRequest{ID: ids[i], TTL: time.Hour}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var next atomic.Int64
	entries := l.raft.LastIndex()
	cpu := processCPU()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := ids[int(next.Add(1))%sessions]
			if _, err := f.RenewSession(ctx, id); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(l.raft.LastIndex()-entries)/float64(b.N), "entries/op")
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
}
