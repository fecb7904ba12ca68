package lockfsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// Package lock states its limits and validates requests itself, so that it
// links nothing of the state machine; these tests keep the two from
// drifting apart: the same limits, the same kinds, and the same verdict on
// every request.

func TestLockLimitsAreTheMachines(t *testing.T) {
	assert.Equal(t, fsm.MaxKeyLen, lock.MaxKeyLen)
	assert.Equal(t, fsm.MinTTL, time.Duration(lock.MinTTL))
	assert.Equal(t, fsm.MaxTTL, time.Duration(lock.MaxTTL))
	assert.Equal(t, fsm.MaxWait, time.Duration(lock.MaxWait))
	assert.Equal(t, fsm.MaxWaiters, lock.MaxWaiters)
	assert.Equal(t, fsm.MaxHolders, lock.MaxHolders)
	assert.Equal(t, fsm.MaxKeys, lock.MaxKeys)
	assert.Equal(t, fsm.MaxLockDelay, time.Duration(lock.MaxLockDelay))
	assert.Equal(t, fsm.MaxMetaLen, lock.MaxMetadataLen)
}

func TestLockKindsAreTheMachines(t *testing.T) {
	assert.Equal(t, fsm.KindMutex, fsm.Kind(lock.KindMutex))
	assert.Equal(t, fsm.KindSemaphore, fsm.Kind(lock.KindSemaphore))
	assert.Equal(t, fsm.KindRW, fsm.Kind(lock.KindRWLock))
	for k := range 256 {
		assert.Equal(t, fsm.Kind(k).String(), lock.Kind(k).String(), "kind %d", k)
	}
}

// lockSentinel is the sentinel package lock reports for a request the
// machine refuses with err (c is the machine's command).
func lockSentinel(c fsm.Command, err error) error {
	switch {
	case errors.Is(err, fsm.ErrEmptyKey), errors.Is(err, fsm.ErrKeyTooLong), errors.Is(err, fsm.ErrKeyCount),
		errors.Is(err, fsm.ErrDuplicateKey), errors.Is(err, fsm.ErrKeysOrder):
		return lock.ErrInvalidKey
	case errors.Is(err, fsm.ErrZeroOwner):
		return lock.ErrInvalidOwner
	case c.Op == fsm.OpSessionCreate, errors.Is(err, fsm.ErrZeroSession):
		return lock.ErrInvalidSession
	case errors.Is(err, fsm.ErrTTLRange):
		return lock.ErrInvalidTTL
	case errors.Is(err, fsm.ErrWaitRange):
		return lock.ErrInvalidWait
	case errors.Is(err, fsm.ErrMetaTooLong):
		return lock.ErrInvalidMetadata
	case errors.Is(err, fsm.ErrLimitRange):
		return lock.ErrInvalidLimit
	case errors.Is(err, fsm.ErrUnknownKind):
		return lock.ErrInvalidKind
	case errors.Is(err, fsm.ErrKeysSession):
		return lock.ErrInvalidSession
	case errors.Is(err, fsm.ErrUnusedField) && c.Op == fsm.OpAcquire && (c.Shared && c.Kind != fsm.KindRW || c.Limit != 0 && c.Kind != fsm.KindSemaphore):
		return lock.ErrInvalidKind
	case errors.Is(err, fsm.ErrUnusedField) && c.Op == fsm.OpAcquire:
		return lock.ErrInvalidTTL // a lock bound to a session given a TTL
	case errors.Is(err, fsm.ErrUnusedField) && c.Op == fsm.OpAcquireAll:
		return lock.ErrInvalidKind
	}
	return err
}

// sameVerdict checks that lock's verdict got on the request the machine
// reads as c is the machine's: both accept, or both refuse for the same
// fault, and lock's message carries the machine's words when they name
// the same fault.
func sameVerdict(t *testing.T, c fsm.Command, got error) bool {
	t.Helper()
	want := c.Validate()
	if want == nil {
		return assert.NoError(t, got, "the machine accepts %+v", c)
	}
	if !assert.Error(t, got, "the machine refuses %+v: %v", c, want) {
		return false
	}
	ok := assert.ErrorIs(t, got, lockSentinel(c, want), "the machine refuses %+v: %v", c, want)
	for _, same := range []error{fsm.ErrEmptyKey, fsm.ErrKeyTooLong, fsm.ErrZeroOwner, fsm.ErrMetaTooLong} {
		if errors.Is(want, same) {
			ok = assert.Contains(t, got.Error(), same.Error(), "the machine refuses %+v", c) && ok
		}
	}
	if (errors.Is(want, fsm.ErrTTLRange) || errors.Is(want, fsm.ErrWaitRange)) && c.Op != fsm.OpSessionCreate {
		ok = assert.Contains(t, got.Error(), want.Error(), "the machine refuses %+v", c) && ok
	}
	return ok
}

var (
	someOwner  = lock.Owner{1}
	keyValues  = []string{"", "k", strings.Repeat("k", fsm.MaxKeyLen), strings.Repeat("k", fsm.MaxKeyLen+1)}
	ttlValues  = []time.Duration{-1, 0, fsm.MinTTL - 1, fsm.MinTTL, time.Second, fsm.MaxTTL, fsm.MaxTTL + 1}
	waitValues = []time.Duration{-1, 0, time.Second, fsm.MaxWait, fsm.MaxWait + 1}
	metaValues = []string{"", strings.Repeat("m", fsm.MaxMetaLen), strings.Repeat("m", fsm.MaxMetaLen+1)}
)

