package redis_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/election"
	"github.com/raftlock/raftlock/lock/lockhttp"
	"github.com/raftlock/raftlock/lock/once"
	redisstore "github.com/raftlock/raftlock/stores/redis"
)

const patience = 10 * time.Second

// replicas are n stores on one Redis, as n processes of an app would each
// have: they share nothing but the server.
func replicas(t *testing.T, srv *server, n int) []*lock.Client {
	clients := make([]*lock.Client, n)
	for i := range clients {
		st := redisstore.New(srv.client(t), redisstore.Options{})
		t.Cleanup(func() { _ = st.Close() })
		clients[i] = lock.New(st)
	}
	return clients
}

// The middleware on two replicas: the same resource requested on both at
// once runs on one, and the other is refused with the holder's token.
func TestMiddlewareAcrossReplicas(t *testing.T) {
	srv := startServer(t)
	clients := replicas(t, srv, 2)
	entered, release := make(chan uint64), make(chan struct{})
	handler := func(w http.ResponseWriter, r *http.Request) {
		token, _ := lockhttp.Token(r.Context())
		entered <- token
		<-release
	}
	serve := func(c *lock.Client) <-chan *httptest.ResponseRecorder {
		done := make(chan *httptest.ResponseRecorder, 1)
		h := lockhttp.Middleware(c, lockhttp.Key("account:42"))(http.HandlerFunc(handler))
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/accounts/42", nil))
			done <- rec
		}()
		return done
	}
	onA, onB := serve(clients[0]), serve(clients[1])
	var token uint64
	select {
	case token = <-entered:
	case <-time.After(patience):
		require.FailNow(t, "no request ran")
	}
	var refused *httptest.ResponseRecorder
	ran := onA
	select {
	case refused = <-onA:
		ran = onB
	case refused = <-onB:
	case <-time.After(patience):
		require.FailNow(t, "the second request was neither run nor refused")
	}
	assert.Equal(t, http.StatusConflict, refused.Code)
	assert.Contains(t, refused.Body.String(), `"token":`)
	close(release)
	select {
	case rec := <-ran:
		assert.Equal(t, http.StatusOK, rec.Code)
	case <-time.After(patience):
		require.FailNow(t, "the running request did not answer")
	}
	info, err := clients[0].Inspect(t.Context(), "account:42")
	require.NoError(t, err)
	assert.False(t, info.Locked, "released after the handler")
	assert.NotZero(t, token)
}

// Three replicas run a job every second: each tick runs on one of them.
func TestPerTickAcrossReplicas(t *testing.T) {
	srv := startServer(t)
	clients := replicas(t, srv, 3)
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	runs := map[time.Time][]uint64{}
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = once.PerTick(ctx, c, "report", once.Every(time.Second), func(ctx context.Context, tick once.Tick) error {
				mu.Lock()
				defer mu.Unlock()
				runs[tick.Time] = append(runs[tick.Time], tick.Token)
				return nil
			}, once.Skew(time.Second), once.OnError(func(tick once.Tick, err error) { t.Errorf("tick %v: %v", tick.Time, err) }))
		}()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) >= 2
	}, patience, 10*time.Millisecond, "two ticks run")
	cancel()
	wg.Wait()
	for tick, tokens := range runs {
		assert.Len(t, tokens, 1, "tick %v ran once", tick)
	}
}

// Two replicas campaign: one leads; an observer on a third sees it; when it
// resigns the other is elected with a higher term, and the observer sees
// the hand-over.
func TestElectionAcrossReplicas(t *testing.T) {
	srv := startServer(t)
	clients := replicas(t, srv, 3)
	ctx := t.Context()
	first, err := election.New(clients[0], "scheduler").Campaign(ctx, "a")
	require.NoError(t, err)
	observed := make(chan election.Leader, 16)
	obsCtx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	go func() {
		for leader, err := range election.New(clients[2], "scheduler").Observe(obsCtx) {
			if err != nil {
				return
			}
			observed <- leader
		}
	}()
	next := func(what string) election.Leader {
		t.Helper()
		select {
		case l := <-observed:
			return l
		case <-time.After(patience):
			require.FailNow(t, "the observer did not see "+what)
			return election.Leader{}
		}
	}
	l := next("the first leader")
	assert.Equal(t, first.Term(), l.Term)
	assert.Equal(t, "a", l.Value)

	second := make(chan *election.Leadership, 1)
	go func() {
		lead, err := election.New(clients[1], "scheduler").Campaign(ctx, "b")
		assert.NoError(t, err)
		second <- lead
	}()
	require.Eventually(t, func() bool {
		info, err := clients[2].Inspect(ctx, "election:scheduler")
		return err == nil && info.Waiters == 1
	}, patience, time.Millisecond, "the second campaigner queues")
	require.NoError(t, first.Resign(ctx))
	var lead *election.Leadership
	select {
	case lead = <-second:
	case <-time.After(patience):
		require.FailNow(t, "the second campaigner was not elected")
	}
	require.NotNil(t, lead)
	assert.Greater(t, lead.Term(), first.Term())
	for l = next("the second leader"); l.Term != lead.Term(); l = next("the second leader") {
	}
	assert.Equal(t, "b", l.Value)
	require.NoError(t, lead.Resign(ctx))
}
