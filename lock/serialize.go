package lock

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// serializedVersion starts every string Serialize writes. A change to the
// format gets a new version, and Restore keeps reading the old ones:
// version 2 adds the kind of a semaphore or read/write handle, version 3
// the key set of a multi-key (LockAll) handle, and a mutex's handle is
// still written in version 1.
const (
	serializedVersion   = "v1"
	serializedVersionV2 = "v2"
	serializedVersionV3 = "v3"
)

// serializedSetKind is version 3's kind field: a multi-key handle, whose
// other keys follow.
const serializedSetKind = "k"

// Serialize freezes the handle (key, TTL, and, while it holds the lock, owner
// and fencing token) into a string that Client.Restore turns back into a handle
// in another process, which can then extend or release the same lease.
//
// The form is stable and URL-safe (letters, digits, '-', '_' and '.'):
//
//	v1.<key, base64url without padding>.<TTL in nanoseconds>.<owner, 32 hex digits>.<token>
//
// with the owner and token fields empty when the handle holds no lease. A
// semaphore's or read/write lock's handle is written in version 2, which
// adds its kind:
//
//	v2.<key>.<TTL>.<owner>.<token>.<kind: s<n> for a semaphore of n, r for a reader, w for a writer>
//
// and is restored as a handle of the same kind. A multi-key (LockAll)
// handle is written in version 3, which adds its set's other keys after
// kind k (key is the set's first key in byte order):
//
//	v3.<key>.<TTL>.<owner>.<token>.k[.<second key, base64url>[.<third key>...]]
//
// and is restored as a handle of the same set (Keys). A multi-key handle
// serialized by an older version (version 1, its first key only) is still
// restored, as a handle of that key alone: it extends and releases the
// whole set, but Keys is nil. The
// owner is the lease's secret: whoever has the string can release the lock,
// so send it only where you would send the lock itself. The local deadline
// is not included (another host's clock cannot use it); see Remaining.
func (l *Lock) Serialize() string {
	l.mu.Lock()
	ttl, g := l.ttl, l.held
	l.mu.Unlock()
	var owner, token string
	if g != nil {
		owner, token = g.owner.String(), strconv.FormatUint(g.token, 10)
	}
	fields := []string{
		serializedVersion,
		base64.RawURLEncoding.EncodeToString([]byte(l.key)),
		strconv.FormatInt(int64(ttl), 10),
		owner,
		token,
	}
	switch {
	case l.kind == KindSemaphore:
		fields[0] = serializedVersionV2
		fields = append(fields, "s"+strconv.Itoa(l.limit))
	case l.kind == KindRWLock && l.shared:
		fields[0] = serializedVersionV2
		fields = append(fields, "r")
	case l.kind == KindRWLock:
		fields[0] = serializedVersionV2
		fields = append(fields, "w")
	case l.keys != nil:
		fields[0] = serializedVersionV3
		fields = append(fields, serializedSetKind)
		if len(l.keys) > 1 {
			for _, k := range l.keys[1:] {
				fields = append(fields, base64.RawURLEncoding.EncodeToString([]byte(k)))
			}
		}
	}
	return strings.Join(fields, ".")
}

