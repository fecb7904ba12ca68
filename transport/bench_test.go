package transport

import (
	"context"
	"testing"
)

// benchPair returns a client transport and the address of an echo server.
func benchPair(b *testing.B) (*Transport, string) {
	server := listen(b, Config{})
	server.Handle(echo)
	client := listen(b, Config{})
	return client, server.Addr().String()
}

// One caller, one request at a time: the round-trip latency.
func BenchmarkCallSerial(b *testing.B) {
	client, addr := benchPair(b)
	req := make([]byte, 64)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.Call(ctx, addr, req); err != nil {
			b.Fatal(err)
		}
	}
}

// Many callers at once: the throughput of pipelined, pooled connections.
func BenchmarkCallParallel(b *testing.B) {
	client, addr := benchPair(b)
	ctx := context.Background()
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := make([]byte, 64)
		for pb.Next() {
			if _, err := client.Call(ctx, addr, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
