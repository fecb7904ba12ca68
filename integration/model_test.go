package integration

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
)

// The sequential specification the linearizability workload is checked
// against, for porcupine.
//
// Leases expire by time, which a sequential model cannot see, so that
// workload asks for TTLs far longer than the run: no lease ends during it,
// and a key behaves as an owner-checked mutex with fencing tokens. Expiry is
// exercised by the fenced-register workload instead. Each client of the
// workload is one owner, so the model names holders by client.
//
// The state of one key (the history is partitioned by key) is who holds it,
// the holder's token, and the highest token known to have been granted for
// it. Tokens are global across keys, so within one key every new grant's
// token exceeds every earlier one; the global order is checked separately
// (checkTokenOrder).
//
// Outcomes nobody learned. An operation whose outcome stayed unknown has its
// return at infinity and an output that accepts anything; its effect is
// still the model's. An acquire of a free key may or may not have been
// granted (two next states); if granted, its token is not known yet, and
// the first later operation that reports the holder's token pins it (token
// 0 in the state means "held, token not seen yet").
//
// Release by an owner that does not hold the key must change nothing; it
// may answer false, or true: the repeat of the release that ended the
// owner's lease answers true (the state machine remembers it; see
// cluster.Node.Release), which the model, not tracking what ended each
// lease, accepts from any non-holder. A release by the holder must answer true, unless
// the workload's own earlier attempt had an unknown outcome (lockOutput.maybe):
// then false may mean "that attempt released it".

// lockOp is an operation of the linearizability workload.
type lockOp uint8

const (
	opAcquire lockOp = iota
	opRelease
	opExtend
	opInspect
)

func (o lockOp) String() string {
	switch o {
	case opAcquire:
		return "acquire"
	case opRelease:
		return "release"
	case opExtend:
		return "extend"
	case opInspect:
		return "inspect"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// lockInput is what an operation asked; client is its owner. shared is
// a read/write lock's acquire for reading (groupModel only).
type lockInput struct {
	op     lockOp
	key    string
	client int
	shared bool
}

// lockOutput is what an operation answered.
type lockOutput struct {
	unknown bool   // the outcome was never learned: any answer, any permitted effect
	ok      bool   // acquire granted, release true, extend done, inspect locked
	held    bool   // acquire: another owner holds the key (a *lock.HeldError)
	token   uint64 // acquire/extend: the lease's token; held, inspect: the holder's
	maybe   bool   // release: an earlier attempt's outcome was unknown
	holders int    // inspect: how many hold the key (groupModel only)
}

// lockState is one key. holder is -1 when the key is free.
type lockState struct {
	holder int
	token  uint64 // the holder's token; 0 while held with a token not seen yet
	last   uint64 // the highest token known granted for this key
}

var freeKey = lockState{holder: -1}

// matches reports whether t can be the holder's token, and the state with
// the token pinned.
func (s lockState) matches(t uint64) (lockState, bool) {
	switch {
	case s.token == t:
		return s, true
	case s.token == 0 && t > s.last:
		s.token, s.last = t, t
		return s, true
	}
	return s, false
}

func stepLock(state, input, output any) []any {
	s, in, out := state.(lockState), input.(lockInput), output.(lockOutput)
	switch in.op {
	case opAcquire:
		switch {
		case out.unknown && s.holder == -1:
			return []any{s, lockState{holder: in.client, last: s.last}}
		case out.unknown:
			return []any{s}
		case out.ok && s.holder == in.client:
			if p, ok := s.matches(out.token); ok {
				return []any{p} // a repeated acquire by the holder: the same grant
			}
		case out.ok && s.holder == -1 && out.token > s.last:
			return []any{lockState{holder: in.client, token: out.token, last: out.token}}
		case out.held && s.holder != -1 && s.holder != in.client:
			if p, ok := s.matches(out.token); ok {
				return []any{p}
			}
		}
	case opRelease:
		switch {
		case s.holder == in.client && (out.ok || out.maybe || out.unknown):
			return []any{lockState{holder: -1, last: s.last}}
		case s.holder != in.client:
			return []any{s}
		}
	case opExtend:
		switch {
		case out.unknown:
			return []any{s}
		case out.ok && s.holder == in.client:
			if p, ok := s.matches(out.token); ok {
				return []any{p}
			}
		case !out.ok && s.holder != in.client:
			return []any{s}
		}
	case opInspect:
		switch {
		case out.unknown:
			return []any{s}
		case out.ok && s.holder != -1:
			if p, ok := s.matches(out.token); ok {
				return []any{p}
			}
		case !out.ok && s.holder == -1:
			return []any{s}
		}
	}
	return nil
}

// lockModel is the porcupine model of one key, with the history
// partitioned by key.
var lockModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(lockInput).key
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{freeKey} },
	Step: stepLock,
	DescribeOperation: func(input, output any) string {
		in, out := input.(lockInput), output.(lockOutput)
		return fmt.Sprintf("c%d %s(%s) -> %s", in.client, in.op, in.key, describeOutput(in.op, out))
	},
	DescribeState: func(state any) string {
		s := state.(lockState)
		if s.holder == -1 {
			return fmt.Sprintf("free (last token %d)", s.last)
		}
		if s.token == 0 {
			return fmt.Sprintf("held by c%d, token unseen (> %d)", s.holder, s.last)
		}
		return fmt.Sprintf("held by c%d, token %d", s.holder, s.token)
	},
}).ToModel()

