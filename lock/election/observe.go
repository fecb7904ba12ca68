package election

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// PollInterval is how often Observe reads the leader of an election kept in
// a store that cannot watch (it does not implement lock.Watcher, or it
// answers its first watch with errors.ErrUnsupported): the one case where
// it polls. The memory store, cluster nodes and the API client
// all watch.
const PollInterval = time.Second

// Observe yields the election's leadership now, then again each time it
// changes, until ctx ends or the loop breaks:
//
//	for ld, err := range e.Observe(ctx) {
//		if err != nil { ... }       // ctx's end, or a store error (it goes on after a transient one)
//		if ld.Term == 0 { ... }     // nobody leads
//		route(ld.Value, ld.Term)    // the leader and its term
//	}
//
// A change is a new term (a new leader), or the end of one with nobody
// elected (Leader{}, Term 0). It blocks on the store's watch of the
// election's key (lock.Client.Watch) rather than polling, so a hand-over
// is seen as soon as the store applies it; on a store without
// lock.Watcher it reads Leader every PollInterval instead. The value is the
// one the leader campaigned with (kept as the election key's metadata); it
// is "" if it published none, or, for a leader that campaigned with an
// older version, until its value key is listed. As for any watch, changes
// that follow each other faster than the loop reads may be seen as one
// (the latest), and a cluster follower's answer may lag the leader's by its
// replication delay. It stops after yielding ctx's error, or an error that
// retrying cannot cure (ErrInvalid, a closed store).
func (e *Election) Observe(ctx context.Context) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		if err := e.validate(""); err != nil {
			yield(Leader{}, err)
			return
		}
		var last Leader
		first := true
		changed := func(ld Leader) bool {
			if !first && ld.Term == last.Term && ld.Value == last.Value {
				return true // the same leadership (an extend, a waiter): nothing to say
			}
			first, last = false, ld
			return yield(ld, nil)
		}
		watched := false
		for info, err := range e.client.Watch(ctx, e.Key()) {
			if err != nil {
				if !watched && errors.Is(err, errors.ErrUnsupported) {
					// The store cannot watch: its first answer says so,
					// before any state.
					e.poll(ctx, changed, yield)
					return
				}
				if !yield(Leader{}, fmt.Errorf("election: observing %q: %w", e.name, err)) {
					return
				}
				continue // Watch ends by itself when it cannot go on
			}
			watched = true
			if !changed(e.leaderOf(ctx, info)) {
				return
			}
		}
	}
}

// leaderOf is the leadership info shows: nobody (Leader{}) when the key is
// free or in a lock-delay.
func (e *Election) leaderOf(ctx context.Context, info lock.KeyInfo) Leader {
	if !info.Locked || info.Delayed {
		return Leader{}
	}
	ld := Leader{Term: info.Token, Remaining: info.Remaining, Value: info.Metadata}
	if ld.Value == "" {
		ld.Value, _ = e.publishedValue(ctx, ld.Term) // best effort: "" when it cannot be read
	}
	return ld
}

// poll is Observe on a store that cannot watch.
func (e *Election) poll(ctx context.Context, changed func(Leader) bool, yield func(Leader, error) bool) {
	ticker := time.NewTicker(PollInterval)
	defer ticker.Stop()
	for {
		ld, err := e.Leader(ctx)
		switch {
		case err == nil || errors.Is(err, ErrNoLeader):
			if !changed(ld) {
				return
			}
		case ctx.Err() != nil:
		default:
			if !yield(Leader{}, err) || errors.Is(err, lock.ErrClosed) {
				return
			}
		}
		select {
		case <-ctx.Done():
			yield(Leader{}, fmt.Errorf("election: observing %q: %w", e.name, ctx.Err()))
			return
		case <-ticker.C:
		}
	}
}
