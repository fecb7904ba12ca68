package lock

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// serializedVersion starts every string Serialize writes. A change to the
// format gets a new version, and Restore keeps reading the old ones.
const serializedVersion = "v1"

// Serialize freezes the handle (key, TTL, and, while it holds the lock, owner
// and fencing token) into a string that Client.Restore turns back into a handle
// in another process, which can then extend or release the same lease.
//
// The form is stable and URL-safe (letters, digits, '-', '_' and '.'):
//
//	v1.<key, base64url without padding>.<TTL in nanoseconds>.<owner, 32 hex digits>.<token>
//
// with the owner and token fields empty when the handle holds no lease. The
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
	return strings.Join([]string{
		serializedVersion,
		base64.RawURLEncoding.EncodeToString([]byte(l.key)),
		strconv.FormatInt(int64(ttl), 10),
		owner,
		token,
	}, ".")
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
	if len(parts) == 0 || parts[0] != serializedVersion {
		return nil, fmt.Errorf("%w: want a string starting with %q", ErrBadSerialized, serializedVersion+".")
	}
	if len(parts) != 5 {
		return nil, fmt.Errorf("%w: want 5 dot-separated fields, got %d", ErrBadSerialized, len(parts))
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
	if err := ValidateTTL(ttl); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSerialized, err)
	}
	l := c.Lock(string(key), TTL(ttl))
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
