package redis_test

import (
	"testing"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/locktest"
	redisstore "github.com/raftlock/raftlock/stores/redis"
)

func TestConformance(t *testing.T) {
	srv := startServer(t)
	rdb := srv.client(t)
	locktest.TestStore(t, func(t *testing.T) lock.Store {
		st := redisstore.New(rdb, redisstore.Options{})
		t.Cleanup(func() { _ = st.Close() })
		return st
	})
}
