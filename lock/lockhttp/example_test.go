package lockhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/lockhttp"
	"github.com/raftlock/raftlock/lock/memstore"
)

// One request per account at a time: the lock's key is made from the path.
// A request that finds the account locked gets 409 with a JSON body; the
// handler runs under the lease and passes its fencing token on.
func ExampleMiddleware() {
	store := memstore.New() // this process only; a cluster node in production
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	recompute := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := lockhttp.Token(r.Context())
		fmt.Fprintf(w, "recomputed account %s under token %d\n", r.PathValue("id"), token)
	})
	byAccount := func(r *http.Request) string { return "account:" + r.PathValue("id") }
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/recompute", lockhttp.Middleware(c, byAccount)(recompute))

	call := func() {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/accounts/42/recompute", nil))
		fmt.Print(rec.Code, " ", rec.Body.String())
	}

	other := c.Lock("account:42") // another replica is busy with account 42
	if err := other.Acquire(ctx); err != nil {
		panic(err)
	}
	call()
	if _, err := other.Release(ctx); err != nil {
		panic(err)
	}
	call()
	// Output:
	// 409 {"error":"locked","key":"account:42","token":1}
	// 200 recomputed account 42 under token 2
}

// The application chooses the answer to a held lock; lockhttp.WriteLocked and
// lockhttp.WriteError are the defaults it can fall back on.
func ExampleOnLocked() {
	store := memstore.New()
	defer store.Close()
	c := lock.New(store)
	ctx := context.Background()

	busy := lockhttp.OnLocked(func(w http.ResponseWriter, r *http.Request, held *lock.HeldError) {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "a payout run is in progress", http.StatusServiceUnavailable)
	})
	run := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "paid") })
	h := lockhttp.Middleware(c, lockhttp.Key("payouts"), busy)(run)

	other := c.Lock("payouts")
	if err := other.Acquire(ctx); err != nil {
		panic(err)
	}
	defer other.Release(ctx)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/payouts/run", nil))
	fmt.Print(rec.Code, " Retry-After: ", rec.Header().Get("Retry-After"), " ", rec.Body.String())
	// Output:
	// 503 Retry-After: 5 a payout run is in progress
}
