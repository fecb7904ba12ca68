package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/lock"
)

// WatchKey implements lock.Watcher. The index is the store's change count
// (plus one), kept in Redis, so it is the same for every Store on that
// Redis. Changes are heard over one pub/sub subscription per Store; a
// watch also looks again when a hold it read is due to end (nobody else
// may touch the key then), and when the subscription was lost and made
// again (a spurious wake, never a missed change: every look checks the
// store's log of the last few thousand changes).
func (s *Store) WatchKey(ctx context.Context, key string, q lock.WatchQuery) (lock.KeyInfo, uint64, error) {
	if err := lock.ValidateKey(key); err != nil {
		return lock.KeyInfo{}, 0, err
	}
	var info lock.KeyInfo
	index, err := s.watchLoop(ctx, q, watchScope{name: key}, func(r reply) { info = keyInfo(r) })
	return info, index, err
}

// WatchList implements lock.Watcher.
func (s *Store) WatchList(ctx context.Context, req lock.ListRequest, q lock.WatchQuery) ([]lock.LockInfo, uint64, error) {
	if err := req.Validate(); err != nil {
		return nil, 0, err
	}
	var locks []lock.LockInfo
	index, err := s.watchLoop(ctx, q, watchScope{name: req.Prefix, prefix: true, after: req.After, limit: req.Limit}, func(r reply) {
		locks = nil
		for i := range r {
			e := r.list(i)
			locks = append(locks, lock.LockInfo{Key: e.str(0), KeyInfo: keyInfo(e.list(1))})
		}
	})
	return locks, index, err
}

// watchScope is what a watch reads: a key, or the held keys under a prefix.
type watchScope struct {
	name   string
	prefix bool
	after  string
	limit  int
}

func (w watchScope) covers(key string) bool {
	if w.prefix {
		return strings.HasPrefix(key, w.name)
	}
	return key == w.name
}

// watchLoop reads scope (answer gets each read's answer) until a read
// finds a change since q.Index, the wait ends, or ctx does; it returns the
// index of the last read.
func (s *Store) watchLoop(ctx context.Context, q lock.WatchQuery, scope watchScope, answer func(reply)) (uint64, error) {
	if err := q.Validate(); err != nil {
		return 0, err
	}
	read := func(index uint64) (changed bool, next uint64, due time.Duration, err error) {
		op := "key"
		if scope.prefix {
			op = "list"
		}
		r, err := s.runReply(ctx, s.scripts.watch, "watch", op, scope.name, scope.after, scope.limit, index)
		if err != nil {
			return false, 0, 0, err
		}
		answer(r.list(1))
		due = -1
		if r.int(3) >= 0 {
			due = r.dur(3)
		}
		return r.int(0) == 1, uint64(r.int(2)), due, nil
	}
	if q.Index == 0 {
		_, next, _, err := read(0)
		return next, err
	}
	w, err := s.watch.add(ctx, scope)
	if err != nil {
		return 0, err
	}
	defer s.watch.remove(w)
	end := time.Now().Add(q.BlockFor())
	for {
		changed, next, due, err := read(q.Index)
		if err != nil || changed || !time.Now().Before(end) {
			return next, err
		}
		left := time.Until(end)
		if due >= 0 {
			left = min(left, due+time.Millisecond)
		}
		timer := time.NewTimer(left)
		select {
		case <-w.woken:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return 0, fmt.Errorf("lock: watch: %w", ctx.Err())
		case <-s.watch.done:
			timer.Stop()
			return 0, lock.ErrClosed
		}
		timer.Stop()
	}
}

// watchHub is a Store's one subscription to the change channel, and the
// watches it wakes.
type watchHub struct {
	store *Store
	done  chan struct{} // closed by close

	mu       sync.Mutex // protects the fields below
	watchers map[*watcher]struct{}
	ready    chan struct{} // closed once the subscription is confirmed
	started  bool
	closed   bool
	cancel   context.CancelFunc
}

type watcher struct {
	scope watchScope
	woken chan struct{} // size one: a wake is a flag, never lost, never blocking
}

func (h *watchHub) init(s *Store) {
	h.store, h.done = s, make(chan struct{})
	h.watchers = make(map[*watcher]struct{})
	h.ready = make(chan struct{})
}

// add registers a watch and returns once the subscription is confirmed,
// so that every change made after add returns wakes it.
func (h *watchHub) add(ctx context.Context, scope watchScope) (*watcher, error) {
	w := &watcher{scope: scope, woken: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, lock.ErrClosed
	}
	if len(h.watchers) >= lock.DefaultMaxWatchers {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: this store already serves %d watches", lock.ErrTooManyWatchers, lock.DefaultMaxWatchers)
	}
	h.watchers[w] = struct{}{}
	if !h.started {
		h.started = true
		runCtx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		go h.run(runCtx)
	}
	ready := h.ready
	h.mu.Unlock()
	select {
	case <-ready:
		return w, nil
	case <-ctx.Done():
		h.remove(w)
		return nil, fmt.Errorf("lock: watch: %w", ctx.Err())
	case <-h.done:
		return nil, lock.ErrClosed
	}
}

func (h *watchHub) remove(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watchers, w)
}

// run receives the change channel until ctx ends. A confirmed
// (re)subscription wakes every watch: changes made while it was lost were
// not heard.
func (h *watchHub) run(ctx context.Context) {
	ps := h.store.rdb.Subscribe(ctx, h.store.prefix+"chg")
	defer ps.Close()
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, goredis.ErrClosed) {
				return
			}
			h.wake(func(*watcher) bool { return true })
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond): // the server is away: retry gently
			}
			continue
		}
		switch m := msg.(type) {
		case *goredis.Subscription:
			h.mu.Lock()
			select {
			case <-h.ready:
			default:
				close(h.ready)
			}
			h.mu.Unlock()
			h.wake(func(*watcher) bool { return true })
		case *goredis.Message:
			h.wake(func(w *watcher) bool { return w.scope.covers(m.Payload) })
		}
	}
}

func (h *watchHub) wake(match func(*watcher) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		if match(w) {
			select {
			case w.woken <- struct{}{}:
			default:
			}
		}
	}
}

func (h *watchHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	close(h.done)
	if h.cancel != nil {
		h.cancel()
	}
}
