package fsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestQueueListsWaitersInOrderWithoutOwners(t *testing.T) {
	m := New(nil)
	assert.Nil(t, m.Queue("k"), "no key, no queue")
	m.Apply(acquire(0, "k", numberedOwner(1), time.Minute, 0))
	assert.Nil(t, m.Queue("k"), "a holder without waiters")
	m.Apply(acquire(time.Second, "k", numberedOwner(2), 10*time.Second, time.Minute))
	m.Apply(acquire(2*time.Second, "k", numberedOwner(3), 20*time.Second, 30*time.Second))
	m.Apply(acquire(3*time.Second, "k", numberedOwner(4), 30*time.Second, time.Minute))
	assert.Equal(t, []WaiterState{
		{TTL: 10 * time.Second, Deadline: time.Second + time.Minute},
		{TTL: 20 * time.Second, Deadline: 2*time.Second + 30*time.Second},
		{TTL: 30 * time.Second, Deadline: 3*time.Second + time.Minute},
	}, m.Queue("k"))

	m.Apply(cancelWait(4*time.Second, "k", numberedOwner(3)))
	m.Apply(release(5*time.Second, "k", numberedOwner(1))) // owner 2 takes it
	assert.Equal(t, []WaiterState{{TTL: 30 * time.Second, Deadline: 3*time.Second + time.Minute}}, m.Queue("k"))
}
