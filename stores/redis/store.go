package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/lock"
)

// DefaultPrefix starts the name of every Redis key a store keeps unless
// Options.Prefix says otherwise.
const DefaultPrefix = "raftlock:"

// DefaultHeartbeat is Options.Heartbeat's default.
const DefaultHeartbeat = 5 * time.Second

// Options configures a Store. The zero value is usable.
type Options struct {
	// Prefix starts the name of every Redis key the store keeps (default
	// DefaultPrefix). Stores with different prefixes on one Redis share
	// nothing, fencing tokens included.
	Prefix string
	// Heartbeat bounds how long a waiting acquire blocks without looking
	// again (default DefaultHeartbeat). Each look proves the waiter alive;
	// a waiter that has not looked for three heartbeats (its process died)
	// is dropped from the queue, so that the key is never handed to it.
	Heartbeat time.Duration
}

// Store is a lock.Store over Redis. It is safe for concurrent use; make one
// with New.
type Store struct {
	rdb       goredis.UniversalClient
	prefix    string
	heartbeat time.Duration
	scripts   scripts
	where     string // names the server in errors
	watch     watchHub
	wakes     wakeups

	closed    chan struct{} // closed by Close
	closeOnce sync.Once
}

var (
	_ lock.Store         = (*Store)(nil)
	_ lock.Lister        = (*Store)(nil)
	_ lock.AdminStore    = (*Store)(nil)
	_ lock.SessionStore  = (*Store)(nil)
	_ lock.Watcher       = (*Store)(nil)
	_ lock.MultiKeyStore = (*Store)(nil)
)

// New returns a store that keeps its locks in the Redis server rdb talks
// to. It does not contact the server: the first call that does reports an
// unreachable server or refused credentials. The store does not own rdb:
// Close stops what the store runs, and the caller closes rdb after it.
func New(rdb goredis.UniversalClient, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	where := "redis"
	if c, ok := rdb.(*goredis.Client); ok {
		where = "redis at " + c.Options().Addr
	}
	s := &Store{rdb: rdb, prefix: opts.Prefix, heartbeat: opts.Heartbeat, scripts: loadScripts(), where: where, closed: make(chan struct{})}
	s.watch.init(s)
	s.wakes.init(s)
	return s
}

// Close stops the store: calls after it, and the acquires and watches
// waiting when it is called, fail with lock.ErrClosed (a waiting acquire
// leaves its queues first). It does not close the Redis client. Close is
// idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	s.watch.close()
	return nil
}

// run runs one step on the server; op names it in errors.
func (s *Store) run(ctx context.Context, script *goredis.Script, op string, args ...any) (any, error) {
	select {
	case <-s.closed:
		return nil, lock.ErrClosed
	default:
	}
	v, err := script.Run(ctx, s.rdb, nil, append([]any{s.prefix}, args...)...).Result()
	if err != nil {
		return nil, s.fail(op, err)
	}
	return v, nil
}

func (s *Store) runReply(ctx context.Context, script *goredis.Script, op string, args ...any) (reply, error) {
	v, err := s.run(ctx, script, op, args...)
	if err != nil {
		return nil, err
	}
	return asReply(v)
}

// fail turns a Redis client error into the lock API's: ErrUnavailable when
// the server cannot be reached or refuses to serve (with ErrUnknownOutcome
// when the connection failed after the request may have been sent), ctx's
// error as it is.
func (s *Store) fail(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("redis store: %s: %w", op, err)
	}
	msg := err.Error()
	var rerr goredis.Error
	var nerr net.Error
	var operr *net.OpError
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("%w: %s refused the credentials (%v): give the client the Username and Password the server expects", lock.ErrUnavailable, s.where, err)
	case strings.HasPrefix(msg, "READONLY"), strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "MASTERDOWN"), strings.HasPrefix(msg, "OOM"), strings.HasPrefix(msg, "BUSY"):
		return fmt.Errorf("%w: %s cannot %s now: %v", lock.ErrUnavailable, s.where, op, err)
	case errors.As(err, &rerr):
		return fmt.Errorf("redis store: %s: %s answered: %w", op, s.where, err)
	case errors.As(err, &operr) && operr.Op == "dial":
		return fmt.Errorf("%w: cannot reach %s: %v", lock.ErrUnavailable, s.where, err)
	case errors.Is(err, goredis.ErrClosed):
		return fmt.Errorf("%w: the redis client is closed", lock.ErrClosed)
	case errors.As(err, &nerr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %w: the connection to %s failed during %s: %v", lock.ErrUnavailable, lock.ErrUnknownOutcome, s.where, op, err)
	}
	return fmt.Errorf("redis store: %s: %w", op, err)
}

