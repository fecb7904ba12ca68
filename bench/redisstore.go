package main

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/lock"
	lockredis "github.com/raftlock/raftlock/stores/redis"
)

// redisStoreSystem is raftlock's Redis store (stores/redis) on the same
// redis-server as the redis system (persistence off): the whole lock API
// over Redis, each operation one Lua script, waiters woken by the release
// that hands them the key. Beside the redis system, its figures are what
// those semantics cost over a bare SET NX.
type redisStoreSystem struct {
	*redisSystem
}

func newRedisStore(p params) (system, error) {
	r, err := newRedis(p, false)
	if err != nil {
		return nil, err
	}
	return &redisStoreSystem{r}, nil
}

func (s *redisStoreSystem) name() string { return sysRedisStore }

func (s *redisStoreSystem) notes() []string {
	return append([]string{
		fmt.Sprintf("%s %s, one server, persistence off; raftlock's Redis store (stores/redis): lock.Client handles, one Lua script per operation, FIFO waiters woken by the hand-off (no polling)",
			s.bin, s.version()),
	}, s.note...)
}

func (s *redisStoreSystem) client(context.Context, int) (client, error) {
	return &raftlockClient{c: lock.New(lockredis.New(s.rdb, lockredis.Options{})), ttl: s.p.ttl}, nil
}

// held fills a fresh server with n locks and measures memory; a restart
// loses every lock (persistence off), so snapshot and restart are n/a.
func (s *redisStoreSystem) held(ctx context.Context, n int, atPeak func()) (map[string]float64, error) {
	s.p.ttl = s.p.heldTTL
	if err := s.start(ctx); err != nil {
		s.stop()
		return nil, fmt.Errorf("start: %w", err)
	}
	defer s.stop()
	before, err := s.usedMemory(ctx)
	if err != nil {
		return nil, err
	}
	took, err := fill(ctx, s, s.p, n, func() {})
	if err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	s.rdb.Close() // the fill's connections and their buffers are not lock memory
	s.rdb = redis.NewClient(&redis.Options{Addr: s.addr(), DisableIdentity: true})
	after, err := s.usedMemory(ctx)
	if err != nil {
		return nil, err
	}
	atPeak()
	s.note = append(s.note, fmt.Sprintf("held (%s): bytes per lock = INFO used_memory growth / locks (one server); snapshot and restart n/a (persistence off)", s.name()))
	return map[string]float64{
		"held_locks":          float64(n),
		"held_fill_per_s":     float64(n) / took.Seconds(),
		"held_bytes_per_lock": perLock(before, after, 1, n),
	}, nil
}
