package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
)

// groupModel is the sequential specification of a semaphore of limit
// holders (limit > 0) or a read/write lock (limit 0), for the
// linearizability workload run on such keys. As lockModel, it relies on
// leases outliving the run, names holders by client, partitions the
// history by key, and lets an operation whose outcome stayed unknown have
// any permitted effect. The state is each client's hold (none, a slot or a
// read, a write) and token, and the highest token known granted.
//
// An acquire by a client that holds nothing is granted only if it fits
// (fewer than limit holders; a read while no writer holds; a write while
// nobody holds) and otherwise answers held (the workload never waits, so
// nobody queues and a free slot is always granted). A holder's acquire is
// its grant again, with the same token, in the same mode; in another mode
// it answers held. Inspect tells locked, the holders and the newest token.
func groupModel(limit int) porcupine.Model {
	return (&porcupine.NondeterministicModel{
		Partition: lockModel.Partition,
		Init:      func() []any { return []any{groupState{}} },
		Step: func(state, input, output any) []any {
			return stepGroup(limit, state.(groupState), input.(lockInput), output.(lockOutput))
		},
		DescribeOperation: lockModel.DescribeOperation,
		DescribeState: func(state any) string {
			return state.(groupState).String()
		},
	}).ToModel()
}

// maxGroupClients bounds the clients of a group workload: the state is an
// array per client, comparable with ==.
const maxGroupClients = 8

const (
	holdNone  = 0
	holdRead  = 1 // a read, or a semaphore's slot
	holdWrite = 2
)

type groupState struct {
	hold  [maxGroupClients]uint8
	token [maxGroupClients]uint64 // 0 while held with a token not seen yet
	last  uint64
}

func (s groupState) String() string {
	var b strings.Builder
	for c, h := range s.hold {
		if h != holdNone {
			fmt.Fprintf(&b, "c%d:%s:%d ", c, map[uint8]string{holdRead: "r", holdWrite: "w"}[h], s.token[c])
		}
	}
	return fmt.Sprintf("holders [%s] last %d", strings.TrimSpace(b.String()), s.last)
}

func (s groupState) count() (n int, writer bool) {
	for _, h := range s.hold {
		if h != holdNone {
			n++
		}
		writer = writer || h == holdWrite
	}
	return n, writer
}

// mode is the hold an acquire asks for.
func mode(limit int, in lockInput) uint8 {
	if limit > 0 || in.shared {
		return holdRead
	}
	return holdWrite
}

func (s groupState) fits(limit int, m uint8) bool {
	n, writer := s.count()
	switch {
	case limit > 0:
		return n < limit
	case m == holdRead:
		return !writer
	}
	return n == 0
}

// pin matches t with client c's token, pinning it if it was not seen yet.
func (s groupState) pin(c int, t uint64) (groupState, bool) {
	switch {
	case s.token[c] == t:
		return s, true
	case s.token[c] == 0 && t > s.last:
		s.token[c], s.last = t, t
		return s, true
	}
	return s, false
}

func stepGroup(limit int, s groupState, in lockInput, out lockOutput) []any {
	c := in.client
	if c < 0 || c >= maxGroupClients {
		return nil
	}
	m := mode(limit, in)
	holds := s.hold[c] != holdNone
	switch in.op {
	case opAcquire:
		switch {
		case out.unknown && !holds && s.fits(limit, m):
			g := s
			g.hold[c], g.token[c] = m, 0
			return []any{s, g}
		case out.unknown:
			return []any{s}
		case out.ok && holds && s.hold[c] == m:
			if p, ok := s.pin(c, out.token); ok {
				return []any{p}
			}
		case out.ok && !holds && s.fits(limit, m) && out.token > s.last:
			g := s
			g.hold[c], g.token[c], g.last = m, out.token, out.token
			return []any{g}
		case out.held && holds && s.hold[c] != m:
			return []any{s}
		case out.held && !holds && !s.fits(limit, m):
			return []any{s}
		}
	case opRelease:
		switch {
		case holds && (out.ok || out.maybe || out.unknown):
			g := s
			g.hold[c], g.token[c] = holdNone, 0
			return []any{g}
		case !holds:
			return []any{s}
		}
	case opExtend:
		switch {
		case out.unknown:
			return []any{s}
		case out.ok && holds:
			if p, ok := s.pin(c, out.token); ok {
				return []any{p}
			}
		case !out.ok && !holds:
			return []any{s}
		}
	case opInspect:
		n, _ := s.count()
		switch {
		case out.unknown:
			return []any{s}
		case out.ok != (n > 0) || out.holders != n:
			return nil
		case n == 0:
			return []any{s}
		}
		// The token shown is the newest holder's: no known token above it.
		for i, h := range s.hold {
			if h != holdNone && s.token[i] > out.token {
				return nil
			}
		}
		return []any{s}
	}
	return nil
}

func TestGroupModel(t *testing.T) {
	in := func(op lockOp, c int, shared bool) lockInput {
		return lockInput{op: op, key: "k", client: c, shared: shared}
	}
	run := func(limit int, steps ...struct {
		in  lockInput
		out lockOutput
	}) bool {
		var ops []porcupine.Operation
		for i, st := range steps {
			ops = append(ops, porcupine.Operation{ClientId: st.in.client, Input: st.in, Output: st.out, Call: int64(2 * i), Return: int64(2*i + 1)})
		}
		return porcupine.CheckOperations(groupModel(limit), ops)
	}
	type step = struct {
		in  lockInput
		out lockOutput
	}
	// A semaphore of 2: two grants, the third held, a release lets it in.
	assert.True(t, run(2,
		step{in(opAcquire, 0, false), granted(1)},
		step{in(opAcquire, 1, false), granted(2)},
		step{in(opAcquire, 2, false), heldBy(1)},
		step{in(opInspect, 9%maxGroupClients, false), lockOutput{ok: true, token: 2, holders: 2}},
		step{in(opRelease, 0, false), lockOutput{ok: true}},
		step{in(opAcquire, 2, false), granted(3)},
	))
	assert.False(t, run(2,
		step{in(opAcquire, 0, false), granted(1)},
		step{in(opAcquire, 1, false), granted(2)},
		step{in(opAcquire, 2, false), granted(3)},
	), "three holders of a semaphore of 2")
	assert.False(t, run(2,
		step{in(opAcquire, 0, false), granted(2)},
		step{in(opAcquire, 1, false), granted(1)},
	), "tokens go down")
	// A read/write lock: readers share; a writer is held off, then alone.
	assert.True(t, run(0,
		step{in(opAcquire, 0, true), granted(1)},
		step{in(opAcquire, 1, true), granted(2)},
		step{in(opAcquire, 2, false), heldBy(1)},
		step{in(opRelease, 0, false), lockOutput{ok: true}},
		step{in(opRelease, 1, false), lockOutput{ok: true}},
		step{in(opAcquire, 2, false), granted(3)},
		step{in(opAcquire, 0, true), heldBy(3)},
		step{in(opAcquire, 2, true), heldBy(3)}, // the writer asking to read: another mode
	))
	assert.False(t, run(0,
		step{in(opAcquire, 0, true), granted(1)},
		step{in(opAcquire, 1, false), granted(2)},
	), "a writer with a reader")
	assert.False(t, run(0,
		step{in(opAcquire, 0, true), granted(1)},
		step{in(opAcquire, 1, true), heldBy(1)},
	), "a reader refused while only readers hold")
}
