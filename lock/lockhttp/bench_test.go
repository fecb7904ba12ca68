package lockhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/lockhttp"
	"github.com/raftlock/raftlock/lock/memstore"
)

// The middleware's cost per request on the memory store, without contention:
// acquire, keep-alive goroutine, release.
func BenchmarkMiddleware(b *testing.B) {
	store := memstore.New()
	b.Cleanup(func() { _ = store.Close() })
	var next atomic.Int64
	h := lockhttp.Middleware(lock.New(store), func(r *http.Request) string {
		return r.Header.Get("Account")
	})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Account", "account:"+strconv.FormatInt(next.Add(1), 10))
		w := httptest.NewRecorder()
		for pb.Next() {
			h.ServeHTTP(w, r)
		}
	})
}

// A refused request: the acquire, then the Inspect that learns the holder's
// token, then the JSON body.
func BenchmarkMiddlewareContended(b *testing.B) {
	store := memstore.New()
	b.Cleanup(func() { _ = store.Close() })
	c := lock.New(store)
	holder := c.Lock("payouts")
	if err := holder.Acquire(b.Context()); err != nil {
		b.Fatal(err)
	}
	h := lockhttp.Middleware(c, lockhttp.Key("payouts"))(http.NotFoundHandler())
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusConflict {
			b.Fatal(w.Code)
		}
	}
}
