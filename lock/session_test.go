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
)

// leaseOnly is a store without sessions.
type leaseOnly struct{ lock.Store }

func TestNewSessionNeedsASessionStore(t *testing.T) {
	st := lock.NewMemoryStore()
	t.Cleanup(func() { st.Close() })
	_, err := lock.New(leaseOnly{st}).NewSession(context.Background())
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

func TestNewSessionBadOptions(t *testing.T) {
	st := lock.NewMemoryStore()
	t.Cleanup(func() { st.Close() })
	c := lock.New(st)
	for _, opt := range []lock.SessionOption{lock.SessionTTL(0), lock.SessionTTL(lock.MaxTTL + 1), lock.LockDelay(-1), lock.LockDelay(lock.MaxLockDelay + 1)} {
		_, err := c.NewSession(context.Background(), opt)
		assert.ErrorIs(t, err, lock.ErrInvalidSession, "%#v", opt)
	}
	_, err := c.WithSession(nil).Lock("k", lock.Metadata(string(make([]byte, lock.MaxMetadataLen+1)))).TryAcquire(context.Background())
	assert.ErrorIs(t, err, lock.ErrInvalidMetadata)
}

// failingRenewals is a memory store whose renewals cannot reach it, and
// which counts destroys.
type failingRenewals struct {
	*lock.MemoryStore
	destroys atomic.Int32
}

func (f *failingRenewals) RenewSession(context.Context, lock.SessionID) (lock.SessionLease, error) {
	return lock.SessionLease{}, lock.ErrUnavailable
}

func (f *failingRenewals) DestroySession(ctx context.Context, id lock.SessionID) (bool, error) {
	f.destroys.Add(1)
	return f.MemoryStore.DestroySession(ctx, id)
}

// A keep-alive that cannot renew gives up at the session's local deadline
// (Done, Err says why), and Close still destroys the session, which may be
// live in the store with its locks.
func TestSessionKeepAliveGivesUpAtItsDeadline(t *testing.T) {
	st := &failingRenewals{MemoryStore: lock.NewMemoryStore()}
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
