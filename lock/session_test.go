package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// leaseOnly is a store without sessions.
type leaseOnly struct{ lock.Store }

func TestNewSessionNeedsASessionStore(t *testing.T) {
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	_, err := lock.New(leaseOnly{st}).NewSession(context.Background())
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

func TestNewSessionBadOptions(t *testing.T) {
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	c := lock.New(st)
	for _, opt := range []lock.SessionOption{lock.SessionTTL(0), lock.SessionTTL(lock.MaxTTL + 1), lock.LockDelay(-1), lock.LockDelay(lock.MaxLockDelay + 1)} {
		_, err := c.NewSession(context.Background(), opt)
		assert.ErrorIs(t, err, lock.ErrInvalidSession, "%#v", opt)
	}
	_, err := c.WithSession(nil).Lock("k", lock.Metadata(string(make([]byte, lock.MaxMetadataLen+1)))).TryAcquire(context.Background())
	assert.ErrorIs(t, err, lock.ErrInvalidMetadata)
}

// shorterSessions is a memory store that holds every session it creates
// with a TTL of its own, shorter than the one asked, and says so in the
// lease (SessionLease.TTL), as a retried create reports the TTL of the
// session the first one made.
type shorterSessions struct {
	*memstore.Store
	ttl      time.Duration
	renewals atomic.Int32
}

func (s *shorterSessions) CreateSession(ctx context.Context, req lock.SessionRequest) (lock.SessionLease, error) {
	req.TTL = s.ttl
	return s.Store.CreateSession(ctx, req)
}

func (s *shorterSessions) RenewSession(ctx context.Context, id lock.SessionID) (lock.SessionLease, error) {
	s.renewals.Add(1)
	return s.Store.RenewSession(ctx, id)
}

// A session's keep-alive is paced by the TTL the store holds, not the one
// asked: paced by a longer one, it renews too late.
func TestSessionKeepsTheTTLTheStoreHolds(t *testing.T) {
	st := &shorterSessions{Store: memstore.New(), ttl: 300 * time.Millisecond}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	sess, err := lock.New(st).NewSession(ctx, lock.SessionTTL(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { sess.Close(ctx) })
	assert.Equal(t, 300*time.Millisecond, sess.TTL())
	// Several of the store's TTLs go by: the keep-alive renews within each.
	require.Eventually(t, func() bool { return st.renewals.Load() >= 5 }, 10*time.Second, time.Millisecond)
	select {
	case <-sess.Done():
		t.Fatalf("the session ended: %v", sess.Err())
	default:
	}
	info, err := st.InspectSession(ctx, sess.ID())
	require.NoError(t, err)
	assert.Equal(t, 300*time.Millisecond, info.TTL)
}

// failingRenewals is a memory store whose renewals cannot reach it, and
// which counts destroys.
type failingRenewals struct {
	*memstore.Store
	destroys atomic.Int32
}

func (f *failingRenewals) RenewSession(context.Context, lock.SessionID) (lock.SessionLease, error) {
	return lock.SessionLease{}, lock.ErrUnavailable
}

func (f *failingRenewals) DestroySession(ctx context.Context, id lock.SessionID) (bool, error) {
	f.destroys.Add(1)
	return f.Store.DestroySession(ctx, id)
}

// A keep-alive that cannot renew gives up at the session's local deadline
// (Done, Err says why), and Close still destroys the session, which may be
// live in the store with its locks.
func TestSessionKeepAliveGivesUpAtItsDeadline(t *testing.T) {
	st := &failingRenewals{Store: memstore.New()}
	t.Cleanup(func() { st.Close() })
	c := lock.New(st)
	ctx := context.Background()
	sess, err := c.NewSession(ctx, lock.SessionTTL(100*time.Millisecond))
	require.NoError(t, err)
	select {
	case <-sess.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session was not given up")
	}
	assert.ErrorIs(t, sess.Err(), lock.ErrNoSession)
	assert.Contains(t, sess.Err().Error(), "may have expired")
	_, ok := sess.Remaining()
	assert.False(t, ok)
	require.NoError(t, sess.Close(ctx))
	assert.Equal(t, int32(1), st.destroys.Load(), "Close destroys")
	require.NoError(t, sess.Close(ctx))
	assert.Equal(t, int32(1), st.destroys.Load(), "once")
}

// keyCounting is a memory store that counts Inspects and renewals, and
// can hide the renewal's count of keys as a store that does not report it.
type keyCounting struct {
	*memstore.Store
	hideKeys  bool
	inspects  atomic.Int32
	renewals  atomic.Int32
	lastCount atomic.Int32
}

func (k *keyCounting) Inspect(ctx context.Context, key string) (lock.KeyInfo, error) {
	k.inspects.Add(1)
	return k.Store.Inspect(ctx, key)
}

func (k *keyCounting) RenewSession(ctx context.Context, id lock.SessionID) (lock.SessionLease, error) {
	lease, err := k.Store.RenewSession(ctx, id)
	k.lastCount.Store(int32(lease.Keys))
	if k.hideKeys {
		lease.Keys = 0
	}
	k.renewals.Add(1)
	return lease, err
}

// A session's keep-alive learns that a hold is gone (force-released) from
// its renewals: when the renewal counts as many keys as its holds, it reads
// nothing more; a store that does not count them has each hold's key read
// instead. Either way the lost hold ends and the other stays.
func TestSessionFindsALostHold(t *testing.T) {
	for _, hideKeys := range []bool{false, true} {
		t.Run(map[bool]string{false: "counted", true: "uncounted"}[hideKeys], func(t *testing.T) {
			st := &keyCounting{Store: memstore.New(), hideKeys: hideKeys}
			t.Cleanup(func() { st.Close() })
			c := lock.New(st)
			ctx := context.Background()
			sess, err := c.NewSession(ctx, lock.SessionTTL(150*time.Millisecond))
			require.NoError(t, err)
			t.Cleanup(func() { _ = sess.Close(context.Background()) })
			sc := c.WithSession(sess)
			kept, lost := sc.Lock("kept"), sc.Lock("lost")
			require.NoError(t, kept.Acquire(ctx))
			require.NoError(t, lost.Acquire(ctx))

			settled := st.renewals.Load() + 3
			require.Eventually(t, func() bool { return st.renewals.Load() >= settled }, 10*time.Second, time.Millisecond)
			assert.EqualValues(t, 2, st.lastCount.Load(), "the store counts the session's keys")
			if !hideKeys {
				assert.Zero(t, st.inspects.Load(), "renewals that count every hold read no key")
			}

			_, err = c.ForceRelease(ctx, "lost")
			require.NoError(t, err)
			require.Eventually(t, func() bool { _, held := lost.Remaining(); return !held }, 10*time.Second, time.Millisecond, "the lost hold ends")
			_, held := kept.Remaining()
			assert.True(t, held, "the other hold stays")
			expired, err := kept.IsExpired(ctx)
			require.NoError(t, err)
			assert.False(t, expired)
			assert.NoError(t, sess.Err(), "the session lives on")
			ok, err := lost.Release(ctx)
			require.NoError(t, err)
			assert.False(t, ok, "nothing to release")
		})
	}
}
