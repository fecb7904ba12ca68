package memstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftlock/raftlock/internal/watchhub"
	"github.com/raftlock/raftlock/lock"
)

// watchRingSize is how many recent changes a store remembers for watches: a
// watch whose index is older than that many changes answers at once.
const watchRingSize = 4096

// WatchKey implements Watcher. The index counts the commands the store has
// applied (reads included: each applies the expiries due).
func (s *Store) WatchKey(ctx context.Context, key string, q lock.WatchQuery) (lock.KeyInfo, uint64, error) {
	if err := lock.ValidateKey(key); err != nil {
		return lock.KeyInfo{}, 0, err
	}
	if err := s.block(ctx, key, false, q); err != nil {
		return lock.KeyInfo{}, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return lock.KeyInfo{}, 0, lock.ErrClosed
	}
	return s.inspectLocked(key), s.index, nil
}

// WatchList implements Watcher.
func (s *Store) WatchList(ctx context.Context, req lock.ListRequest, q lock.WatchQuery) ([]lock.LockInfo, uint64, error) {
	if err := req.Validate(); err != nil {
		return nil, 0, err
	}
	if err := s.block(ctx, req.Prefix, true, q); err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, 0, lock.ErrClosed
	}
	return s.listLocked(req, []lock.LockInfo{}), s.index, nil
}

// block waits, for a query with an index, until the hub says scope changed
// after it (or the wait ends).
func (s *Store) block(ctx context.Context, scope string, prefix bool, q lock.WatchQuery) error {
	if err := q.Validate(); err != nil {
		return err
	}
	if q.Index == 0 {
		return ctx.Err()
	}
	s.mu.Lock()
	unknown := q.Index > s.index
	s.mu.Unlock()
	if unknown {
		// An index this store never answered (another store's, or one from
		// before the process restarted): what the caller saw is not this
		// store's state, so answer at once.
		return ctx.Err()
	}
	return hubError(s.hub.Wait(ctx, scope, prefix, q.Index, q.BlockFor()), scope, s.maxWatchers)
}

// hubError turns a watchhub error into this package's.
func hubError(err error, scope string, maxWatchers int) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, watchhub.ErrClosed):
		return lock.ErrClosed
	case errors.Is(err, watchhub.ErrFull):
		return fmt.Errorf("%w: watching %q: the store serves its maximum of blocking queries (%d)", lock.ErrTooManyWatchers, scope, maxWatchers)
	}
	return fmt.Errorf("lock: watching %q: %w", scope, err)
}
