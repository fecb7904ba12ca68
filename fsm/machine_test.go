package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// step is one command of a scenario with the exact result and events it must
// give. A nil events slice means "no events".
type step struct {
	cmd    Command
	want   Result
	events []Event
}

func TestApplyScenarios(t *testing.T) {
	const k = "orders/42"
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "grant on a free key",
			steps: []step{
				{cmd: acquire(5*ms, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 15 * ms, Now: 5 * ms}},
			},
		},
		{
			name: "acquire by the live holder is idempotent and does not lengthen the lease",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(5*ms, k, ownerA, 100*ms, time.Second), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms, Now: 5 * ms}},
			},
		},
		{
			name: "held by another without wait",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(1*ms, k, ownerB, 10*ms, 0), want: Result{Status: StatusHeld, Token: 1, ExpiresAt: 10 * ms, Now: 1 * ms}},
				{cmd: release(2*ms, k, ownerA), want: Result{Status: StatusReleased, Token: 1, Now: 2 * ms}},
			},
		},
		{
			name: "waiters queue in order and a retry keeps its place",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(1*ms, k, ownerB, 10*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Now: 1 * ms, Waiters: 1}},
				{cmd: acquire(2*ms, k, ownerC, 10*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Now: 2 * ms, Waiters: 2}},
				{cmd: acquire(3*ms, k, ownerB, 10*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Now: 3 * ms, Waiters: 1}},
				{cmd: acquire(3*ms, k, ownerC, 10*ms, 0), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Now: 3 * ms, Waiters: 2}},
				{cmd: acquire(3*ms, k, ownerD, 10*ms, 0), want: Result{Status: StatusHeld, Token: 1, ExpiresAt: 10 * ms, Now: 3 * ms, Waiters: 2}},
			},
		},
		{
			name: "release hands off to the queue head in FIFO order within the same apply",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(0, k, ownerB, 20*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Waiters: 1}},
				{cmd: acquire(0, k, ownerC, 30*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Waiters: 2}},
				{
					cmd:    release(3*ms, k, ownerA),
					want:   Result{Status: StatusReleased, Token: 1, Now: 3 * ms, Waiters: 1},
					events: []Event{{Kind: EventGranted, Key: k, Owner: ownerB, Token: 2, ExpiresAt: 23 * ms, At: 3 * ms}},
				},
				{cmd: acquire(4*ms, k, ownerB, 20*ms, 0), want: Result{Status: StatusGranted, Token: 2, ExpiresAt: 23 * ms, Now: 4 * ms, Waiters: 1}},
				{
					cmd:    release(5*ms, k, ownerB),
					want:   Result{Status: StatusReleased, Token: 2, Now: 5 * ms},
					events: []Event{{Kind: EventGranted, Key: k, Owner: ownerC, Token: 3, ExpiresAt: 35 * ms, At: 5 * ms}},
				},
				{cmd: release(6*ms, k, ownerC), want: Result{Status: StatusReleased, Token: 3, Now: 6 * ms}},
			},
		},
		{
			name: "force-release ends any holder's lease and hands off to the queue head within the same apply",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(0, k, ownerB, 20*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Waiters: 1}},
				{cmd: acquire(0, k, ownerC, 30*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Waiters: 2}},
				{
					cmd:    forceRelease(3*ms, k),
					want:   Result{Status: StatusReleased, Token: 1, Now: 3 * ms, Waiters: 1},
					events: []Event{{Kind: EventGranted, Key: k, Owner: ownerB, Token: 2, ExpiresAt: 23 * ms, At: 3 * ms}},
				},
				// The former holder no longer holds: its release and extend are not held.
				{cmd: release(4*ms, k, ownerA), want: Result{Status: StatusNotHeld, Now: 4 * ms, Waiters: 1}},
				{cmd: extend(4*ms, k, ownerA, 10*ms), want: Result{Status: StatusNotHeld, Now: 4 * ms, Waiters: 1}},
				{cmd: acquire(4*ms, k, ownerB, 20*ms, 0), want: Result{Status: StatusGranted, Token: 2, ExpiresAt: 23 * ms, Now: 4 * ms, Waiters: 1}},
				{
					cmd:    forceRelease(5*ms, k),
					want:   Result{Status: StatusReleased, Token: 2, Now: 5 * ms},
					events: []Event{{Kind: EventGranted, Key: k, Owner: ownerC, Token: 3, ExpiresAt: 35 * ms, At: 5 * ms}},
				},
				{cmd: forceRelease(6*ms, k), want: Result{Status: StatusReleased, Token: 3, Now: 6 * ms}},
				// Free now: a second force-release says so and changes nothing.
				{cmd: forceRelease(7*ms, k), want: Result{Status: StatusNotHeld, Now: 7 * ms}},
				{cmd: acquire(8*ms, k, ownerD, 10*ms, 0), want: Result{Status: StatusGranted, Token: 4, ExpiresAt: 18 * ms, Now: 8 * ms}},
			},
		},
		{
			name: "force-release of a lease that has already ended is not held",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{
					cmd:    forceRelease(10*ms, k),
					want:   Result{Status: StatusNotHeld, Now: 10 * ms},
					events: []Event{{Kind: EventExpired, Key: k, Owner: ownerA, Token: 1, ExpiresAt: 10 * ms, At: 10 * ms}},
				},
				{cmd: forceRelease(11*ms, "never-held"), want: Result{Status: StatusNotHeld, Now: 11 * ms}},
			},
		},
		{
			name: "an expired holder's release is not held and leaves the new holder alone",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(9*ms, k, ownerB, 10*ms, 0), want: Result{Status: StatusHeld, Token: 1, ExpiresAt: 10 * ms, Now: 9 * ms}},
				{
					cmd:    acquire(10*ms, k, ownerB, 10*ms, 0),
					want:   Result{Status: StatusGranted, Token: 2, ExpiresAt: 20 * ms, Now: 10 * ms},
					events: []Event{{Kind: EventExpired, Key: k, Owner: ownerA, Token: 1, ExpiresAt: 10 * ms, At: 10 * ms}},
				},
				{cmd: release(11*ms, k, ownerA), want: Result{Status: StatusNotHeld, Now: 11 * ms}},
				{cmd: extend(11*ms, k, ownerA, 10*ms), want: Result{Status: StatusNotHeld, Now: 11 * ms}},
				{cmd: cancelWait(11*ms, k, ownerA), want: Result{Status: StatusNotHeld, Now: 11 * ms}},
				{cmd: acquire(12*ms, k, ownerB, 10*ms, 0), want: Result{Status: StatusGranted, Token: 2, ExpiresAt: 20 * ms, Now: 12 * ms}},
				{cmd: extend(13*ms, k, ownerB, 10*ms), want: Result{Status: StatusExtended, Token: 2, ExpiresAt: 23 * ms, Now: 13 * ms}},
			},
		},
		{
			name: "a tick expires a lease; the key is free again",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: tick(9 * ms), want: Result{Status: StatusTicked, Now: 9 * ms}},
				{
					cmd:    tick(12 * ms),
					want:   Result{Status: StatusTicked, Now: 12 * ms},
					events: []Event{{Kind: EventExpired, Key: k, Owner: ownerA, Token: 1, ExpiresAt: 10 * ms, At: 10 * ms}},
				},
				{cmd: acquire(13*ms, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 2, ExpiresAt: 23 * ms, Now: 13 * ms}},
			},
		},
		{
			name: "expiry hands the key to the head waiter with its own TTL counted from now",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(1*ms, k, ownerB, 20*ms, 11*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Now: 1 * ms, Waiters: 1}},
				{
					// B's wait deadline (12ms) is past by now, but it was still
					// waiting when the lease ended at 10ms, so it gets the key.
					cmd:  tick(15 * ms),
					want: Result{Status: StatusTicked, Now: 15 * ms},
					events: []Event{
						{Kind: EventExpired, Key: k, Owner: ownerA, Token: 1, ExpiresAt: 10 * ms, At: 10 * ms},
						{Kind: EventGranted, Key: k, Owner: ownerB, Token: 2, ExpiresAt: 35 * ms, At: 15 * ms},
					},
				},
				{cmd: release(16*ms, k, ownerB), want: Result{Status: StatusReleased, Token: 2, Now: 16 * ms}},
			},
		},
		{
			name: "a waiter past its deadline is dropped",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 100*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 100 * ms}},
				{cmd: acquire(0, k, ownerB, 10*ms, 10*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 100 * ms, Waiters: 1}},
				{cmd: acquire(0, k, ownerC, 10*ms, 30*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 100 * ms, Waiters: 2}},
				{
					cmd:    tick(10 * ms),
					want:   Result{Status: StatusTicked, Now: 10 * ms},
					events: []Event{{Kind: EventWaitExpired, Key: k, Owner: ownerB, At: 10 * ms}},
				},
				{cmd: cancelWait(11*ms, k, ownerB), want: Result{Status: StatusNotHeld, Now: 11 * ms, Waiters: 1}},
				{
					cmd:    release(12*ms, k, ownerA),
					want:   Result{Status: StatusReleased, Token: 1, Now: 12 * ms},
					events: []Event{{Kind: EventGranted, Key: k, Owner: ownerC, Token: 2, ExpiresAt: 22 * ms, At: 12 * ms}},
				},
			},
		},
		{
			name: "a wait deadline equal to the lease end goes first: that waiter does not get the key",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(0, k, ownerB, 5*ms, 10*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Waiters: 1}},
				{cmd: acquire(0, k, ownerD, 5*ms, 20*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Waiters: 2}},
				{
					cmd:  acquire(10*ms, k, ownerC, 5*ms, 0),
					want: Result{Status: StatusHeld, Token: 2, ExpiresAt: 15 * ms, Now: 10 * ms},
					events: []Event{
						{Kind: EventWaitExpired, Key: k, Owner: ownerB, At: 10 * ms},
						{Kind: EventExpired, Key: k, Owner: ownerA, Token: 1, ExpiresAt: 10 * ms, At: 10 * ms},
						{Kind: EventGranted, Key: k, Owner: ownerD, Token: 2, ExpiresAt: 15 * ms, At: 10 * ms},
					},
				},
			},
		},
		{
			name: "simultaneous deadlines are processed by key, then owner bytes, not by arrival",
			steps: []step{
				{cmd: acquire(0, "b", ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(0, "a", ownerB, 10*ms, 0), want: Result{Status: StatusGranted, Token: 2, ExpiresAt: 10 * ms}},
				{cmd: acquire(0, "z", ownerD, 50*ms, 0), want: Result{Status: StatusGranted, Token: 3, ExpiresAt: 50 * ms}},
				{cmd: acquire(0, "z", ownerA, 50*ms, 10*ms), want: Result{Status: StatusQueued, Token: 3, ExpiresAt: 50 * ms, Waiters: 1}},
				{cmd: acquire(0, "z", ownerC, 50*ms, 10*ms), want: Result{Status: StatusQueued, Token: 3, ExpiresAt: 50 * ms, Waiters: 2}},
				{
					cmd:  tick(10 * ms),
					want: Result{Status: StatusTicked, Now: 10 * ms},
					events: []Event{
						{Kind: EventWaitExpired, Key: "z", Owner: ownerC, At: 10 * ms},
						{Kind: EventWaitExpired, Key: "z", Owner: ownerA, At: 10 * ms},
						{Kind: EventExpired, Key: "a", Owner: ownerB, Token: 2, ExpiresAt: 10 * ms, At: 10 * ms},
						{Kind: EventExpired, Key: "b", Owner: ownerA, Token: 1, ExpiresAt: 10 * ms, At: 10 * ms},
					},
				},
			},
		},
		{
			name: "deadlines due in one apply are processed in time order, each at its own time",
			steps: []step{
				{cmd: acquire(0, "late", ownerA, 30*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 30 * ms}},
				{cmd: acquire(0, "early", ownerB, 10*ms, 0), want: Result{Status: StatusGranted, Token: 2, ExpiresAt: 10 * ms}},
				{cmd: acquire(0, "early", ownerC, 10*ms, 20*ms), want: Result{Status: StatusQueued, Token: 2, ExpiresAt: 10 * ms, Waiters: 1}},
				{
					// C is granted "early" at 10ms while still waiting; its new
					// lease counts from now (40ms), so it outlives this apply.
					cmd:  tick(40 * ms),
					want: Result{Status: StatusTicked, Now: 40 * ms},
					events: []Event{
						{Kind: EventExpired, Key: "early", Owner: ownerB, Token: 2, ExpiresAt: 10 * ms, At: 10 * ms},
						{Kind: EventGranted, Key: "early", Owner: ownerC, Token: 3, ExpiresAt: 50 * ms, At: 40 * ms},
						{Kind: EventExpired, Key: "late", Owner: ownerA, Token: 1, ExpiresAt: 30 * ms, At: 30 * ms},
					},
				},
			},
		},
		{
			name: "cancel-wait leaves the queue; the next release skips the canceled owner",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(0, k, ownerB, 10*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Waiters: 1}},
				{cmd: acquire(0, k, ownerC, 10*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Waiters: 2}},
				{cmd: cancelWait(1*ms, k, ownerB), want: Result{Status: StatusCanceled, Token: 1, ExpiresAt: 10 * ms, Now: 1 * ms, Waiters: 1}},
				{cmd: cancelWait(1*ms, k, ownerB), want: Result{Status: StatusNotHeld, Now: 1 * ms, Waiters: 1}},
				{cmd: acquire(1*ms, k, ownerC, 10*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Now: 1 * ms, Waiters: 1}},
				{
					cmd:    release(2*ms, k, ownerA),
					want:   Result{Status: StatusReleased, Token: 1, Now: 2 * ms},
					events: []Event{{Kind: EventGranted, Key: k, Owner: ownerC, Token: 2, ExpiresAt: 12 * ms, At: 2 * ms}},
				},
			},
		},
		{
			name: "cancel-wait after the grant releases and hands on",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(0, k, ownerB, 10*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Waiters: 1}},
				{cmd: acquire(0, k, ownerC, 10*ms, 50*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Waiters: 2}},
				{
					cmd:    release(1*ms, k, ownerA),
					want:   Result{Status: StatusReleased, Token: 1, Now: 1 * ms, Waiters: 1},
					events: []Event{{Kind: EventGranted, Key: k, Owner: ownerB, Token: 2, ExpiresAt: 11 * ms, At: 1 * ms}},
				},
				{
					cmd:    cancelWait(2*ms, k, ownerB),
					want:   Result{Status: StatusReleased, Token: 2, Now: 2 * ms},
					events: []Event{{Kind: EventGranted, Key: k, Owner: ownerC, Token: 3, ExpiresAt: 12 * ms, At: 2 * ms}},
				},
				{cmd: cancelWait(3*ms, k, ownerC), want: Result{Status: StatusReleased, Token: 3, Now: 3 * ms}},
				{cmd: cancelWait(3*ms, k, ownerC), want: Result{Status: StatusNotHeld, Now: 3 * ms}},
			},
		},
		{
			name: "extend moves the lease end, keeps the token, and only the holder may",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(0, k, ownerB, 10*ms, 30*ms), want: Result{Status: StatusQueued, Token: 1, ExpiresAt: 10 * ms, Waiters: 1}},
				{cmd: extend(5*ms, k, ownerA, 20*ms), want: Result{Status: StatusExtended, Token: 1, ExpiresAt: 25 * ms, Now: 5 * ms, Waiters: 1}},
				{cmd: extend(5*ms, k, ownerB, 20*ms), want: Result{Status: StatusNotHeld, Now: 5 * ms, Waiters: 1}},
				{cmd: tick(10 * ms), want: Result{Status: StatusTicked, Now: 10 * ms}},
				{cmd: extend(11*ms, k, ownerA, 2*ms), want: Result{Status: StatusExtended, Token: 1, ExpiresAt: 13 * ms, Now: 11 * ms, Waiters: 1}},
				{
					cmd:  tick(13 * ms),
					want: Result{Status: StatusTicked, Now: 13 * ms},
					events: []Event{
						{Kind: EventExpired, Key: k, Owner: ownerA, Token: 1, ExpiresAt: 13 * ms, At: 13 * ms},
						{Kind: EventGranted, Key: k, Owner: ownerB, Token: 2, ExpiresAt: 23 * ms, At: 13 * ms},
					},
				},
			},
		},
		{
			name: "release by another owner changes nothing",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: release(1*ms, k, ownerB), want: Result{Status: StatusNotHeld, Now: 1 * ms}},
				{cmd: release(1*ms, "other", ownerA), want: Result{Status: StatusNotHeld, Now: 1 * ms}},
				{cmd: acquire(2*ms, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms, Now: 2 * ms}},
			},
		},
		{
			name: "fencing tokens are global across keys and never reused",
			steps: []step{
				{cmd: acquire(0, "x", ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(0, "y", ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 2, ExpiresAt: 10 * ms}},
				{cmd: release(0, "x", ownerA), want: Result{Status: StatusReleased, Token: 1}},
				{cmd: acquire(0, "x", ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 3, ExpiresAt: 10 * ms}},
			},
		},
		{
			name: "the clock never goes back",
			steps: []step{
				{cmd: tick(10 * ms), want: Result{Status: StatusTicked, Now: 10 * ms}},
				{cmd: acquire(5*ms, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 20 * ms, Now: 10 * ms}},
			},
		},
		{
			name: "invalid commands change nothing but the clock",
			steps: []step{
				{cmd: acquire(0, k, ownerA, 10*ms, 0), want: Result{Status: StatusGranted, Token: 1, ExpiresAt: 10 * ms}},
				{cmd: acquire(1*ms, k, ownerB, 0, 0), want: Result{Status: StatusInvalid, Now: 1 * ms}},
				{cmd: release(2*ms, k, Owner{}), want: Result{Status: StatusInvalid, Now: 2 * ms}},
				{cmd: Command{Op: 99, Stamp: 3 * ms, Key: k, Owner: ownerA}, want: Result{Status: StatusInvalid, Now: 3 * ms}},
				{cmd: Command{Op: OpRelease, Stamp: -1, Key: k, Owner: ownerA}, want: Result{Status: StatusInvalid, Now: 3 * ms}},
				{cmd: Command{Op: OpRelease, Stamp: MaxStamp + 1, Key: k, Owner: ownerA}, want: Result{Status: StatusInvalid, Now: 3 * ms}},
				{
					// An invalid command still acts as a tick.
					cmd:    Command{Op: OpTick, Stamp: 12 * ms, Key: k},
					want:   Result{Status: StatusInvalid, Now: 12 * ms},
					events: []Event{{Kind: EventExpired, Key: k, Owner: ownerA, Token: 1, ExpiresAt: 10 * ms, At: 10 * ms}},
				},
				{cmd: acquire(12*ms, k, ownerB, 10*ms, 0), want: Result{Status: StatusGranted, Token: 2, ExpiresAt: 22 * ms, Now: 12 * ms}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newRecorder()
			for i, s := range tt.steps {
				res, events := m.apply(s.cmd)
				assert.Equal(t, s.want, res, "step %d: %s result", i, s.cmd.Op)
				assert.Equal(t, s.events, events, "step %d: %s events", i, s.cmd.Op)
				require.NoError(t, checkInternals(m.Machine), "step %d", i)
				next, ok := m.NextDeadline()
				wantNext, wantOK := earliestDeadline(m.Machine)
				assert.Equal(t, wantOK, ok, "step %d: has next deadline", i)
				assert.Equal(t, wantNext, next, "step %d: next deadline", i)
			}
		})
	}
}

