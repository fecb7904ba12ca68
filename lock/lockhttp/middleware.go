package lockhttp

import (
	"context"
	"errors"
	"net/http"

	"github.com/raftlock/raftlock/lock"
)

// ErrNilArgument: Middleware was given a nil client or key function, or
// wraps a nil handler. Every request then goes to OnError (500 by default)
// rather than panicking.
var ErrNilArgument = errors.New("lockhttp: nil client, key function or handler")

// KeyFunc names the lock a request needs: one key for the whole handler
// (Key), or one per resource, e.g. "account:" + r.PathValue("id"). It must not
// block, and it must return the same key for requests that must exclude each
// other. An empty key is refused with ErrInvalidKey (400 by default).
type KeyFunc func(r *http.Request) string

// Key is the KeyFunc of a handler that one request at a time may run.
func Key(key string) KeyFunc {
	return func(*http.Request) string { return key }
}

// Middleware returns middleware that runs each request under the lock key
// names, taken through c: see the package documentation for what happens when
// the lock is held, when the store fails, and while the handler runs.
//
// The handler runs at most once per request and only while the lock is held
// (as far as the lease's conservative deadline tells; see lock.Lock.Run).
// Middleware is safe for concurrent use, as is the handler it returns.
func Middleware(c *lock.Client, key KeyFunc, opts ...Option) func(http.Handler) http.Handler {
	cfg := newConfig(opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c == nil || key == nil || next == nil {
				cfg.onError(w, r, ErrNilArgument)
				return
			}
			serve(c, key(r), cfg, next, w, r)
		})
	}
}

func serve(c *lock.Client, key string, cfg config, next http.Handler, w http.ResponseWriter, r *http.Request) {
	var lockOpts []lock.LockOption
	if cfg.ttlSet {
		lockOpts = append(lockOpts, lock.TTL(cfg.ttl))
	}
	l := c.Lock(key, lockOpts...)
	handle := func(ctx context.Context) error {
		ctx = context.WithValue(ctx, tokenKey{}, l.Token())
		next.ServeHTTP(w, r.WithContext(ctx))
		return nil
	}

	var ran bool
	var err error
	if cfg.waitSet {
		ran, err = l.Run(r.Context(), handle, lock.Wait(cfg.wait))
	} else {
		ran, err = l.TryRun(r.Context(), handle)
	}
	switch {
	case ran:
		if err != nil {
			cfg.onLeaseError(r, err)
		}
	case err == nil:
		cfg.onLocked(w, r, holder(r.Context(), c, key))
	default:
		cfg.onError(w, r, err)
	}
}

// holder describes who holds key, for a request that found it held. Run
// reports contention as ran == false without the store's *lock.HeldError, so
// this asks the store once more; if the key was released meanwhile, the
// answer has no token.
func holder(ctx context.Context, c *lock.Client, key string) *lock.HeldError {
	held := &lock.HeldError{Key: key}
	if info, err := c.Inspect(ctx, key); err == nil && info.Locked {
		held.Token, held.Remaining = info.Token, info.Remaining
	} else if err == nil {
		held.Reserved = info.Reserved
	}
	return held
}

type tokenKey struct{}

// Token is the fencing token of the lease a request runs under, taken from the
// context of a request inside Middleware's handler. Pass it with every write
// to the resource the lock protects, so the resource can refuse a writer whose
// lease has ended. It reports false for a context that did not come from
// Middleware.
func Token(ctx context.Context) (uint64, bool) {
	token, ok := ctx.Value(tokenKey{}).(uint64)
	return token, ok
}