// Every combination of boundary values of every field of a single-key
// acquire gets the machine's verdict from AcquireRequest.Validate.
func TestAcquireValidationIsTheMachines(t *testing.T) {
	n := 0
	for _, key := range keyValues {
		for _, owner := range []lock.Owner{{}, someOwner} {
			for _, ttl := range ttlValues {
				for _, wait := range waitValues {
					for _, session := range []lock.SessionID{{}, {2}} {
						for _, meta := range metaValues {
							for kind := range lock.Kind(4) {
								for _, limit := range []int{-1, 0, 1, fsm.MaxHolders, fsm.MaxHolders + 1} {
									for _, shared := range []bool{false, true} {
										req := lock.AcquireRequest{Key: key, Owner: owner, TTL: ttl, Wait: wait, Session: session, Metadata: meta, Kind: kind, Limit: limit, Shared: shared}
										if !sameVerdict(t, Acquire(req), req.Validate()) {
											return
										}
										n++
									}
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d requests", n)
}

// The same for multi-key acquires: key sets of every fault, with the
// boundary values of the other fields.
func TestAcquireAllValidationIsTheMachines(t *testing.T) {
	many := func(n int) []string {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%03d", i)
		}
		return keys
	}
	sets := [][]string{{}, {"a"}, {"a", "b"}, {"b", "a"}, {"a", "a"}, {"", "a"}, {"a", strings.Repeat("k", fsm.MaxKeyLen+1)},
		{"a", "a", ""}, {"b", "a", "a"}, many(fsm.MaxKeys), many(fsm.MaxKeys + 1)}
	for _, keys := range sets {
		for _, owner := range []lock.Owner{{}, someOwner} {
			for _, ttl := range ttlValues {
				for _, wait := range waitValues {
					for _, session := range []lock.SessionID{{}, {2}} {
						for _, meta := range metaValues {
							for kind := range lock.Kind(3) {
								for _, limit := range []int{0, 1} {
									for _, shared := range []bool{false, true} {
										req := lock.AcquireRequest{Keys: keys, Owner: owner, TTL: ttl, Wait: wait, Session: session, Metadata: meta, Kind: kind, Limit: limit, Shared: shared}
										if len(keys) > 0 {
											req.Key = keys[0]
										}
										if !sameVerdict(t, Acquire(req), req.Validate()) {
											return
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	// A Key other than the set's first is lock's own check (the machine's
	// command carries only the set).
	err := lock.AcquireRequest{Key: "b", Keys: []string{"a", "b"}, Owner: someOwner, TTL: time.Second}.Validate()
	assert.ErrorIs(t, err, lock.ErrInvalidKey)
}

func TestReleaseAndExtendValidationIsTheMachines(t *testing.T) {
	for _, key := range keyValues {
		for _, owner := range []lock.Owner{{}, someOwner} {
			sameVerdict(t, Release(key, owner), lock.ValidateRelease(key, owner))
			for _, ttl := range ttlValues {
				sameVerdict(t, Extend(key, owner, ttl), lock.ValidateExtend(key, owner, ttl))
			}
		}
		sameVerdict(t, fsm.Command{Op: fsm.OpForceRelease, Key: key}, lock.ValidateKey(key))
	}
}

func TestSessionValidationIsTheMachines(t *testing.T) {
	for _, id := range []lock.SessionID{{}, {3}} {
		for _, ttl := range ttlValues {
			for _, delay := range []time.Duration{-1, 0, time.Second, fsm.MaxLockDelay, fsm.MaxLockDelay + 1} {
				req := lock.SessionRequest{ID: id, TTL: ttl, LockDelay: delay}
				sameVerdict(t, CreateSession(req), req.Validate())
			}
		}
		sameVerdict(t, fsm.Command{Op: fsm.OpSessionRenew, Session: fsm.Owner(id)}, lock.ValidateSessionID(id))
	}
}

// FuzzAcquireValidation looks past the boundary values for a request the
// two verdicts differ on.
func FuzzAcquireValidation(f *testing.F) {
	f.Add("k", true, int64(time.Second), int64(0), false, uint16(0), uint8(0), 0, false, uint8(0))
	f.Add("", false, int64(-1), int64(-1), true, uint16(2000), uint8(1), 70000, true, uint8(3))
	f.Add("a", true, int64(time.Second), int64(time.Second), false, uint16(10), uint8(2), 0, true, uint8(2))
	f.Fuzz(func(t *testing.T, key string, owned bool, ttl, wait int64, session bool, metaLen uint16, kind uint8, limit int, shared bool, setKeys uint8) {
		req := lock.AcquireRequest{Key: key, TTL: time.Duration(ttl), Wait: time.Duration(wait), Metadata: strings.Repeat("m", int(metaLen)%(2*fsm.MaxMetaLen)),
			Kind: lock.Kind(kind), Limit: limit, Shared: shared}
		if owned {
			req.Owner = someOwner
		}
		if session {
			req.Session = lock.SessionID{2}
		}
		if setKeys > 0 {
			// A set made of key and its neighbours: in order, out of
			// order or repeated, depending on setKeys.
			req.Keys = []string{key}
			for i := 1; i < int(setKeys%(fsm.MaxKeys+3)); i++ {
				req.Keys = append(req.Keys, key+strings.Repeat("x", i*int(setKeys%3)))
			}
		}
		require.True(t, sameVerdict(t, Acquire(req), req.Validate()))
	})
}