func describeOutput(op lockOp, out lockOutput) string {
	switch {
	case out.unknown:
		return "unknown"
	case op == opAcquire && out.ok:
		return fmt.Sprintf("granted %d", out.token)
	case op == opAcquire && out.held:
		return fmt.Sprintf("held (token %d)", out.token)
	case op == opRelease && out.maybe:
		return fmt.Sprintf("%v (after an unknown attempt)", out.ok)
	case op == opRelease:
		return fmt.Sprint(out.ok)
	case (op == opExtend || op == opInspect) && out.ok:
		return fmt.Sprintf("ok %d", out.token)
	case op == opExtend:
		return "not held"
	case op == opInspect:
		return "free"
	}
	return fmt.Sprintf("%+v", out)
}

// never is the return time of an operation whose outcome is unknown.
const never = int64(math.MaxInt64)

// Tests of the model itself: a checker that cannot fail is no evidence.

type modelCase struct {
	name string
	ops  []porcupine.Operation
	ok   bool
}

// seq builds a history of non-overlapping operations, in order.
func seq(steps ...struct {
	in  lockInput
	out lockOutput
}) []porcupine.Operation {
	var ops []porcupine.Operation
	for i, s := range steps {
		ops = append(ops, porcupine.Operation{ClientId: s.in.client, Input: s.in, Output: s.out, Call: int64(2 * i), Return: int64(2*i + 1)})
	}
	return ops
}

type step = struct {
	in  lockInput
	out lockOutput
}

func acq(c int, out lockOutput) step { return step{lockInput{op: opAcquire, key: "k", client: c}, out} }
func rel(c int, out lockOutput) step { return step{lockInput{op: opRelease, key: "k", client: c}, out} }
func ext(c int, out lockOutput) step { return step{lockInput{op: opExtend, key: "k", client: c}, out} }
func insp(out lockOutput) step       { return step{lockInput{op: opInspect, key: "k", client: 9}, out} }

func granted(t uint64) lockOutput { return lockOutput{ok: true, token: t} }
func heldBy(t uint64) lockOutput  { return lockOutput{held: true, token: t} }

var (
	yes     = lockOutput{ok: true}
	no      = lockOutput{}
	unknown = lockOutput{unknown: true}
)

func TestLockModel(t *testing.T) {
	cases := []modelCase{
		{"grant release grant", seq(acq(0, granted(1)), rel(0, yes), acq(1, granted(2)), insp(granted(2))), true},
		{"double grant", seq(acq(0, granted(1)), acq(1, granted(2))), false},
		{"same owner again gets the same token", seq(acq(0, granted(1)), acq(0, granted(1))), true},
		{"same owner again gets a new token", seq(acq(0, granted(1)), acq(0, granted(2))), false},
		{"token goes backwards", seq(acq(0, granted(5)), rel(0, yes), acq(1, granted(3))), false},
		{"held reports the holder's token", seq(acq(0, granted(4)), acq(1, heldBy(4))), true},
		{"held reports another token", seq(acq(0, granted(4)), acq(1, heldBy(7))), false},
		{"held while free", seq(acq(1, heldBy(1))), false},
		{"release by the holder says false", seq(acq(0, granted(1)), rel(0, no)), false},
		{"release by the holder after an unknown attempt may say false", seq(acq(0, granted(1)), rel(0, lockOutput{maybe: true}), acq(1, granted(2))), true},
		{"release by another owner changes nothing", seq(acq(0, granted(1)), rel(1, yes), acq(1, heldBy(1))), true},
		{"release by another owner freed the key", seq(acq(0, granted(1)), rel(1, no), acq(1, granted(2))), false},
		{"extend by the holder", seq(acq(0, granted(3)), ext(0, granted(3))), true},
		{"extend changes the token", seq(acq(0, granted(3)), ext(0, granted(4))), false},
		{"extend of a lost lock", seq(acq(0, granted(3)), ext(0, no)), false},
		{"extend by another owner", seq(acq(0, granted(3)), ext(1, granted(3))), false},
		{"inspect sees a free key locked", seq(insp(granted(1))), false},
		{"inspect misses the holder", seq(acq(0, granted(1)), insp(no)), false},
		{"unknown acquire that was granted", seq(acq(0, unknown), insp(granted(8)), acq(1, heldBy(8)), rel(0, yes), acq(1, granted(9))), true},
		{"unknown acquire that was not granted", seq(acq(0, unknown), acq(1, granted(2))), true},
		{"unseen token must still grow", seq(acq(0, granted(5)), rel(0, yes), acq(1, unknown), insp(granted(4))), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.ok, porcupine.CheckOperations(lockModel, c.ops), "history:\n%s", describeHistory(c.ops))
		})
	}
}

