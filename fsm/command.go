package fsm

import (
	"errors"
	"strconv"
	"time"
)

// Input limits, enforced by Validate and relied on by every layer above.
const (
	MaxKeyLen  = 512              // bytes; keys are 1..MaxKeyLen bytes of any content
	MinTTL     = time.Millisecond // shortest lease
	MaxTTL     = 24 * time.Hour   // longest lease
	MaxWait    = 24 * time.Hour   // longest a waiter may queue
	MaxWaiters = 1 << 16          // waiters per key; beyond this an acquire answers StatusQueueFull

	// MaxMetaLen bounds a holder's metadata (Command.Meta): bytes of any
	// content, stored with the holder or waiter and shown by reads.
	MaxMetaLen = 1024
	// MaxLockDelay bounds a session's lock-delay (Consul's limit).
	MaxLockDelay = time.Minute

	// MaxHolders bounds the holders of one key: a semaphore's limit N
	// (1..MaxHolders) and a read/write key's shared holders. It is
	// MaxWaiters, so a key's holders and waiters together stay within
	// 2*MaxWaiters records: the per-key bound on memory, on a snapshot's
	// key record and on the work of ending a session's locks there.
	MaxHolders = MaxWaiters

	// MaxKeys bounds the keys of one multi-key acquire (OpAcquireAll). A
	// set is applied in one command: its size bounds that command's work
	// (k grants or k queue joins, each O(log n), and k hand-offs when it
	// ends), its encoding (at most 64 keys of 512 bytes: 32 KiB, well
	// inside one raft entry) and the memory one waiter can pin. The sets
	// users lock together (the rows of a transfer, the shards of a job)
	// are a handful of keys; 64 leaves room without letting one command
	// stall the log.
	MaxKeys = 64

	// MaxStamp is the latest log time a command may carry (about 146 years).
	// Bounding it keeps now+TTL and now+Wait far from overflow.
	MaxStamp = time.Duration(1 << 62)
)

// Validation errors. Messages carry no package prefix: callers wrap them.
var (
	ErrEmptyKey    = errors.New("key is empty")
	ErrKeyTooLong  = errors.New("key is longer than 512 bytes")
	ErrZeroOwner   = errors.New("owner is zero")
	ErrTTLRange    = errors.New("ttl must be between 1ms and 24h")
	ErrWaitRange   = errors.New("wait must be between 0 and 24h")
	ErrStampRange  = errors.New("stamp must be between 0 and MaxStamp")
	ErrUnusedField = errors.New("command sets a field its op does not use")
	ErrMetaTooLong = errors.New("metadata is longer than 1024 bytes")
	ErrZeroSession = errors.New("session is zero")
	ErrDelayRange  = errors.New("lock delay must be between 0 and 1m")
	ErrUnknownOp   = errors.New("unknown command")
	ErrUnknownKind = errors.New("unknown lock kind")
	ErrLimitRange  = errors.New("semaphore limit must be between 1 and 65536")
	// Multi-key acquire (OpAcquireAll) errors.
	ErrKeyCount     = errors.New("a multi-key acquire takes 1 to 64 keys")
	ErrKeysOrder    = errors.New("keys of a multi-key acquire must be in ascending byte order")
	ErrDuplicateKey = errors.New("a key appears twice in a multi-key acquire")
	ErrKeysSession  = errors.New("a multi-key acquire cannot be bound to a session: give it a TTL")
	ErrBadEncoding  = errors.New("malformed encoding")
	ErrBadVersion   = errors.New("unsupported encoding version")
)

// Owner identifies one acquisition: 128 random bits minted by the client.
// The zero Owner is invalid.
type Owner [ownerLen]byte

const ownerLen = 16

// IsZero reports whether o is the zero (invalid) owner.
func (o Owner) IsZero() bool { return o == Owner{} }

// Op is a command's kind.
type Op uint8