// Acquire implements lock.Store. A waiting acquire blocks on a wake-up
// stream of its own (the Store reads all of them on one connection), woken
// by the step that hands it the key; it looks again by itself when the
// earliest hold on the key is due to end (Redis has no timer to hand an
// expired lock on), and every Heartbeat. A request with Keys is a
// multi-key acquire (AcquireAll).
func (s *Store) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if err := req.Validate(); err != nil {
		return lock.Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return lock.Lease{}, err
	}
	owner := req.Owner.String()
	script, args := s.scripts.acquire, []any{req.Key, owner, us(req.TTL), 0, req.Metadata, int(req.Kind), req.Limit, 0, "", us(3 * s.heartbeat)}
	const waitArg = 3
	if req.Shared {
		args[7] = 1
	}
	if !req.Session.IsZero() {
		args[8] = req.Session.String()
	}
	if req.Keys != nil {
		script, args = s.scripts.acquireAll, []any{owner, us(req.TTL), 0, req.Metadata, us(3 * s.heartbeat)}
		for _, k := range req.Keys {
			args = append(args, k)
		}
	}
	waitAt := waitArg
	if req.Keys != nil {
		waitAt = 2
	}
	// keyAt is the key an answer about the place-th key names.
	keyAt := func(place int64) string {
		if place >= 1 && int(place) <= len(req.Keys) {
			return req.Keys[place-1]
		}
		return req.Key
	}
	deadline := time.Now().Add(req.Wait)
	queued := false
	for {
		args[waitAt] = us(req.Wait)
		if queued {
			args[waitAt] = us(max(time.Until(deadline), 0))
		}
		r, err := s.runReply(ctx, script, "acquire", args...)
		if err != nil {
			if queued {
				s.leave(req.Key, owner)
			}
			return lock.Lease{}, err
		}
		switch r.str(0) {
		case "G":
			lease := lock.Lease{Token: uint64(r.int(1)), Remaining: r.dur(2), TTL: r.dur(3)}
			if queued && req.Session.IsZero() {
				lease.TTL = req.TTL // granted by a hand-off: a new lease of the TTL asked
			}
			return lease, nil
		case "Q":
			queued = true
			block := s.heartbeat
			if due := r.dur(1); r.int(1) >= 0 {
				block = min(block, due+time.Millisecond) // just past the hold's end
			}
			block = min(block, max(time.Until(deadline), time.Millisecond))
			up, err := s.block(ctx, keyAt(1), owner, r.str(2), block)
			if err != nil {
				s.leave(req.Key, owner)
				return lock.Lease{}, err
			}
			if up.token != 0 {
				// Handed the key: the lease left at the step that granted it,
				// counted from our last send (before that step).
				lease := lock.Lease{Token: up.token, Remaining: up.remaining, TTL: req.TTL}
				if !req.Session.IsZero() {
					lease.TTL = 0
				}
				return lease, nil
			}
		case "H":
			held := &lock.HeldError{Key: keyAt(r.int(4)), Token: uint64(r.int(1)), Reserved: r.int(3) == 1}
			if held.Token != 0 {
				held.Remaining = r.dur(2)
			}
			return lock.Lease{}, held
		case "K":
			return lock.Lease{}, &lock.KindMismatchError{Key: keyAt(r.int(3)), Kind: lock.Kind(r.int(1)), Limit: int(r.int(2)), AskedKind: req.Kind, AskedLimit: req.Limit}
		case "F":
			return lock.Lease{}, fmt.Errorf("%w: %d callers already wait for %q", lock.ErrQueueFull, r.int(1), req.Key)
		case "S":
			return lock.Lease{}, fmt.Errorf("%w: the session has ended or does not exist", lock.ErrNoSession)
		default:
			return lock.Lease{}, fmt.Errorf("redis store: unexpected acquire answer %v", r)
		}
	}
}

