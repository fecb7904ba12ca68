package raft

// This file is the fork's own (doc.go): the leader's write of a new batch,
// split from its sync.

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-metrics/compat"
)

// SyncSplitLogStore is a LogStore that can split a write in two: the
// entries are stored, then made durable. StoreLogs stays a whole write: it
// returns once its entries, and every entry stored before it, are durable.
type SyncSplitLogStore interface {
	LogStore
	// StoreLogsNoSync stores logs as StoreLogs does, readable by GetLog and
	// LastIndex when it returns, but not necessarily durable: a crash may
	// lose them (and only them, and only from the end of the log).
	StoreLogsNoSync(logs []*Log) error
	// SyncLogs returns once every entry stored before it was called is
	// durable. An error means some may not be.
	SyncLogs() error
}

// splitLogStore is logs when the leader is to write in parallel and logs
// can split a write; nil otherwise (the leader then writes as upstream's
// does).
func splitLogStore(conf *Config, logs LogStore) SyncSplitLogStore {
	if !conf.LeaderWritesInParallel {
		return nil
	}
	if c, ok := logs.(*LogCache); ok {
		if _, ok := c.store.(SyncSplitLogStore); !ok {
			return nil
		}
	}
	s, _ := logs.(SyncSplitLogStore)
	return s
}

// leaderSync syncs the leader's own writes of one term, on a goroutine of
// its own, while the replicators send them; after each sync it counts the
// leader in the commit quorum for what the sync covered. A failed sync
// steps the leader down, as a failed write does.
type leaderSync struct {
	last    atomic.Uint64 // the last index dispatchLogs stored
	trigger chan struct{} // a write is waiting for a sync
	done    chan struct{} // closed when the term ends
	once    sync.Once
}

// startLeaderSync starts the syncs of a new term; nil when the leader
// writes as upstream's does.
func (r *Raft) startLeaderSync() *leaderSync {
	if r.logSync == nil {
		return nil
	}
	s := &leaderSync{trigger: make(chan struct{}, 1), done: make(chan struct{})}
	go s.run(r.logSync, r.leaderState.commitment, r.leaderState.stepDown, r)
	return s
}

// written tells the syncs that dispatchLogs stored entries through index.
func (s *leaderSync) written(index uint64) {
	s.last.Store(index)
	asyncNotifyCh(s.trigger)
}

// stop ends the syncs when the term ends; a sync in flight finishes
// unheard (the next leader's commitment does not count it). nil-safe.
func (s *leaderSync) stop() {
	if s != nil {
		s.once.Do(func() { close(s.done) })
	}
}

func (s *leaderSync) run(store SyncSplitLogStore, c *commitment, stepDown chan struct{}, r *Raft) {
	for {
		select {
		case <-s.trigger:
		case <-s.done:
			return
		}
		// Read before the sync starts: the sync covers every write that
		// returned before it, and perhaps more, never less.
		index := s.last.Load()
		start := time.Now()
		if err := store.SyncLogs(); err != nil {
			r.logger.Error("failed to sync logs; stepping down", "error", err)
			asyncNotifyCh(stepDown)
			return
		}
		metrics.MeasureSince([]string{"raft", "leader", "syncLogs"}, start)
		c.match(r.localID, index)
	}
}