const (
	OpAcquire    Op = 1 // Key, Owner, TTL, Wait
	OpRelease    Op = 2 // Key, Owner
	OpExtend     Op = 3 // Key, Owner, TTL
	OpCancelWait Op = 4 // Key, Owner: leave the queue; if already granted, release
	OpTick       Op = 5 // only advances the clock (and so processes due deadlines)
	// OpNewTerm starts a new claim epoch: every waiter queued so far counts
	// as unclaimed until its owner acquires again (a leader's first command
	// of its term; see the package doc, "Claims").
	OpNewTerm Op = 6
	// OpDropUnclaimed drops every waiter not claimed in the current epoch.
	OpDropUnclaimed Op = 7
	// OpSessionCreate starts session Session (an ID minted by the client,
	// like an owner) with lease TTL and lock-delay LockDelay. A retry of a
	// live session answers its state and changes nothing.
	OpSessionCreate Op = 8
	// OpSessionRenew makes Session end TTL-of-the-session from now.
	OpSessionRenew Op = 9
	// OpSessionDestroy ends Session and releases every lock it holds in
	// this one command, handing each key to its next waiter; its waiters
	// leave their queues. No lock-delay applies.
	OpSessionDestroy Op = 10

	// Op codes 11 and 12 are wire forms of an acquire, never a Command's
	// Op (see encoding.go): 11 one that carries a session or metadata, 12
	// one of a semaphore or read/write key (Kind not KindMutex).
	wireAcquireExtended byte = 11
	wireAcquireKind     byte = 12
	// OpAcquireAll acquires every key of Keys (1..MaxKeys mutex keys in
	// strictly ascending byte order) for Owner, all or nothing, with lease
	// TTL, waiting up to Wait on all of them at once (see the package doc,
	// "Multi-key locks"). Release, extend and cancel-wait of any key of
	// the set act on the whole set. Op codes 14 and 15 stay reserved.
	OpAcquireAll Op = 13
	// OpForceRelease ends Key's lease whoever holds it (an operator's admin
	// release) and hands the key to the next waiter in the same step, as a
	// release does. Key only: it carries no owner, so it checks none.
	OpForceRelease Op = 16
)

func (op Op) String() string {
	switch op {
	case OpAcquire:
		return "acquire"
	case OpRelease:
		return "release"
	case OpExtend:
		return "extend"
	case OpCancelWait:
		return "cancel-wait"
	case OpTick:
		return "tick"
	case OpNewTerm:
		return "new-term"
	case OpDropUnclaimed:
		return "drop-unclaimed"
	case OpSessionCreate:
		return "session-create"
	case OpSessionRenew:
		return "session-renew"
	case OpSessionDestroy:
		return "session-destroy"
	case OpForceRelease:
		return "force-release"
	case OpAcquireAll:
		return "acquire-all"
	}
	return "op(" + strconv.Itoa(int(op)) + ")"
}

// Command is one state transition. Stamp is the leader's log clock: log time
// as a duration since the log clock began. Fields an Op does not use must be zero.
type Command struct {
	Op    Op
	Stamp time.Duration
	Key   string
	Owner Owner
	TTL   time.Duration
	Wait  time.Duration // acquire only: 0 means never queue
	// Session: for an acquire, the session the lock is bound to (zero:
	// none; then TTL is the lease, otherwise TTL must be zero: the lock
	// ends with the session); for the session ops, the session's ID.
	Session Owner
	// LockDelay, session-create only: how long the keys a session held
	// stay unavailable after the session expires (not after a destroy).
	LockDelay time.Duration
	// Meta, acquire only: the holder's metadata, at most MaxMetaLen bytes,
	// kept with the holder (and the waiter until its grant) and shown by
	// reads. Never put secrets in it.
	Meta string
	// Kind, acquire only: what the key is (see Kind); the acquire that
	// creates the key sets it, and one of another kind (or, for a
	// semaphore, another Limit) while the key exists answers
	// StatusKindMismatch.
	Kind Kind
	// Limit, a semaphore's acquire only: N, 1..MaxHolders.
	Limit int
	// Keys, acquire-all only (whose Key is empty): the set, 1..MaxKeys
	// keys in strictly ascending byte order.
	Keys []string
	// Shared, a read/write key's acquire only: a read (shared) hold;
	// false asks for the write (exclusive) hold.
	Shared bool
}