// AcquireAll implements lock.MultiKeyStore: Acquire of a request with Keys.
func (s *Store) AcquireAll(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if req.Keys == nil {
		req.Keys = []string{} // reported as an empty set
	}
	return s.Acquire(ctx, req)
}

// block waits for a wake-up of owner's after the one named after, for at
// most d, or until ctx ends (then it returns ctx's error, naming key, the
// key waited for, as every store does). A zero wakeup means: look again.
func (s *Store) block(ctx context.Context, key, owner, after string, d time.Duration) (wakeup, error) {
	w := s.wakes.add(s.prefix+"w:"+owner, after)
	defer s.wakes.remove(w)
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case up := <-w.woken:
		return up, nil
	case <-timer.C:
		return wakeup{}, nil
	case <-ctx.Done():
		return wakeup{}, fmt.Errorf("lock: waiting for %q: %w", key, ctx.Err())
	case <-s.closed:
		return wakeup{}, lock.ErrClosed
	}
}

// leave takes owner out of key's queue, or gives back the key if it was
// handed over meanwhile: a waiting acquire that gives up. When the server
// cannot be reached, the waiter is dropped after three heartbeats.
func (s *Store) leave(key, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.heartbeat)
	defer cancel()
	_ = s.scripts.release.Run(ctx, s.rdb, nil, s.prefix, key, owner, "1").Err()
}

// Release implements lock.Store.
func (s *Store) Release(ctx context.Context, key string, owner lock.Owner) (bool, error) {
	if err := lock.ValidateRelease(key, owner); err != nil {
		return false, err
	}
	v, err := s.run(ctx, s.scripts.release, "release", key, owner.String(), "0")
	if err != nil {
		return false, err
	}
	n, _ := v.(int64)
	return n == 1, nil
}

// Extend implements lock.Store.
func (s *Store) Extend(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error) {
	if err := lock.ValidateExtend(key, owner, ttl); err != nil {
		return lock.Lease{}, err
	}
	r, err := s.runReply(ctx, s.scripts.extend, "extend", key, owner.String(), us(ttl))
	if err != nil {
		return lock.Lease{}, err
	}
	if len(r) == 0 {
		return lock.Lease{}, fmt.Errorf("%w: %q", lock.ErrNotHeld, key) // the memory store's and the cluster's words (locktest)
	}
	return lock.Lease{Token: uint64(r.int(0)), Remaining: r.dur(1), TTL: r.dur(2)}, nil
}

// Inspect implements lock.Store.
func (s *Store) Inspect(ctx context.Context, key string) (lock.KeyInfo, error) {
	return s.inspect(ctx, key)
}

func (s *Store) inspect(ctx context.Context, key string) (lock.KeyInfo, error) {
	if err := lock.ValidateKey(key); err != nil {
		return lock.KeyInfo{}, err
	}
	r, err := s.runReply(ctx, s.scripts.inspect, "inspect", key)
	if err != nil {
		return lock.KeyInfo{}, err
	}
	return keyInfo(r), nil
}

// ForceRelease implements lock.AdminStore. On a semaphore or read/write
// lock it ends every hold, and answers the newest token it ended.
func (s *Store) ForceRelease(ctx context.Context, key string) (uint64, error) {
	if err := lock.ValidateKey(key); err != nil {
		return 0, err
	}
	v, err := s.run(ctx, s.scripts.force, "force-release", key)
	if err != nil {
		return 0, err
	}
	token, _ := v.(int64)
	if token == 0 {
		return 0, fmt.Errorf("%w: nobody holds %q", lock.ErrNotHeld, key)
	}
	return uint64(token), nil
}

// List implements lock.Lister.
func (s *Store) List(ctx context.Context, req lock.ListRequest) ([]lock.LockInfo, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	r, err := s.runReply(ctx, s.scripts.list, "list", req.Prefix, req.After, req.Limit)
	if err != nil {
		return nil, err
	}
	var out []lock.LockInfo
	entries := r.list(0)
	for i := range entries {
		e := entries.list(i)
		out = append(out, lock.LockInfo{Key: e.str(0), KeyInfo: keyInfo(e.list(1))})
	}
	return out, nil
}