// An unknown operation returns at infinity: it may take effect after
// everything else, or in the middle.
func TestLockModelUnknownAtInfinity(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Input: lockInput{op: opAcquire, key: "k", client: 0}, Output: granted(1), Call: 0, Return: 1},
		{ClientId: 0, Input: lockInput{op: opRelease, key: "k", client: 0}, Output: unknown, Call: 2, Return: never},
		{ClientId: 1, Input: lockInput{op: opAcquire, key: "k", client: 1}, Output: heldBy(1), Call: 3, Return: 4},
		{ClientId: 1, Input: lockInput{op: opAcquire, key: "k", client: 1}, Output: granted(2), Call: 5, Return: 6},
	}
	assert.True(t, porcupine.CheckOperations(lockModel, ops))
	// But it cannot take effect before it was called.
	ops[1].Call, ops[2].Call, ops[2].Return = 3, 0, 0
	ops[2].Output = granted(1)
	ops[2].Input = lockInput{op: opAcquire, key: "k", client: 1}
	assert.False(t, porcupine.CheckOperations(lockModel, ops), "client 1 was granted the key before client 0's release was even sent")
}

// Concurrent operations may be ordered either way.
func TestLockModelConcurrentGrants(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Input: lockInput{op: opAcquire, key: "k", client: 0}, Output: granted(2), Call: 0, Return: 10},
		{ClientId: 1, Input: lockInput{op: opAcquire, key: "k", client: 1}, Output: heldBy(2), Call: 1, Return: 5},
	}
	assert.True(t, porcupine.CheckOperations(lockModel, ops))
	ops[1].Output = granted(3)
	assert.False(t, porcupine.CheckOperations(lockModel, ops), "two concurrent grants of one key")
}

// describeHistory lists operations one a line: invocation and response in
// seconds since the scenario started (∞ for an unknown outcome), then what
// was asked and answered.
func describeHistory(ops []porcupine.Operation) string {
	var b strings.Builder
	for _, op := range ops {
		ret := "∞"
		if op.Return != never {
			ret = fmt.Sprintf("%.6f", time.Duration(op.Return).Seconds())
		}
		fmt.Fprintf(&b, "[%.6f, %s] %s\n", time.Duration(op.Call).Seconds(), ret, lockModel.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}

func TestTokenOrder(t *testing.T) {
	op := func(c int, key string, token uint64, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: lockInput{op: opAcquire, key: key, client: c}, Output: granted(token), Call: call, Return: ret}
	}
	assert.Empty(t, checkTokenOrder([]porcupine.Operation{
		op(0, "a", 1, 0, 1), op(1, "b", 2, 2, 3), op(0, "a", 1, 4, 5), // a repeat by the holder keeps its token
		op(2, "c", 4, 6, 9), op(3, "d", 3, 7, 8), // concurrent grants may finish in either order
	}))
	assert.Len(t, checkTokenOrder([]porcupine.Operation{op(0, "a", 5, 0, 1), op(1, "b", 4, 2, 3)}), 1,
		"a grant that began after another ended got a smaller token")
	assert.Len(t, checkTokenOrder([]porcupine.Operation{op(0, "a", 5, 0, 1), op(1, "b", 5, 0, 1)}), 1,
		"two grants to different keys share a token")
}
