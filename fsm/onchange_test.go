package fsm

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestOnChangeReportsEveryVisibleChange follows one key through the changes
// a watcher must hear of, and checks that what a reader cannot see (a read,
// a retry, a tick with nothing due) reports nothing.
func TestOnChangeReportsEveryVisibleChange(t *testing.T) {
	const k, other = "orders/42", "orders/43"
	m := New(nil)
	apply := changesHeard(m)

	assert.Equal(t, []string{k}, apply(acquire(0, k, ownerA, 10*ms, 0)), "a grant on a free key")
	assert.Empty(t, apply(acquire(1*ms, k, ownerA, 10*ms, 0)), "a retry by the holder changes nothing")
	assert.Empty(t, apply(acquire(1*ms, k, ownerB, 10*ms, 0)), "a refused try changes nothing")
	assert.Equal(t, []string{k}, apply(acquire(2*ms, k, ownerB, 10*ms, 50*ms)), "a waiter joins the queue")
	assert.Equal(t, []string{k}, apply(extend(3*ms, k, ownerA, 20*ms)), "the lease is extended")
	assert.Empty(t, apply(release(4*ms, other, ownerA)), "a release of a key nobody holds")
	assert.Empty(t, apply(release(5*ms, k, ownerB)), "a release by a waiter is refused")
	assert.Equal(t, []string{k}, apply(release(6*ms, k, ownerA)), "the release hands the key to the waiter")
	assert.Empty(t, apply(tick(7*ms)), "a tick with nothing due")
	assert.Equal(t, []string{k}, apply(acquire(8*ms, k, ownerC, 10*ms, 50*ms)), "another waiter")
	assert.Equal(t, []string{k}, apply(cancelWait(9*ms, k, ownerC)), "the waiter gives up")
	assert.Equal(t, []string{k}, apply(tick(time.Second)), "the lease runs out")
	assert.False(t, m.Lookup(k, 0).Held)

	assert.Empty(t, apply(createSession(2*time.Second, ownerD, time.Second, 0)), "a session holds no key yet")
	assert.Equal(t, []string{k}, apply(acquireIn(2*time.Second, k, ownerA, ownerD, 0, "")), "a grant under the session")
	assert.Empty(t, apply(Command{Op: OpSessionRenew, Stamp: 2*time.Second + ms, Session: ownerD}), "a renewal does not change the key")
	assert.Equal(t, []string{k}, apply(destroySession(2*time.Second+2*ms, ownerD)), "the session's end releases the key")
}

// A multi-key command reports every key of its set: the grant, the
// queueing on every key, an extend or release by one key, and a waiting
// set's leaving that hands its reserved keys on.
func TestOnChangeReportsEveryKeyOfASet(t *testing.T) {
	m := New(nil)
	apply := changesHeard(m)
	assert.Equal(t, []string{"a", "b"}, apply(acquireAll(0, ownerA, 10*ms, 0, "a", "b")), "the grant")
	assert.Empty(t, apply(acquireAll(ms, ownerA, 10*ms, 0, "a", "b")), "its retry")
	assert.Equal(t, []string{"b", "c"}, apply(acquireAll(ms, ownerB, 10*ms, time.Second, "b", "c")), "a set queues on b and reserves c")
	assert.Equal(t, []string{"a", "b"}, apply(extend(2*ms, "b", ownerA, 20*ms)), "an extend by one key")
	assert.Equal(t, []string{"a", "b", "c"}, apply(release(3*ms, "a", ownerA)), "a release by one key hands b on, and the waiting set gets b and c")
	assert.Empty(t, apply(acquireAll(3*ms, ownerC, 10*ms, 0, "b", "c")), "a refused set changes nothing")
	assert.Equal(t, []string{"b", "c"}, apply(tick(time.Second)), "the set's lease ends on both keys")
}

// changesHeard returns an apply of commands to m that answers the keys
// m's OnChange reported during it, sorted, each once (a key may be
// reported more than once).
func changesHeard(m *Machine) func(Command) []string {
	var heard []string
	m.OnChange(func(key string) { heard = append(heard, key) })
	return func(c Command) []string {
		heard = nil
		m.Apply(c)
		slices.Sort(heard)
		return slices.Compact(heard)
	}
}
