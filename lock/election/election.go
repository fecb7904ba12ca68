package election

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// Errors of this package; match them with errors.Is.
var (
	// ErrNoLeader: nobody holds the election's key now.
	ErrNoLeader = errors.New("election: no leader")
	// ErrResigned is the cause of a Leadership's context after Resign.
	ErrResigned = errors.New("election: resigned")
	// ErrInvalid: a nil client, an empty name, a TTL out of range, or a name
	// and value too long for a key.
	ErrInvalid = errors.New("election: invalid argument")
)

// DefaultTTL is the leader's lease unless the TTL option says otherwise: how
// long a crashed leader keeps the name.
const DefaultTTL = 15 * time.Second

// Election is one name replicas campaign for. It holds only its settings, so
// it is safe for concurrent use, and any number of Campaign calls may run at
// once (in one process or many): they queue for the name.
type Election struct {
	client *lock.Client
	name   string
	ttl    time.Duration
}

// Option configures an Election.
type Option func(*Election)

// TTL sets the leader's lease (DefaultTTL when not given): lock.MinTTL to
// lock.MaxTTL. It is kept alive while leading, and is how long a crashed
// leader keeps the name.
func TTL(d time.Duration) Option {
	return func(e *Election) { e.ttl = d }
}

// New returns the election called name, kept in c's store. It touches
// nothing; invalid arguments are reported by Campaign and Leader.
func New(c *lock.Client, name string, opts ...Option) *Election {
	e := &Election{client: c, name: name, ttl: DefaultTTL}
	for _, opt := range opts {
		if opt != nil {
			opt(e)
		}
	}
	return e
}

// Name is the election's name.
func (e *Election) Name() string { return e.name }

// Key is the lock the leader holds: "election:" followed by the name.
func (e *Election) Key() string { return "election:" + e.name }

// Leader is what anyone may observe of the current leadership.
type Leader struct {
	Term      uint64        // the leader's fencing token: higher for every new leader
	Remaining time.Duration // the leader's lease left when we looked (it is kept alive)
	Value     string        // what the leader published with Campaign; "" if none, or not known
}

// Leader reports who leads now, without campaigning: ErrNoLeader when nobody
// does. The value is the election key's metadata (Campaign sets it); for a
// leader that did not set it (an older version), it is read in a second
// call to the store, and is "" if the leader published none, if its term
// ended meanwhile, or if the store cannot list keys. To follow the
// leadership as it changes, use Observe rather than calling Leader in a
// loop.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.validate(""); err != nil {
		return Leader{}, err
	}
	info, err := e.client.Inspect(ctx, e.Key())
	if err != nil {
		return Leader{}, fmt.Errorf("election: observing %q: %w", e.name, err)
	}
	if !info.Locked || info.Delayed {
		return Leader{}, fmt.Errorf("%w for %q", ErrNoLeader, e.name)
	}
	ld := Leader{Term: info.Token, Remaining: info.Remaining, Value: info.Metadata}
	if ld.Value == "" {
		if ld.Value, err = e.publishedValue(ctx, ld.Term); err != nil {
			return Leader{}, err
		}
	}
	return ld, nil
}

// publishedValue reads the value the leader of term published as a key
// (see "The leader's value" in the package documentation): "" when there is
// none or the store cannot list keys.
func (e *Election) publishedValue(ctx context.Context, term uint64) (string, error) {
	prefix := valuePrefix(e.name, term)
	held, err := e.client.List(ctx, lock.ListRequest{Prefix: prefix, Limit: 1})
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return "", nil // the store cannot list keys: the value cannot be known
	case err != nil:
		return "", fmt.Errorf("election: reading the value of %q's leader: %w", e.name, err)
	case len(held) > 0:
		return strings.TrimPrefix(held[0].Key, prefix), nil
	}
	return "", nil
}

// validate checks the election, and the key value would be published under.
func (e *Election) validate(value string) error {
	switch {
	case e.client == nil:
		return fmt.Errorf("%w: nil client", ErrInvalid)
	case e.name == "":
		return fmt.Errorf("%w: empty name", ErrInvalid)
	case e.ttl < lock.MinTTL || e.ttl > lock.MaxTTL:
		return fmt.Errorf("%w: %w: TTL must be in %v..%v (got %v)", ErrInvalid, lock.ErrInvalidTTL, lock.MinTTL, lock.MaxTTL, e.ttl)
	}
	if err := lock.ValidateKey(e.Key()); err != nil {
		return fmt.Errorf("%w: name of %d bytes: %w", ErrInvalid, len(e.name), err)
	}
	if value != "" {
		if err := lock.ValidateKey(valueKey(e.name, math.MaxUint64, value)); err != nil {
			return fmt.Errorf("%w: name and value (%d bytes together) too long for a key: %w", ErrInvalid, len(e.name)+len(value), err)
		}
	}
	return nil
}

// valuePrefix starts the key under which the leader of term publishes its
// value. The term comes first: tokens are unique across all keys, so only
// that term's leader can hold a key under it, whatever the names contain.
func valuePrefix(name string, term uint64) string {
	return "election-leader:" + strconv.FormatUint(term, 10) + ":" + name + ":"
}

func valueKey(name string, term uint64, value string) string {
	return valuePrefix(name, term) + value
}
