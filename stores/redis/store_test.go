package redis_test

import (
	"testing"
	"time"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/locktest"
	redisstore "github.com/raftlock/raftlock/stores/redis"
)

func TestConformance(t *testing.T) {
	srv := startServer(t)
	rdb := srv.client(t)
	locktest.TestStoreWith(t, func(t *testing.T) lock.Store {
		st := redisstore.New(rdb, redisstore.Options{})
		t.Cleanup(func() { _ = st.Close() })
		return st
	}, locktest.Options{ShortTTL: 500 * time.Millisecond}) // the cluster's figure: short leases flake on a loaded machine
}
