package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
	redisstore "github.com/raftlock/raftlock/stores/redis"
)

// store is what the release scenarios use of a store.
type store interface {
	lock.Store
	lock.MultiKeyStore
	lock.AdminStore
	lock.SessionStore
}

// A repeated release (or session destroy) answers as on the memory store,
// whose state machine is the cluster's: true only for the repeat of a
// release that ended the owner's own hold, under the key it named.
func TestRepeatedReleaseAnswersAsTheMemoryStore(t *testing.T) {
	srv := startServer(t)
	rdb := srv.client(t)
	const ttl = time.Minute
	scenarios := []struct {
		name string
		// run does the scenario's steps on st and answers its releases'
		// (and destroys') answers, in order.
		run  func(t *testing.T, ctx context.Context, st store) []bool
		want []bool
	}{
		{"a multi-key set, repeated under the key it named and another", func(t *testing.T, ctx context.Context, st store) []bool {
			a := lock.NewOwner()
			_, err := st.AcquireAll(ctx, lock.AcquireRequest{Key: "x", Keys: []string{"x", "y"}, Owner: a, TTL: ttl})
			require.NoError(t, err)
			return []bool{release(t, ctx, st, "x", a), release(t, ctx, st, "x", a), release(t, ctx, st, "y", a)}
		}, []bool{true, true, false}},
		{"a force-released hold", func(t *testing.T, ctx context.Context, st store) []bool {
			a := lock.NewOwner()
			_, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: a, TTL: ttl})
			require.NoError(t, err)
			_, err = st.ForceRelease(ctx, "k")
			require.NoError(t, err)
			return []bool{release(t, ctx, st, "k", a)}
		}, []bool{false}},
		{"another owner's repeat, or on another key", func(t *testing.T, ctx context.Context, st store) []bool {
			a := lock.NewOwner()
			_, err := st.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: a, TTL: ttl})
			require.NoError(t, err)
			return []bool{release(t, ctx, st, "k", a), release(t, ctx, st, "k", lock.NewOwner()), release(t, ctx, st, "other", a)}
		}, []bool{true, false, false}},
		{"a read/write lock's shared slot, held again and released again", func(t *testing.T, ctx context.Context, st store) []bool {
			a := lock.NewOwner()
			req := lock.AcquireRequest{Key: "rw", Owner: a, TTL: ttl, Kind: lock.KindRWLock, Shared: true}
			_, err := st.Acquire(ctx, req)
			require.NoError(t, err)
			first := release(t, ctx, st, "rw", a)
			_, err = st.Acquire(ctx, req)
			require.NoError(t, err)
			return []bool{first, release(t, ctx, st, "rw", a), release(t, ctx, st, "rw", a)}
		}, []bool{true, true, true}},
		{"a session destroyed, created again and destroyed again", func(t *testing.T, ctx context.Context, st store) []bool {
			id := lock.NewSessionID()
			_, err := st.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: ttl})
			require.NoError(t, err)
			first, second := destroy(t, ctx, st, id), destroy(t, ctx, st, id)
			_, err = st.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: ttl})
			require.NoError(t, err)
			return []bool{first, second, destroy(t, ctx, st, id), destroy(t, ctx, st, lock.NewSessionID())}
		}, []bool{true, true, true, false}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx := t.Context()
			require.NoError(t, rdb.FlushAll(ctx).Err())
			rs := redisstore.New(rdb, redisstore.Options{})
			t.Cleanup(func() { _ = rs.Close() })
			ms := memstore.New()
			t.Cleanup(func() { _ = ms.Close() })
			require.Equal(t, sc.want, sc.run(t, ctx, ms), "the memory store's answers")
			assert.Equal(t, sc.want, sc.run(t, ctx, rs), "the Redis store's answers")
		})
	}

	// What it remembers is one Redis key, which expires when it is no
	// longer of use.
	left, err := rdb.PTTL(t.Context(), redisstore.DefaultPrefix+"rel").Result()
	require.NoError(t, err)
	assert.Positive(t, left)
	assert.LessOrEqual(t, left, 5*time.Minute)
}

func release(t *testing.T, ctx context.Context, st lock.Store, key string, owner lock.Owner) bool {
	t.Helper()
	ok, err := st.Release(ctx, key, owner)
	require.NoError(t, err)
	return ok
}

func destroy(t *testing.T, ctx context.Context, st lock.SessionStore, id lock.SessionID) bool {
	t.Helper()
	ok, err := st.DestroySession(ctx, id)
	require.NoError(t, err)
	return ok
}
