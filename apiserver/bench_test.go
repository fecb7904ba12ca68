package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/httpwire"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
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

// BenchmarkReadRequestBody: decoding an acquire's body, through the one-pass
// path for plain bodies (httpwire.DecodeFast) and through the strict
// two-pass decoding that bodies with escapes still take.
func BenchmarkReadRequestBody(b *testing.B) {
	body := []byte(`{"key":"jobs/nightly-report","ttl":"30s","owner":"0123456789abcdef0123456789abcdef"}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req api.AcquireRequest
			if !httpwire.DecodeFast(body, &req) {
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

// BenchmarkBatchHandler: the node's side of one POST /v1/batch of 16
// acquires (each on its own key) and one of their 16 releases, served by the
// handler itself over a memory store (no network, no client), so the figure
// is what a batch costs the node beyond its store calls; per operation.
func BenchmarkBatchHandler(b *testing.B) {
	store := memstore.New()
	b.Cleanup(func() { _ = store.Close() })
	h := NewHandler(store, Config{})
	const ops = 16
	var acquires, releases strings.Builder
	acquires.WriteString(`{"ops":[`)
	releases.WriteString(`{"ops":[`)
	for i := range ops {
		if i > 0 {
			acquires.WriteByte(',')
			releases.WriteByte(',')
		}
		owner := lock.NewOwner().String()
		fmt.Fprintf(&acquires, `{"op":"acquire","body":{"key":"bench/%d","ttl":"1m","owner":"%s"}}`, i, owner)
		fmt.Fprintf(&releases, `{"op":"release","body":{"key":"bench/%d","owner":"%s"}}`, i, owner)
	}
	acquires.WriteString(`]}`)
	releases.WriteString(`]}`)
	post := func(body string) {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/batch", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || strings.Contains(w.Body.String(), `"status":4`) {
			b.Fatalf("%d %s", w.Code, w.Body.String())
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		post(acquires.String())
		post(releases.String())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*ops), "ns/op-in-batch")
}