// Kind is what a key is while it exists (held or waited for): fixed by the
// acquire that creates it, open again once nobody holds or waits.
type Kind uint8

const (
	KindMutex     Kind = 0 // one holder
	KindSemaphore Kind = 1 // at most Limit holders
	KindRW        Kind = 2 // up to MaxHolders shared holders, or one exclusive holder
)

func (k Kind) String() string {
	switch k {
	case KindMutex:
		return "mutex"
	case KindSemaphore:
		return "semaphore"
	case KindRW:
		return "rwlock"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Validate checks a command against the input limits without applying it.
// It returns one of the validation sentinels above.
func (c Command) Validate() error {
	if c.Stamp < 0 || c.Stamp > MaxStamp {
		return ErrStampRange
	}
	if c.Op != OpAcquire && c.Op != OpAcquireAll && c.Meta != "" {
		return ErrUnusedField
	}
	if c.Op == OpAcquireAll {
		return c.validateAll()
	}
	if c.Keys != nil {
		return ErrUnusedField
	}
	if c.Op != OpSessionCreate && c.LockDelay != 0 {
		return ErrUnusedField
	}
	if c.Op != OpAcquire && (c.Kind != KindMutex || c.Limit != 0 || c.Shared) {
		return ErrUnusedField
	}
	switch c.Op {
	case OpAcquire, OpRelease, OpExtend, OpCancelWait:
		if c.Op != OpAcquire && !c.Session.IsZero() {
			return ErrUnusedField
		}
	case OpTick, OpNewTerm, OpDropUnclaimed:
		if c.Key != "" || !c.Owner.IsZero() || c.TTL != 0 || c.Wait != 0 || !c.Session.IsZero() {
			return ErrUnusedField
		}
		return nil
	case OpSessionCreate, OpSessionRenew, OpSessionDestroy:
		return c.validateSession()
	case OpForceRelease:
		if !c.Owner.IsZero() || c.TTL != 0 || c.Wait != 0 || !c.Session.IsZero() {
			return ErrUnusedField
		}
		return validKey(c.Key)
	default:
		return ErrUnknownOp
	}
	if err := validKey(c.Key); err != nil {
		return err
	}
	if c.Owner.IsZero() {
		return ErrZeroOwner
	}
	switch c.Op {
	case OpAcquire:
		if len(c.Meta) > MaxMetaLen {
			return ErrMetaTooLong
		}
		if !c.Session.IsZero() {
			if c.TTL != 0 {
				return ErrUnusedField // the lock has no lease of its own
			}
		} else if c.TTL < MinTTL || c.TTL > MaxTTL {
			return ErrTTLRange
		}
		if c.Wait < 0 || c.Wait > MaxWait {
			return ErrWaitRange
		}
		return c.validateKind()
	case OpExtend:
		if c.TTL < MinTTL || c.TTL > MaxTTL {
			return ErrTTLRange
		}
		if c.Wait != 0 {
			return ErrUnusedField
		}
	default: // release, cancel-wait
		if c.TTL != 0 || c.Wait != 0 {
			return ErrUnusedField
		}
	}
	return nil
}

// validateAll checks an acquire-all.
func (c Command) validateAll() error {
	if c.Key != "" || c.Kind != KindMutex || c.Limit != 0 || c.Shared || c.LockDelay != 0 {
		return ErrUnusedField
	}
	if !c.Session.IsZero() {
		return ErrKeysSession
	}
	if len(c.Keys) == 0 || len(c.Keys) > MaxKeys {
		return ErrKeyCount
	}
	for i, k := range c.Keys {
		if err := validKey(k); err != nil {
			return err
		}
		if i > 0 && k == c.Keys[i-1] {
			return ErrDuplicateKey
		}
		if i > 0 && k < c.Keys[i-1] {
			return ErrKeysOrder
		}
	}
	if c.Owner.IsZero() {
		return ErrZeroOwner
	}
	if len(c.Meta) > MaxMetaLen {
		return ErrMetaTooLong
	}
	if c.TTL < MinTTL || c.TTL > MaxTTL {
		return ErrTTLRange
	}
	if c.Wait < 0 || c.Wait > MaxWait {
		return ErrWaitRange
	}
	return nil
}

// validateKind checks an acquire's kind, limit and mode.
func (c Command) validateKind() error {
	switch c.Kind {
	case KindMutex, KindRW:
		if c.Limit != 0 {
			return ErrUnusedField
		}
	case KindSemaphore:
		if c.Limit < 1 || c.Limit > MaxHolders {
			return ErrLimitRange
		}
	default:
		return ErrUnknownKind
	}
	if c.Shared && c.Kind != KindRW {
		return ErrUnusedField
	}
	return nil
}

// validateSession checks the session ops' fields.
func (c Command) validateSession() error {
	if c.Key != "" || !c.Owner.IsZero() || c.Wait != 0 {
		return ErrUnusedField
	}
	if c.Session.IsZero() {
		return ErrZeroSession
	}
	if c.Op != OpSessionCreate {
		if c.TTL != 0 {
			return ErrUnusedField
		}
		return nil
	}
	if c.TTL < MinTTL || c.TTL > MaxTTL {
		return ErrTTLRange
	}
	if c.LockDelay < 0 || c.LockDelay > MaxLockDelay {
		return ErrDelayRange
	}
	return nil
}

// validKey checks a key against the key limits.
func validKey(key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	if len(key) > MaxKeyLen {
		return ErrKeyTooLong
	}
	return nil
}

// Status says exactly what a command did.
type Status uint8

const (
	StatusGranted   Status = 1  // acquire: Owner holds Key (new grant, or the idempotent repeat of a live one)
	StatusQueued    Status = 2  // acquire: held by another; Owner queued (or was already queued)
	StatusHeld      Status = 3  // acquire with Wait 0: held by another (or by, or queued for, Owner under another session or a lease); nothing changed
	StatusQueueFull Status = 4  // acquire: held by another and MaxWaiters already wait
	StatusExtended  Status = 5  // extend: lease now ends at ExpiresAt
	StatusReleased  Status = 6  // release, force-release, or cancel-wait of an owner that had been granted
	StatusCanceled  Status = 7  // cancel-wait: Owner left the queue
	StatusNotHeld   Status = 8  // release/extend/cancel-wait: Owner neither holds nor waits; force-release: nobody holds Key
	StatusTicked    Status = 9  // tick, new-term, drop-unclaimed
	StatusInvalid   Status = 10 // the command failed Validate; nothing changed except the clock
	// StatusNoSession: an acquire under, or a renew or destroy of, a
	// session that does not exist (never created, expired or destroyed);
	// nothing changed.
	StatusNoSession Status = 11
	// StatusKindMismatch: an acquire of another kind (or another
	// semaphore limit) than the key's while it exists; Result.Kind and
	// Result.Limit say what the key is. Nothing changed.
	StatusKindMismatch Status = 12
)

func (s Status) String() string {
	switch s {
	case StatusGranted:
		return "granted"
	case StatusQueued:
		return "queued"
	case StatusHeld:
		return "held"
	case StatusQueueFull:
		return "queue-full"
	case StatusExtended:
		return "extended"
	case StatusReleased:
		return "released"
	case StatusCanceled:
		return "canceled"
	case StatusNotHeld:
		return "not-held"
	case StatusTicked:
		return "ticked"
	case StatusInvalid:
		return "invalid"
	case StatusNoSession:
		return "no-session"
	case StatusKindMismatch:
		return "kind-mismatch"
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Result of one applied command.
type Result struct {
	Status    Status
	Token     uint64        // granted/extended/released: the owner's lease token (force-release: the token of the lease it ended); held/queued/queue-full: the holder's
	ExpiresAt time.Duration // granted/extended: when the owner's lease ends; held/queued/queue-full: the holder's
	Now       time.Duration // the machine's log time after this command: the leader's log clock when it answered, from which a holder counts Remaining
	Waiters   int           // queued: the owner's 1-based position (acquire-all: its worst place over its keys); new-term: the waiters now unclaimed; drop-unclaimed: the waiters dropped; session-destroy: the locks released; session-create (a retry) and session-renew: the keys the session holds or waits for; an acquire-all's kind-mismatch: the 1-based place in Keys of the key of another kind; otherwise the queue length after the command
	// Kind and Limit, kind-mismatch only: what the key is (Limit for a
	// semaphore). Other answers leave them zero.
	Kind  Kind
	Limit int
}

// EventKind names something that happened to an owner other than through its own command's Result.
type EventKind uint8

const (
	EventGranted     EventKind = 1 // a queued Owner was handed Key (hand-off on release, expiry or cancel)
	EventWaitExpired EventKind = 2 // a queued Owner reached its wait deadline and was dropped
	EventExpired     EventKind = 3 // Owner's lease on Key ran out
	// EventUnclaimed: a queued Owner was dropped because nobody claimed it
	// again since the last new-term (skipped at a hand-off, or by a
	// drop-unclaimed); At is the machine's now.
	EventUnclaimed EventKind = 4
	// EventSessionExpired: session Owner reached its deadline (ExpiresAt)
	// and ended; its locks are released (EventExpired each, then a
	// hand-off or a lock-delay) and its waiters dropped (EventWaitExpired).
	EventSessionExpired EventKind = 5
)

func (k EventKind) String() string {
	switch k {
	case EventGranted:
		return "granted"
	case EventWaitExpired:
		return "wait-expired"
	case EventExpired:
		return "expired"
	case EventUnclaimed:
		return "unclaimed"
	case EventSessionExpired:
		return "session-expired"
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is reported through the observer given to New, in apply order, during Apply.
type Event struct {
	Kind      EventKind
	Key       string
	Owner     Owner
	Token     uint64        // granted/expired: the lease's token
	ExpiresAt time.Duration // granted: when the new lease ends; expired: when the lease ended
	At        time.Duration // log time at which it happened
}

// KeyState is what a read sees of one key at a given log time.
type KeyState struct {
	Held      bool
	Owner     Owner // never expose beyond the node: whoever knows it can release the lock
	Token     uint64
	ExpiresAt time.Duration
	Waiters   int
	// Session: the holder's lock ends with this session (ExpiresAt is the
	// session's end); zero for a lease. Like Owner, never expose it.
	Session Owner
	Meta    string // the holder's metadata
	// Delayed: nobody holds the key, but its session expired with a
	// lock-delay that runs until ExpiresAt; Held is true (the key cannot
	// be taken) and Owner is zero.
	Delayed bool
	// Reserved: nobody holds the key, but the head of its queue is a
	// multi-key waiter still waiting for another of its keys; the key is
	// kept for it (Held is false, but an acquire cannot take it).
	Reserved bool
	// SetKeys: the holder holds the key as one of a multi-key grant of
	// this many keys (all with the same token and lease); 0 otherwise.
	SetKeys int

	// Kind and Limit: what the key is (Limit: a semaphore's N). For a
	// semaphore or read/write key, Holders counts its holders (lock-delay
	// slots included), Shared says a read/write key is held by readers,
	// Token and ExpiresAt are the newest grant's token and the latest end
	// of any hold, and Owner, Session and Meta are zero. A mutex's
	// Holders is 0 (its one holder is Owner).
	Kind    Kind
	Limit   int
	Holders int
	Shared  bool
	// Holds lists a semaphore's or read/write key's live holds in grant
	// (token) order, lock-delay slots included; nil for a mutex, so that
	// a mutex read allocates nothing. At most MaxHolders entries. A Hold
	// carries no owner: whoever knows it can release the hold.
	Holds []Hold
}

// Hold is one hold of a semaphore or read/write key as a read sees it.
type Hold struct {
	Token     uint64
	ExpiresAt time.Duration // its lease's, lock-delay's or session's end
	Meta      string        // the holder's metadata
	Shared    bool          // a read/write key's reader
	Delayed   bool          // a lock-delay slot: nobody's until ExpiresAt
}
