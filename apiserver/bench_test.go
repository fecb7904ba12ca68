package apiserver

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// BenchmarkHTTPAcquireRelease: one acquire and one release, client -> HTTP
// (loopback) -> handler -> memory store, so the figure is the API's own cost.
// "serial" is one caller's latency; "parallel" spreads GOMAXPROCS*4 callers
// over distinct keys and measures throughput.
func BenchmarkHTTPAcquireRelease(b *testing.B) {
	serial := func(b *testing.B, c *api.Client) {
		ctx := context.Background()
		owner := lock.NewOwner()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.Acquire(ctx, lock.AcquireRequest{Key: "bench", Owner: owner, TTL: time.Minute}); err != nil {
				b.Fatal(err)
			}
			if ok, err := c.Release(ctx, "bench", owner); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	}
	b.Run("serial", func(b *testing.B) { serial(b, newTestNode(b, Config{}).client) })
	// What a token costs: a SHA-256 and a constant-time compare per request.
	b.Run("serial-token", func(b *testing.B) { serial(b, newTestNode(b, Config{Token: testToken}).client) })
	// What TLS with client certificates costs once connections are kept.
	b.Run("serial-https-client-cert-token", func(b *testing.B) {
		n := newTLSNode(b, Config{Token: testToken}, true)
		c, err := api.NewClient(n.url, api.ClientConfig{Token: testToken, TLS: n.clientTLS(n.ca.issue(b, "client"))})
		if err != nil {
			b.Fatal(err)
		}
		serial(b, c)
	})
	parallel := func(b *testing.B, n *testNode) {
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
	}
	// One client shared by the callers: what they start while an exchange
	// is in flight travels in one POST /v1/batch (api.ClientConfig.NoBatch).
	b.Run("parallel", func(b *testing.B) { parallel(b, newTestNode(b, Config{})) })
	b.Run("parallel-nobatch", func(b *testing.B) {
		n := newTestNode(b, Config{})
		c, err := api.NewClient(n.url, api.ClientConfig{NoBatch: true})
		if err != nil {
			b.Fatal(err)
		}
		n.client = c
		parallel(b, n)
	})
}

// BenchmarkReadRequestBody: decoding an acquire's body, through readJSON's
// one-pass path for plain bodies (fastjson.go) and through the strict
// two-pass decoding that bodies with escapes still take.
func BenchmarkReadRequestBody(b *testing.B) {
	body := []byte(`{"key":"jobs/nightly-report","ttl":"30s","owner":"0123456789abcdef0123456789abcdef"}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req api.AcquireRequest
			if !fastDecode(body, &req) {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req api.AcquireRequest
			if e := decodeStrict(body, &req); e != nil {
				b.Fatal(e)
			}
		}
	})
}
