package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// A node that crashes with locks bound to its session frees them within
// the session TTL: the leader's expiry timer ends the session and hands
// each key to its next waiter. Measured from the crash to the waiter's
// grant, for a crashed follower and a crashed leader (whose successor's
// log clock goes on from where the old one's committed stamps left it).
func TestCrashedNodeSessionLocksGoToTheNextWaiter(t *testing.T) {
	const ttl = 2 * time.Second
	for _, crashLeader := range []bool{false, true} {
		name := "follower"
		if crashLeader {
			name = "leader"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3, nil)
			ctx := testCtx(t)
			crashed := c.follower()
			if crashLeader {
				crashed = c.leader()
			}
			var waiter *Node
			for _, n := range c.nodes {
				if n != crashed {
					waiter = n
				}
			}
			sess, err := lock.New(crashed).NewSession(ctx, lock.SessionTTL(ttl))
			require.NoError(t, err)
			keys := []string{"jobs/1", "jobs/2"}
			for _, k := range keys {
				require.NoError(t, lock.New(crashed).WithSession(sess).Lock(k).Acquire(ctx))
			}
			type grant struct {
				at  time.Time
				err error
			}
			grants := make(chan grant, len(keys))
			for _, k := range keys {
				go func() {
					_, err := waiter.Acquire(ctx, lock.AcquireRequest{Key: k, Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
					grants <- grant{time.Now(), err}
				}()
			}
			for _, k := range keys {
				require.Eventually(t, func() bool {
					info, err := waiter.Inspect(ctx, k)
					return err == nil && info.Waiters == 1
				}, 10*time.Second, time.Millisecond)
			}

			crashedAt := time.Now()
			c.stop(c.index(crashed)) // its keep-alive can no longer renew
			for range keys {
				select {
				case g := <-grants:
					require.NoError(t, g.err)
					took := g.at.Sub(crashedAt)
					t.Logf("session TTL %v: a key of the crashed %s went to its waiter %v after the crash", ttl, name, took.Round(time.Millisecond))
					// The session was renewed at most a TTL before the
					// crash; a leader change adds an election.
					assert.LessOrEqual(t, took, ttl+5*time.Second)
				case <-time.After(30 * time.Second):
					t.Fatal("the waiter was never granted the crashed node's lock")
				}
			}
			<-sess.Done()
			assert.ErrorIs(t, sess.Err(), lock.ErrNoSession)
		})
	}
}

// Concurrent renewals of many sessions share raft entries: the proposer
// puts what is queued into one entry, so some entry carries several. How
// many share an entry is BenchmarkSessionRenewals' entries/op.
func TestSessionRenewalsShareEntries(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	l := c.leader()
	const sessions = 200
	ids := make([]lock.SessionID, sessions)
	for i := range ids {
		ids[i] = lock.NewSessionID()
		_, err := l.CreateSession(ctx, lock.SessionRequest{ID: ids[i], TTL: time.Minute})
		require.NoError(t, err)
	}
	before := l.raft.LastIndex()
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	start := make(chan struct{})
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := l.RenewSession(ctx, id)
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	entries := l.raft.LastIndex() - before
	t.Logf("%d concurrent renewals took %d raft entries", sessions, entries)
	assert.Less(t, entries, uint64(sessions), "renewals share entries: fewer entries than renewals")
	ok, err := l.DestroySession(context.Background(), ids[0])
	require.NoError(t, err)
	assert.True(t, ok)
}

// Sessions, their locks and their metadata are in snapshots and the log: a
// node restarted from a snapshot and the entries after it has them all,
// and the session still ends its locks.
func TestSessionsSurviveRestart(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.nodes[0]
	ctx := testCtx(t)
	id := lock.NewSessionID()
	_, err := n.CreateSession(ctx, lock.SessionRequest{ID: id, TTL: time.Hour, LockDelay: time.Second})
	require.NoError(t, err)
	lease, err := n.Acquire(ctx, lock.AcquireRequest{Key: "a", Owner: lock.NewOwner(), Session: id, Metadata: "in the snapshot"})
	require.NoError(t, err)
	require.NoError(t, n.raft.Snapshot().Error())
	_, err = n.Acquire(ctx, lock.AcquireRequest{Key: "b", Owner: lock.NewOwner(), Session: id, Metadata: "in the log"})
	require.NoError(t, err)

	c.stop(0)
	n = c.restart(0)
	c.waitLeader()
	si, err := n.InspectSession(ctx, id)
	require.NoError(t, err)
	assert.True(t, si.Live)
	assert.Equal(t, time.Hour, si.TTL)
	assert.Equal(t, time.Second, si.LockDelay)
	assert.Equal(t, 2, si.Keys)
	info, err := n.Inspect(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, lease.Token, info.Token)
	assert.Equal(t, "in the snapshot", info.Metadata)
	info, err = n.Inspect(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, "in the log", info.Metadata)

	ok, err := n.DestroySession(ctx, id)
	require.NoError(t, err)
	assert.True(t, ok)
	for _, k := range []string{"a", "b"} {
		info, err := n.Inspect(ctx, k)
		require.NoError(t, err)
		assert.False(t, info.Locked, k)
	}
}
