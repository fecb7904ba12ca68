package lock

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"reflect"
	"slices"
	"time"
)

// Watch limits.
const (
	// DefaultWatchWait bounds a blocking query that gives no Wait, as
	// Consul's default of 5 minutes.
	DefaultWatchWait = 5 * time.Minute
	// MaxWatchWait bounds every blocking query (a longer Wait is cut to it),
	// as Consul's 10 minutes. A store adds up to Wait/16 of random jitter,
	// as Consul does, so that many watchers started together do not all
	// come back together.
	MaxWatchWait = 10 * time.Minute
	// DefaultMaxWatchers is how many blocking queries one store serves at
	// once unless configured otherwise; past it, a query fails with
	// ErrTooManyWatchers.
	DefaultMaxWatchers = 10_000
)

// ErrTooManyWatchers: the store already serves its maximum of blocking
// queries. Try again later, or watch a prefix rather than many keys.
var ErrTooManyWatchers = errors.New("lock: too many watchers")

// WatchQuery makes a read a blocking query.
type WatchQuery struct {
	// Index is the index of an earlier answer: the read blocks until a change
	// in its scope is applied after it. 0 answers at once.
	Index uint64
	// Wait bounds the block: 0 is DefaultWatchWait, more than MaxWatchWait is
	// MaxWatchWait; the store adds up to Wait/16 of jitter. When it ends, the
	// read answers the state and index of that moment (likely the same).
	Wait time.Duration
	// Consistent asks a store that answers from local state (a cluster node)
	// to read through the leader, linearizably, once woken; the index is
	// still the local one, so that no change is missed. Stores that only
	// read linearizably ignore it.
	Consistent bool
}

// Validate checks the query: Wait not negative. The error matches
// ErrInvalidWait.
func (q WatchQuery) Validate() error {
	if q.Wait < 0 {
		return fmt.Errorf("%w: watch wait is negative (got %v)", ErrInvalidWait, q.Wait)
	}
	return nil
}

// BlockFor is how long a store blocks for q: Wait, or DefaultWatchWait when
// zero, at most MaxWatchWait, plus up to a sixteenth of it of random jitter.
func (q WatchQuery) BlockFor() time.Duration {
	d := q.Wait
	if d <= 0 {
		d = DefaultWatchWait
	}
	d = min(d, MaxWatchWait)
	if j := int64(d / 16); j > 0 {
		d += time.Duration(rand.Int64N(j))
	}
	return d
}

// Watcher is an optional Store ability, found by type assertion like
// Lister: blocking queries. Client.Watch, Client.WatchPrefix, Client.WatchKey
// and Client.WatchList use it and report errors.ErrUnsupported for a store
// without it. The memory store, cluster nodes and the API client have it.
//
// The index is the store's own: a cluster node's raft log index of the last
// entry it applied (the same on every node, so a caller may move between
// nodes), a memory store's count of applied commands. It only grows. An
// index the store no longer remembers changes since (it keeps the last few
// thousand, and none from before a snapshot restore) makes the query answer
// at once (a spurious wake). An index ahead of the store's: a cluster node
// first waits, within the wait, to catch up with it (the caller saw it on
// a node that had applied more), so that an answer never goes back in
// time; the memory store answers at once (it never gave that index). Either
// way the answer carries the store's own index, to use next.
type Watcher interface {
	// WatchKey answers key's state (as Inspect, never the owner) and the
	// index, once a change to key is applied after q.Index or the wait ends
	// (at once for index 0). It returns ctx's error if ctx ends first, and
	// ErrTooManyWatchers when the store serves its maximum of queries.
	WatchKey(ctx context.Context, key string, q WatchQuery) (KeyInfo, uint64, error)
	// WatchList answers the held keys req selects (as List) and the index,
	// once a change to a key that starts with req.Prefix is applied after
	// q.Index or the wait ends.
	WatchList(ctx context.Context, req ListRequest, q WatchQuery) ([]LockInfo, uint64, error)
}

func (c *Client) watcher() (Watcher, error) {
	w, ok := c.store.(Watcher)
	if !ok {
		return nil, fmt.Errorf("lock: %T cannot watch: %w", c.store, errors.ErrUnsupported)
	}
	return w, nil
}

// WatchKey is one blocking query on key, for callers that keep the index
// themselves (see Watcher.WatchKey); Watch is the loop most callers want.
// The store must implement Watcher (otherwise the error matches
// errors.ErrUnsupported).
func (c *Client) WatchKey(ctx context.Context, key string, q WatchQuery) (KeyInfo, uint64, error) {
	if err := ValidateKey(key); err != nil {
		return KeyInfo{}, 0, err
	}
	if err := q.Validate(); err != nil {
		return KeyInfo{}, 0, err
	}
	w, err := c.watcher()
	if err != nil {
		return KeyInfo{}, 0, err
	}
	return w.WatchKey(ctx, key, q)
}