func TestApplyQueueFull(t *testing.T) {
	m := newRecorder()
	const k = "busy"
	require.Equal(t, StatusGranted, m.Apply(acquire(0, k, ownerA, time.Second, 0)).Status)
	for i := range MaxWaiters {
		res := m.Apply(acquire(0, k, numberedOwner(i), time.Second, time.Second))
		require.Equal(t, StatusQueued, res.Status, "waiter %d", i)
		require.Equal(t, i+1, res.Waiters)
	}
	res := m.Apply(acquire(1*ms, k, ownerB, time.Second, time.Second))
	assert.Equal(t, Result{Status: StatusQueueFull, Token: 1, ExpiresAt: time.Second, Now: 1 * ms, Waiters: MaxWaiters}, res)

	// A queued owner's retry still answers with its place, even when full.
	res = m.Apply(acquire(1*ms, k, numberedOwner(MaxWaiters-1), time.Second, time.Second))
	assert.Equal(t, StatusQueued, res.Status)
	assert.Equal(t, MaxWaiters, res.Waiters)

	// Once a place frees up, the newcomer gets in at the back.
	require.Equal(t, StatusReleased, m.Apply(release(2*ms, k, ownerA)).Status)
	res = m.Apply(acquire(2*ms, k, ownerB, time.Second, time.Second))
	assert.Equal(t, StatusQueued, res.Status)
	assert.Equal(t, MaxWaiters, res.Waiters)
	require.NoError(t, checkInternals(m.Machine))
}

