package lockfsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// A session create answers the session the machine holds: its TTL when
// the store can read that very session, else what is left of it, never
// the TTL the request asked, which a retry may ask differently.
func TestSessionCreatedReportsTheSessionHeld(t *testing.T) {
	m := fsm.New(nil)
	id := lock.NewSessionID()
	create := CreateSession(lock.SessionRequest{ID: id, TTL: time.Minute})
	create.Stamp = time.Second
	res := m.Apply(create)
	held := m.Session(create.Session, 0)
	created := func(res fsm.Result, held fsm.SessionState) lock.SessionLease {
		lease, err := SessionCreated(res, held)
		require.NoError(t, err)
		return lease
	}
	assert.Equal(t, lock.SessionLease{Remaining: time.Minute, TTL: time.Minute}, created(res, held), "a new session")
	assert.Equal(t, lock.SessionLease{Remaining: time.Minute, TTL: time.Minute}, created(res, fsm.SessionState{}), "a new session, not read: the TTL asked is what is left")

	retry := CreateSession(lock.SessionRequest{ID: id, TTL: 10 * time.Minute})
	retry.Stamp = 21 * time.Second
	res = m.Apply(retry)
	held = m.Session(retry.Session, 0)
	assert.Equal(t, lock.SessionLease{Remaining: 40 * time.Second, TTL: time.Minute}, created(res, held), "a retry asking more: the session's TTL")
	assert.Equal(t, lock.SessionLease{Remaining: 40 * time.Second, TTL: 40 * time.Second}, created(res, fsm.SessionState{}), "not read: what is left")
	stale := held
	stale.ExpiresAt -= time.Second // a copy from before a renew, or of another session
	stale.TTL = 10 * time.Minute
	assert.Equal(t, 40*time.Second, created(res, stale).TTL, "a copy with another deadline is not the session answered")
}

// Ended tells a release's or a destroy's "nothing to end" from a grant
// that ended, and errs on an answer neither gives.
func TestEnded(t *testing.T) {
	for _, tc := range []struct {
		op     fsm.Op
		status fsm.Status
		ended  bool
		err    bool
	}{
		{fsm.OpRelease, fsm.StatusReleased, true, false},
		{fsm.OpRelease, fsm.StatusNotHeld, false, false},
		{fsm.OpRelease, fsm.StatusNoSession, false, true},
		{fsm.OpSessionDestroy, fsm.StatusReleased, true, false},
		{fsm.OpSessionDestroy, fsm.StatusNoSession, false, false},
		{fsm.OpSessionDestroy, fsm.StatusNotHeld, false, true},
	} {
		ended, err := Ended(tc.op, fsm.Result{Status: tc.status})
		assert.Equal(t, tc.ended, ended, "%v answered %v", tc.op, tc.status)
		assert.Equal(t, tc.err, err != nil, "%v answered %v: %v", tc.op, tc.status, err)
	}
	assert.ErrorIs(t, SessionError(fsm.OpSessionRenew, fsm.Result{Status: fsm.StatusNoSession}), lock.ErrNoSession)
}