// WatchList is one blocking query on the held keys req selects (see
// Watcher.WatchList); WatchPrefix is the loop most callers want.
func (c *Client) WatchList(ctx context.Context, req ListRequest, q WatchQuery) ([]LockInfo, uint64, error) {
	if err := req.Validate(); err != nil {
		return nil, 0, err
	}
	if err := q.Validate(); err != nil {
		return nil, 0, err
	}
	w, err := c.watcher()
	if err != nil {
		return nil, 0, err
	}
	return w.WatchList(ctx, req, q)
}

// Watch yields key's state now, then again each time it changes, until ctx
// ends or the loop breaks:
//
//	for info, err := range c.Watch(ctx, "orders/42") {
//		if err != nil { ... } // ctx's end, or a store error (the watch goes on after a transient one)
//		fmt.Println(info.Locked, info.Token, info.Waiters)
//	}
//
// A change is a different holder (Token), lock or lock-delay state,
// metadata or number of waiters; an extend alone (only Remaining differs) is
// not yielded, nor a spurious wake. Consecutive changes applied faster than
// the loop reads may be seen as one (the latest state); none is missed: the
// state yielded is never older than a change already applied when the
// previous yield returned. It stops after yielding ctx's error, or an error
// that retrying cannot cure (bad input, a closed store, a store without
// Watcher: errors.ErrUnsupported); after any other error (a store that is
// briefly unavailable) it waits a little and goes on from the same index.
func (c *Client) Watch(ctx context.Context, key string) iter.Seq2[KeyInfo, error] {
	return func(yield func(KeyInfo, error) bool) {
		var last KeyInfo
		first := true
		watchLoop(ctx, func(q WatchQuery) (uint64, error) {
			info, index, err := c.WatchKey(ctx, key, q)
			if err != nil {
				return 0, err
			}
			if first || !sameKeyInfo(info, last) {
				first, last = false, info
				if !yield(info, nil) {
					return 0, errStop
				}
			}
			return index, nil
		}, func(err error) bool { return yield(KeyInfo{}, err) })
	}
}

// WatchPrefix yields the held keys under prefix (as List) now, then again
// each time one of them, or a key joining them, changes; as Watch, an
// extend alone is not yielded and errors are yielded as Watch does.
func (c *Client) WatchPrefix(ctx context.Context, prefix string) iter.Seq2[[]LockInfo, error] {
	return func(yield func([]LockInfo, error) bool) {
		var last []LockInfo
		first := true
		watchLoop(ctx, func(q WatchQuery) (uint64, error) {
			locks, index, err := c.WatchList(ctx, ListRequest{Prefix: prefix}, q)
			if err != nil {
				return 0, err
			}
			if first || !slices.EqualFunc(locks, last, func(a, b LockInfo) bool { return a.Key == b.Key && sameKeyInfo(a.KeyInfo, b.KeyInfo) }) {
				first, last = false, locks
				if !yield(locks, nil) {
					return 0, errStop
				}
			}
			return index, nil
		}, func(err error) bool { return yield(nil, err) })
	}
}

// errStop ends a watch loop: the consumer broke out of it.
var errStop = errors.New("lock: watch stopped")

// watchRetry bounds the pause of a watch loop after a transient error.
const (
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

// watchLoop calls query with the index of its last answer until ctx ends,
// query returns errStop, or an error that retrying cannot cure; each error
// but errStop goes to fail (which returns false to stop).
func watchLoop(ctx context.Context, query func(WatchQuery) (uint64, error), fail func(error) bool) {
	var index uint64
	pause := watchRetryMin
	for {
		next, err := query(WatchQuery{Index: index})
		switch {
		case err == nil:
			index, pause = next, watchRetryMin
			continue
		case errors.Is(err, errStop):
			return
		case ctx.Err() != nil:
			fail(fmt.Errorf("lock: watch: %w", ctx.Err()))
			return
		}
		if !fail(err) || permanentWatchError(err) {
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			fail(fmt.Errorf("lock: watch: %w", ctx.Err()))
			return
		case <-t.C:
		}
		pause = min(2*pause, watchRetryMax)
	}
}

// permanentWatchError: retrying the same query cannot succeed.
func permanentWatchError(err error) bool {
	for _, target := range []error{errors.ErrUnsupported, ErrClosed, ErrInvalidKey, ErrInvalidList, ErrInvalidWait} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// sameKeyInfo compares what a watch reports as a change: all but Remaining.
func sameKeyInfo(a, b KeyInfo) bool {
	a.Remaining, b.Remaining = 0, 0
	a.Holds, b.Holds = holdsTimeless(a.Holds), holdsTimeless(b.Holds)
	return reflect.DeepEqual(a, b) // DeepEqual: KeyInfo may gain fields that == cannot compare
}

// holdsTimeless is a copy of holds without their Remaining.
func holdsTimeless(holds []HoldInfo) []HoldInfo {
	if holds == nil {
		return nil
	}
	out := slices.Clone(holds)
	for i := range out {
		out[i].Remaining = 0
	}
	return out
}