func TestLookup(t *testing.T) {
	m := New(nil)
	m.Apply(acquire(0, "k", ownerA, 10*ms, 0))
	m.Apply(acquire(1*ms, "k", ownerB, 10*ms, 50*ms))

	held := KeyState{Held: true, Owner: ownerA, Token: 1, ExpiresAt: 10 * ms, Waiters: 1}
	tests := []struct {
		name string
		key  string
		at   time.Duration
		want KeyState
	}{
		{"held now", "k", 0, held},
		{"a read time before now reads at now", "k", -time.Hour, held},
		{"just before the end", "k", 10*ms - 1, held},
		{"ended at the read time", "k", 10 * ms, KeyState{Waiters: 1}},
		{"unknown key", "nope", 0, KeyState{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, m.Lookup(tt.key, tt.at))
		})
	}
}

func TestRange(t *testing.T) {
	m := New(nil)
	m.Apply(acquire(0, "jobs/c", ownerA, 30*ms, 0))
	m.Apply(acquire(0, "jobs/a", ownerA, 10*ms, 0))
	m.Apply(acquire(0, "jobs/b", ownerB, 20*ms, 0))
	m.Apply(acquire(0, "other", ownerA, 20*ms, 0))
	m.Apply(acquire(0, "jobs", ownerC, 20*ms, 0))

	collect := func(prefix string, at time.Duration, limit int) []string {
		var keys []string
		m.Range(prefix, at, func(key string, st KeyState) bool {
			assert.True(t, st.Held, key)
			keys = append(keys, fmt.Sprintf("%s:%d", key, st.Token))
			return len(keys) < limit
		})
		return keys
	}
	assert.Equal(t, []string{"jobs:5", "jobs/a:2", "jobs/b:3", "jobs/c:1"}, collect("jobs", 0, 100))
	assert.Equal(t, []string{"jobs/a:2", "jobs/b:3", "jobs/c:1"}, collect("jobs/", 0, 100))
	assert.Equal(t, []string{"jobs/b:3", "jobs/c:1"}, collect("jobs/", 10*ms, 100), "leases ended by the read time are skipped")
	assert.Equal(t, []string{"jobs:5", "jobs/a:2"}, collect("", 0, 2), "stops when fn returns false")
	assert.Empty(t, collect("zzz", 0, 100))
}

