package fsm

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGrowthOfEachCase(t *testing.T) {
	m := New(nil)
	require.Equal(t, StatusGranted, m.Apply(acquire(ms, "held", ownerA, time.Hour, 0)).Status)
	require.Equal(t, StatusQueued, m.Apply(acquire(ms, "held", ownerB, time.Hour, time.Hour)).Status)
	require.Equal(t, StatusGranted, m.Apply(createSession(ms, sessionS, time.Hour, 0)).Status)
	require.Equal(t, StatusGranted, m.Apply(acquireKind(ms, "sem", ownerA, time.Hour, 0, 2, false)).Status)
	require.Equal(t, StatusGranted, m.Apply(acquireAll(ms, ownerC, time.Hour, 0, "set1", "set2")).Status)

	for _, tc := range []struct {
		name string
		c    Command
		want Growth
	}{
		{"new key", acquire(ms, "new", ownerA, time.Hour, 0), Growth{Keys: 1}},
		{"new key, waiting", acquire(ms, "new", ownerA, time.Hour, time.Hour), Growth{Keys: 1}},
		{"held, no wait", acquire(ms, "held", ownerC, time.Hour, 0), Growth{}},
		{"held, waiting", acquire(ms, "held", ownerC, time.Hour, time.Hour), Growth{Waiters: 1}},
		{"holder's retry", acquire(ms, "held", ownerA, time.Hour, time.Hour), Growth{}},
		{"waiter's retry", acquire(ms, "held", ownerB, time.Hour, time.Hour), Growth{}},
		{"another kind", acquireKind(ms, "held", ownerC, time.Hour, time.Hour, 2, false), Growth{}},
		{"no such session", acquireIn(ms, "new", ownerA, numberedOwner(7), 0, ""), Growth{}},
		{"semaphore with room", acquireKind(ms, "sem", ownerB, time.Hour, time.Hour, 2, false), Growth{Holds: 1}},
		{"semaphore with room, no wait", acquireKind(ms, "sem", ownerB, time.Hour, 0, 2, false), Growth{Holds: 1}},
		{"semaphore holder's retry", acquireKind(ms, "sem", ownerA, time.Hour, time.Hour, 2, false), Growth{}},
		{"new session", createSession(ms, numberedOwner(7), time.Hour, 0), Growth{Sessions: 1}},
		{"existing session", createSession(ms, sessionS, time.Hour, 0), Growth{}},
		{"all new keys", acquireAll(ms, ownerB, time.Hour, 0, "x", "y"), Growth{Keys: 2}},
		{"set on a held key, waiting", acquireAll(ms, numberedOwner(9), time.Hour, time.Hour, "held", "y"), Growth{Keys: 1, Waiters: 2}},
		{"set on a held key, no wait", acquireAll(ms, numberedOwner(9), time.Hour, 0, "held", "y"), Growth{}},
		{"set's retry", acquireAll(ms, ownerC, time.Hour, 0, "set1", "set2"), Growth{}},
		{"release", release(ms, "held", ownerA), Growth{}},
		{"extend", extend(ms, "held", ownerA, time.Hour), Growth{}},
		{"cancel wait", cancelWait(ms, "held", ownerB), Growth{}},
		{"force release", forceRelease(ms, "held"), Growth{}},
		{"renew session", renewSession(ms, sessionS), Growth{}},
		{"destroy session", destroySession(ms, sessionS), Growth{}},
		{"tick", tick(ms), Growth{}},
	} {
		assert.Equal(t, tc.want, m.Growth(tc.c), tc.name)
	}
}

// Growth bounds what a command applied at the machine's log time adds,
// whatever the state: the property the cluster's quotas rely on. (Applied
// later, a command may find an owner's hold ended, and be queued where it
// would have been answered held: Growth says "now".)
func TestGrowthBoundsWhatApplyAdds(t *testing.T) {
	sawExtraHolds := false
	for seed := range uint64(150) {
		rng := rand.New(rand.NewPCG(seed, 7))
		now := ms
		next := randomCommands(rng, &now, []int{6, 30}[seed%2])
		m := New(nil)
		for i := range 400 {
			c := next()
			switch rng.IntN(8) {
			case 0:
				c = createSession(now, numberedOwner(100+rng.IntN(3)), time.Duration(1+rng.IntN(40))*ms, 0)
			case 1:
				c = acquireIn(now, c.Key, numberedOwner(rng.IntN(5)), numberedOwner(100+rng.IntN(3)), time.Duration(rng.IntN(20))*ms, "")
				if c.Key == "" {
					c.Key = "k00"
				}
			case 2:
				keys := []string{"k00", "k01", "k02"}[rng.IntN(2):]
				c = acquireAll(now, numberedOwner(rng.IntN(5)), time.Duration(1+rng.IntN(40))*ms, time.Duration(rng.IntN(20))*ms, keys...)
			}
			if i%2 == 0 {
				m.Apply(tick(c.Stamp)) // time moves on between commands
			}
			c.Stamp = m.Now()
			g := m.Growth(c)
			bound := MaxGrowth(c)
			require.True(t, g.Keys <= bound.Keys && g.Holds <= bound.Holds && g.Waiters <= bound.Waiters && g.Sessions <= bound.Sessions,
				"MaxGrowth %+v bounds Growth %+v of %v", bound, g, c.Op)
			keys, waiters, sessions, holds := m.Len(), m.Waiters(), m.Sessions(), m.ExtraHolds()
			m.Apply(c)
			sawExtraHolds = sawExtraHolds || m.ExtraHolds() > 0
			if !assert.Equal(t, extraHolds(m, m.keys.entries()), m.ExtraHolds(), "seed %d step %d: extra holds counted after %v", seed, i, c) ||
				!assert.LessOrEqual(t, m.Len()+m.ExtraHolds()-keys-holds, g.Keys+g.Holds, "seed %d step %d: locks after %v", seed, i, c) ||
				!assert.LessOrEqual(t, m.Len()-keys, g.Keys, "seed %d step %d: keys after %v", seed, i, c) ||
				!assert.LessOrEqual(t, m.Waiters()-waiters, g.Waiters, "seed %d step %d: waiters after %v", seed, i, c) ||
				!assert.LessOrEqual(t, m.Sessions()-sessions, g.Sessions, "seed %d step %d: sessions after %v", seed, i, c) {
				return
			}
		}
		restored := New(nil)
		require.NoError(t, restored.Restore(m.Snapshot()))
		assert.Equal(t, m.ExtraHolds(), restored.ExtraHolds(), "seed %d: a restore counts the extra holds", seed)
	}
	assert.True(t, sawExtraHolds, "the commands shared semaphore and read/write keys")
}

// extraHolds counts ExtraHolds over entries, from scratch.
func extraHolds(m *Machine, entries []*entry) int {
	n := 0
	for _, e := range entries {
		if g := m.group(e); g != nil {
			n += max(g.holders.len()-1, 0)
		}
	}
	return n
}
