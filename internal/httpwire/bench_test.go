package httpwire

import "testing"

// BenchmarkReadRequestBody: decoding an acquire's body, through the one-pass
// path for plain bodies (request.go) and through the strict
// two-pass decoding that bodies with escapes still take.
func BenchmarkReadRequestBody(b *testing.B) {
	body := []byte(`{"key":"jobs/nightly-report","ttl":"30s","owner":"0123456789abcdef0123456789abcdef"}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req AcquireRequest
			if !fastDecode(body, &req) {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req AcquireRequest
			if e := decodeStrict(body, &req); e != nil {
				b.Fatal(e)
			}
		}
	})
}