func TestAccessors(t *testing.T) {
	m := New(nil)
	_, ok := m.NextDeadline()
	assert.False(t, ok)
	assert.Zero(t, m.Len())
	assert.Zero(t, m.Waiters())
	assert.Zero(t, m.LastToken())

	m.Apply(acquire(3*ms, "a", ownerA, 10*ms, 0))
	m.Apply(acquire(4*ms, "b", ownerA, 5*ms, 0))
	m.Apply(acquire(4*ms, "b", ownerB, 5*ms, 3*ms))
	next, ok := m.NextDeadline()
	assert.True(t, ok)
	assert.Equal(t, 7*ms, next, "B's wait deadline is the earliest")
	assert.Equal(t, 2, m.Len())
	assert.Equal(t, 1, m.Waiters(), "B waits for b")
	assert.Equal(t, uint64(2), m.LastToken())
	assert.Equal(t, 4*ms, m.Now())

	m.Apply(cancelWait(4*ms, "b", ownerB))
	assert.Zero(t, m.Waiters(), "B left the queue")
	next, _ = m.NextDeadline()
	assert.Equal(t, 9*ms, next, "a canceled wait is no longer pending")
	m.Apply(extend(4*ms, "b", ownerA, 20*ms))
	next, _ = m.NextDeadline()
	assert.Equal(t, 13*ms, next, "an extended lease is no longer due at its old end")
	m.Apply(release(4*ms, "a", ownerA))
	next, _ = m.NextDeadline()
	assert.Equal(t, 24*ms, next, "a released lease is no longer pending")
}

func TestStrings(t *testing.T) {
	assert.Equal(t, "cancel-wait", OpCancelWait.String())
	assert.Equal(t, "force-release", OpForceRelease.String())
	assert.Equal(t, "acquire-all", OpAcquireAll.String())
	assert.Equal(t, "op(14)", Op(14).String())
	assert.Equal(t, "queue-full", StatusQueueFull.String())
	assert.Equal(t, "status(0)", Status(0).String())
	assert.Equal(t, "wait-expired", EventWaitExpired.String())
	assert.Equal(t, "event(7)", EventKind(7).String())
}
