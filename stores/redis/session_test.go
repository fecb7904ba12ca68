package redis_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
	redisstore "github.com/raftlock/raftlock/stores/redis"
)

// A renew counts the keys the session still holds, as on the memory store:
// not one whose hold an admin force-released, nor one its owner released.
func TestRenewCountsTheSessionsKeys(t *testing.T) {
	srv := startServer(t)
	rs := redisstore.New(srv.client(t), redisstore.Options{})
	t.Cleanup(func() { _ = rs.Close() })
	ms := memstore.New()
	t.Cleanup(func() { _ = ms.Close() })
	for name, st := range map[string]store{"memory": ms, "redis": rs} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			id := lock.NewSessionID()
			_, err := st.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: time.Minute})
			require.NoError(t, err)
			owners := map[string]lock.Owner{"a": lock.NewOwner(), "b": lock.NewOwner()}
			for k, o := range owners {
				_, err := st.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: o, Session: id})
				require.NoError(t, err)
			}
			counts := []int{renewedKeys(t, st, id)}
			_, err = st.ForceRelease(ctx, "a")
			require.NoError(t, err)
			counts = append(counts, renewedKeys(t, st, id))
			require.True(t, release(t, ctx, st, "b", owners["b"]))
			counts = append(counts, renewedKeys(t, st, id))
			assert.Equal(t, []int{2, 1, 0}, counts)
		})
	}
}

func renewedKeys(t *testing.T, st lock.SessionStore, id lock.SessionID) int {
	t.Helper()
	sl, err := st.RenewSession(t.Context(), id)
	require.NoError(t, err)
	return sl.Keys
}
