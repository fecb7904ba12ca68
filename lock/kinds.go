package lock

import (
	"fmt"
	"strconv"
)

// Kind is what a key is while anyone holds or waits for it: a mutex (one
// holder), a semaphore (at most Limit holders) or a read/write lock (any
// number of readers, up to MaxHolders, or one writer). The acquire that
// creates the key sets its kind (and a semaphore's limit); an acquire of
// another kind, or of a semaphore with another limit, while the key exists
// fails with an error matching ErrKindMismatch. Once nobody holds or waits,
// the key is gone and any kind may take it.
type Kind uint8

const (
	KindMutex     Kind = 0 // Client.Lock: one holder
	KindSemaphore Kind = 1 // Client.Semaphore: at most Limit holders
	KindRWLock    Kind = 2 // Client.RWLock: readers share, a writer is alone
)

// MaxHolders bounds a semaphore's limit (1..MaxHolders) and the readers of
// one read/write lock: the same bound as MaxWaiters.
const MaxHolders = MaxWaiters

// String is the kind's name: "mutex", "semaphore" or "rwlock" (as the HTTP
// API and the CLI write it).
func (k Kind) String() string {
	switch k {
	case KindMutex:
		return "mutex"
	case KindSemaphore:
		return "semaphore"
	case KindRWLock:
		return "rwlock"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind reads what String writes; "" is the mutex.
func ParseKind(s string) (Kind, error) {
	for _, k := range []Kind{KindMutex, KindSemaphore, KindRWLock} {
		if s == k.String() {
			return k, nil
		}
	}
	if s == "" {
		return KindMutex, nil
	}
	return 0, fmt.Errorf("%w: kind must be mutex, semaphore or rwlock (got %q)", ErrInvalidKind, s)
}

// describeKind names a kind for people: "a mutex", "a semaphore of 8", "a
// read/write lock".
func describeKind(k Kind, limit int) string {
	switch k {
	case KindSemaphore:
		return fmt.Sprintf("a semaphore of %d", limit)
	case KindRWLock:
		return "a read/write lock"
	case KindMutex:
		return "a mutex"
	}
	return k.String()
}

// KindMismatchError reports an acquire of another kind (or of a semaphore
// with another limit) than the key's while the key exists. It matches
// ErrKindMismatch.
type KindMismatchError struct {
	Key        string
	Kind       Kind // what the key is
	Limit      int  // the key's limit, for a semaphore
	AskedKind  Kind // what the acquire asked for
	AskedLimit int
}

func (e *KindMismatchError) Error() string {
	return fmt.Sprintf("lock: key %q is %s; asked for %s", e.Key, describeKind(e.Kind, e.Limit), describeKind(e.AskedKind, e.AskedLimit))
}

// Is makes errors.Is(err, ErrKindMismatch) true.
func (e *KindMismatchError) Is(target error) bool { return target == ErrKindMismatch }

// Semaphore returns a handle on key as a semaphore of n: at most n
// handles (in any process) hold it at once, each with its own fencing
// token and lease, released, extended and expired on its own. Waiters are
// served in strict FIFO order: a waiter is never passed by one that came
// after it. n is fixed by the acquire that creates the key; an acquire
// with another n while anyone holds or waits fails with ErrKindMismatch.
// n must be 1..MaxHolders (ErrInvalidLimit, from the first acquire). Like
// Client.Lock, it does not touch the store, and the handle holds at most
// one slot: give each goroutine its own.
func (c *Client) Semaphore(key string, n int, opts ...LockOption) *Lock {
	l := c.Lock(key, opts...)
	l.kind, l.limit = KindSemaphore, n
	return l
}

// RWLock is a read/write lock on one key: any number of readers (up to
// MaxHolders) hold it together, or one writer alone. Waiters are served in
// strict FIFO order, so a writer waits only for the readers that came
// before it, never for readers that came after it (writers are not
// starved), and readers queued behind a writer go together when it
// releases. Make one with Client.RWLock; it is only a factory of handles.
type RWLock struct {
	client *Client
	key    string
	opts   []LockOption
}

// RWLock returns a read/write lock on key. The key is a read/write lock
// while anyone holds or waits for it; a mutex or semaphore acquire of it
// meanwhile fails with ErrKindMismatch, and so does a read or write of a
// key held as something else. opts are the defaults of every handle it
// makes.
func (c *Client) RWLock(key string, opts ...LockOption) *RWLock {
	return &RWLock{client: c, key: key, opts: opts}
}

// Key is the locked key.
func (rw *RWLock) Key() string { return rw.key }

// Reader returns a new handle that takes the lock shared (a read lock),
// like sync.RWMutex's RLock. opts add to the RWLock's.
func (rw *RWLock) Reader(opts ...LockOption) *Lock {
	l := rw.client.Lock(rw.key, append(append([]LockOption(nil), rw.opts...), opts...)...)
	l.kind, l.shared = KindRWLock, true
	return l
}

// Writer returns a new handle that takes the lock exclusively (a write
// lock), like sync.RWMutex's Lock. opts add to the RWLock's.
func (rw *RWLock) Writer(opts ...LockOption) *Lock {
	l := rw.client.Lock(rw.key, append(append([]LockOption(nil), rw.opts...), opts...)...)
	l.kind = KindRWLock
	return l
}

// Kind is what the handle acquires as: KindMutex for Client.Lock,
// KindSemaphore (with Limit) for Client.Semaphore, KindRWLock for an
// RWLock's handles (Shared for a Reader).
func (l *Lock) Kind() Kind { return l.kind }

// Limit is a semaphore handle's n; 0 for other kinds.
func (l *Lock) Limit() int { return l.limit }

// Shared reports whether the handle is an RWLock's reader.
func (l *Lock) Shared() bool { return l.shared }