// Restore rebuilds a handle from what Lock.Serialize wrote. If the original
// held the lock, so does the restored handle, as far as it knows: it can
// Extend, Release, check IsExpired and report Token at once, while Remaining
// reports false until its first successful Extend. The original and the
// restored handle share the lease: whichever releases first ends it for both.
//
// Input Serialize could not have written gives an error matching
// ErrBadSerialized (and ErrInvalidKey, ErrInvalidTTL or ErrInvalidOwner when a
// field is out of range).
func (c *Client) Restore(s string) (*Lock, error) {
	parts := strings.Split(s, ".")
	want := 5
	switch parts[0] {
	case serializedVersion:
	case serializedVersionV2:
		want = 6
	case serializedVersionV3:
		if len(parts) < 6 || len(parts) > 5+MaxKeys {
			return nil, fmt.Errorf("%w: want 6 to %d dot-separated fields, got %d", ErrBadSerialized, 5+MaxKeys, len(parts))
		}
		want = len(parts)
	default:
		return nil, fmt.Errorf("%w: want a string starting with %q, %q or %q", ErrBadSerialized, serializedVersion+".", serializedVersionV2+".", serializedVersionV3+".")
	}
	if len(parts) != want {
		return nil, fmt.Errorf("%w: want %d dot-separated fields, got %d", ErrBadSerialized, want, len(parts))
	}
	key, err := base64.RawURLEncoding.Strict().DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("%w: key: %w", ErrBadSerialized, err)
	}
	if err := ValidateKey(string(key)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSerialized, err)
	}
	ttlNanos, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || !canonicalInt(parts[2]) {
		return nil, fmt.Errorf("%w: ttl %q is not a decimal count of nanoseconds", ErrBadSerialized, parts[2])
	}
	ttl := time.Duration(ttlNanos)
	if err := validateTTL(ttl); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSerialized, err)
	}
	l := c.Lock(string(key), TTL(ttl))
	switch parts[0] {
	case serializedVersionV2:
		if err := l.restoreKind(parts[5]); err != nil {
			return nil, err
		}
	case serializedVersionV3:
		if err := l.restoreKeys(string(key), parts[5:]); err != nil {
			return nil, err
		}
	}
	switch {
	case parts[3] == "" && parts[4] == "":
		return l, nil // the original held no lease
	case parts[3] == "" || parts[4] == "":
		return nil, fmt.Errorf("%w: owner and token go together", ErrBadSerialized)
	}
	owner, err := ParseOwner(parts[3])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSerialized, err)
	}
	token, err := strconv.ParseUint(parts[4], 10, 64)
	if err != nil || token == 0 || !canonicalInt(parts[4]) {
		return nil, fmt.Errorf("%w: token %q is not a positive decimal number", ErrBadSerialized, parts[4])
	}
	l.held = &grant{owner: owner, token: token, acquiredAt: time.Now()}
	l.token = token
	return l, nil
}

// restoreKind sets the kind a version 2 string names.
func (l *Lock) restoreKind(field string) error {
	switch {
	case field == "r":
		l.kind, l.shared = KindRWLock, true
	case field == "w":
		l.kind = KindRWLock
	case strings.HasPrefix(field, "s") && canonicalInt(field[1:]):
		n, err := strconv.Atoi(field[1:])
		if err != nil || n < 1 || n > MaxHolders {
			return fmt.Errorf("%w: %w: limit must be between 1 and %d (got %s)", ErrBadSerialized, ErrInvalidLimit, MaxHolders, field[1:])
		}
		l.kind, l.limit = KindSemaphore, n
	default:
		return fmt.Errorf("%w: kind %q is none of s<n>, r, w", ErrBadSerialized, field)
	}
	return nil
}

// restoreKeys sets the key set a version 3 string names: fields is its
// kind field (k) and the set's other keys, which must follow first in
// ascending byte order, as Serialize writes them.
func (l *Lock) restoreKeys(first string, fields []string) error {
	if fields[0] != serializedSetKind {
		return fmt.Errorf("%w: version 3 kind %q is not %q", ErrBadSerialized, fields[0], serializedSetKind)
	}
	keys := make([]string, 1, len(fields))
	keys[0] = first
	for i, f := range fields[1:] {
		k, err := base64.RawURLEncoding.Strict().DecodeString(f)
		if err != nil {
			return fmt.Errorf("%w: set key %d: %w", ErrBadSerialized, i+2, err)
		}
		if err := ValidateKey(string(k)); err != nil {
			return fmt.Errorf("%w: set key %d: %w", ErrBadSerialized, i+2, err)
		}
		if string(k) <= keys[len(keys)-1] {
			return fmt.Errorf("%w: set key %d: the keys must be distinct and in ascending byte order", ErrBadSerialized, i+2)
		}
		keys = append(keys, string(k))
	}
	l.keys = keys
	return nil
}

// canonicalInt reports whether s is a decimal number as strconv writes it (no
// sign, no leading zeros): Restore accepts only what Serialize writes.
func canonicalInt(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
