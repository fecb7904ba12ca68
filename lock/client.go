package lock

import (
	"context"
	"errors"
	"fmt"
	"log"
	"runtime/debug"
	"time"
)

// Client makes lock handles on one Store. It is safe for concurrent use and
// holds no state besides its store and hooks, so one per store is enough.
type Client struct {
	store   Store
	hooks   Hooks
	session *Session // the session handles are bound to (WithSession), nil for leases
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHooks sets the hooks called for every handle of the client.
func WithHooks(h Hooks) ClientOption {
	return func(c *Client) { c.hooks = h }
}

// New returns a client that keeps its locks in store. A nil store is a
// programming error and panics here, at startup, rather than on first use.
func New(store Store, opts ...ClientOption) *Client {
	if store == nil {
		panic("lock: New called with a nil Store")
	}
	c := &Client{store: store}
	for _, opt := range opts {
		if opt != nil {
			opt(c)
		}
	}
	return c
}

// Lock returns a handle for key. It does not touch the store: nothing is
// acquired until Acquire, TryAcquire, Run or TryRun. opts may set the handle's
// TTL (DefaultTTL otherwise) and default Wait. An invalid key or option is
// reported by the first call that uses the store.
func (c *Client) Lock(key string, opts ...LockOption) *Lock {
	l := &Lock{client: c, key: key, ttl: DefaultTTL, session: c.session}
	applyOptions(l, opts, LockOption.applyLock)
	return l
}

// Inspect reports the state of key (held or not, its fencing token, the lease
// left) without taking it: linearizably, unless given Stale. The error
// matches ErrInvalidKey for a bad key; others come from the store.
func (c *Client) Inspect(ctx context.Context, key string, opts ...ReadOption) (KeyInfo, error) {
	if err := ValidateKey(key); err != nil {
		return KeyInfo{}, err
	}
	if sr, ok := c.store.(StaleReader); ok && collect(opts, ReadOption.applyRead).stale {
		return sr.InspectStale(key)
	}
	return c.store.Inspect(ctx, key)
}

// List reports the held keys req selects, if the store can list them (it
// implements Lister; with Stale, StaleReader serves the listing when the
// store has it); otherwise the error matches errors.ErrUnsupported.
func (c *Client) List(ctx context.Context, req ListRequest, opts ...ReadOption) ([]LockInfo, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if sr, ok := c.store.(StaleReader); ok && collect(opts, ReadOption.applyRead).stale {
		return sr.ListStale(req)
	}
	lister, ok := c.store.(Lister)
	if !ok {
		return nil, fmt.Errorf("lock: %T cannot list locks: %w", c.store, errors.ErrUnsupported)
	}
	return lister.List(ctx, req)
}

// ForceRelease ends key's lease whoever holds it and hands the key to the
// next waiter, if the store can (it implements AdminStore; otherwise the
// error matches errors.ErrUnsupported). It returns the fencing token of the
// lease it ended; a key nobody holds gives an error matching ErrNotHeld. It
// is an operator's tool for a lock whose holder is gone: the holder, if it
// is still there, learns only at its next Extend or Release (ErrNotHeld),
// so anything it protects must check fencing tokens.
func (c *Client) ForceRelease(ctx context.Context, key string) (uint64, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	admin, ok := c.store.(AdminStore)
	if !ok {
		return 0, fmt.Errorf("lock: %T cannot force-release locks: %w", c.store, errors.ErrUnsupported)
	}
	return admin.ForceRelease(ctx, key)
}

// Hooks observe every handle of a Client; any of them may be nil. They are
// called synchronously, on the goroutine that made the call (Run's keep-alive
// goroutine for a loss it discovers), after the
// handle's state has changed and never while the handle's or the client's
// internal locks are held, so a hook may use the handle. A slow hook slows
// that call (and, for Released, Run's return) and nothing else.
//
// A hook that panics does not break the lock: the panic is recovered and
// logged through the standard log package with its stack, and the call
// carries on as if the hook had returned. (As net/http does for handlers: a
// panic must not leave a lock held with nobody left to release it.)
type Hooks struct {
	// OnAcquired: a handle took the lock.
	OnAcquired func(ctx context.Context, e AcquiredEvent)
	// OnReleased: a handle stopped holding the lock, once per acquisition:
	// through Release (Run's included), or because the handle learned that its
	// lease was lost (Extend or IsExpired found it gone).
	OnReleased func(ctx context.Context, e ReleasedEvent)
	// OnContended: an acquire found the key held by another owner, whether or
	// not it gets the lock later by waiting. With this hook set, an acquire that
	// may wait first tries without waiting (so the hook fires before the wait,
	// at the cost of one more store call when the key is held).
	OnContended func(ctx context.Context, e ContendedEvent)
}

// AcquiredEvent is what OnAcquired learns.
type AcquiredEvent struct {
	Key   string
	Token uint64        // fencing token of the new lease
	TTL   time.Duration // lease length asked for
}

// ReleasedEvent is what OnReleased learns.
type ReleasedEvent struct {
	Key   string
	Token uint64        // fencing token of the lease that ended
	Held  time.Duration // from acquire (or Restore) to release, on the local clock
	Lost  bool          // the lease had ended (expired, or released with the owner elsewhere) before this handle released it
}

// ContendedEvent is what OnContended learns.
type ContendedEvent struct {
	Key       string
	Token     uint64        // the holder's fencing token
	Remaining time.Duration // the holder's lease left when we looked
	// Reserved: nobody holds the key; it is kept for a waiting multi-key
	// lock (HeldError.Reserved). Token and Remaining are zero.
	Reserved bool
}

func (c *Client) acquired(ctx context.Context, e AcquiredEvent) {
	if h := c.hooks.OnAcquired; h != nil {
		callHook("OnAcquired", e.Key, func() { h(ctx, e) })
	}
}

func (c *Client) released(ctx context.Context, e ReleasedEvent) {
	if h := c.hooks.OnReleased; h != nil {
		callHook("OnReleased", e.Key, func() { h(ctx, e) })
	}
}

func (c *Client) contended(ctx context.Context, held *HeldError) {
	if h := c.hooks.OnContended; h != nil {
		e := ContendedEvent{Key: held.Key, Token: held.Token, Remaining: held.Remaining, Reserved: held.Reserved}
		callHook("OnContended", e.Key, func() { h(ctx, e) })
	}
}

// callHook runs a hook and turns its panic into a log line (see Hooks).
func callHook(name, key string, call func()) {
	defer func() {
		if p := recover(); p != nil {
			log.Printf("lock: hook %s panicked for %q: %v\n%s", name, key, p, debug.Stack())
		}
	}()
	call()
}
