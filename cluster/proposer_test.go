package cluster

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
)

// The proposer holds back a queue of acquires that can only be queued, for
// at most maxDefer, so that the holder's release shares their entry; any
// other command sends everything at once.
func TestProposerHoldsBackCertainWaiters(t *testing.T) {
	sm := newStateMachine(hclog.NewNullLogger(), nil)
	holder, waiter, other := fsm.Owner{1}, fsm.Owner{2}, fsm.Owner{3}
	data, err := fsm.AppendBatch(nil, []fsm.Command{{Op: fsm.OpAcquire, Stamp: 1, Key: "k", Owner: holder, TTL: time.Hour}})
	require.NoError(t, err)
	sm.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: data}})
	term := newLeaderTerm(&Node{sm: sm})
	queue := func(cmd fsm.Command, age time.Duration) {
		term.queue = append(term.queue, &proposal{cmd: cmd, queued: time.Now().Add(-age)})
	}
	waitFor := func(key string, owner fsm.Owner) fsm.Command {
		return fsm.Command{Op: fsm.OpAcquire, Key: key, Owner: owner, TTL: time.Minute, Wait: time.Minute}
	}

	queue(waitFor("k", waiter), 0)
	batch, hold := term.take()
	assert.Empty(t, batch, "an acquire that can only wait is held back")
	assert.Positive(t, hold)
	assert.LessOrEqual(t, hold, maxDefer)

	queue(fsm.Command{Op: fsm.OpRelease, Key: "k", Owner: holder}, 0)
	batch, hold = term.take()
	assert.Len(t, batch, 2, "the release takes the waiter along, in order")
	assert.Zero(t, hold)

	queue(waitFor("k", other), maxDefer)
	batch, _ = term.take()
	assert.Len(t, batch, 1, "held back no longer than maxDefer")

	queue(waitFor("free", waiter), 0)
	batch, _ = term.take()
	assert.Len(t, batch, 1, "an acquire of a free key goes at once")

	queue(waitFor("k", holder), 0)
	batch, _ = term.take()
	assert.Len(t, batch, 1, "the holder's own acquire goes at once")

	try := waitFor("k", waiter)
	try.Wait = 0
	queue(try, 0)
	batch, _ = term.take()
	assert.Len(t, batch, 1, "a try-acquire goes at once: its caller waits for the answer")
}

// The proposer gathers a burst before it takes the queue: commands whose
// goroutines are runnable when it looks (a batch forwarded in one write,
// one goroutine per command) join the queue first, so they share an entry
// instead of the first going alone. One processor makes "runnable"
// deterministic: without the yields, none of them would have run.
func TestProposerGathersRunnableCommands(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	term := newLeaderTerm(&Node{levels: buildLevels})
	const burst = 48
	var queued sync.WaitGroup
	for i := range burst {
		queued.Add(1)
		go func() {
			defer queued.Done()
			_, err := term.enqueue(fsm.Command{Op: fsm.OpRelease, Key: fmt.Sprintf("k%d", i), Owner: fsm.Owner{1}})
			assert.NoError(t, err)
		}()
	}
	term.gather()
	assert.Equal(t, burst, term.queued(), "every command on its way joined the queue before the proposer took it")
	queued.Wait()

	batch, _ := term.take()
	assert.Len(t, batch, burst)
	term.gather() // nothing on its way: returns after a few yields
	assert.Zero(t, term.queued())
}

// Through a node: a lone command is proposed and answered in an entry of
// its own (the proposer waits for nothing); a burst of commands on their
// way to a leader at once lands in one entry.
func TestProposerBurstSharesOneEntry(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.leader()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()

	before := n.raft.LastIndex()
	_, err := n.Acquire(ctx, lock.AcquireRequest{Key: "lone", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, 1, entriesWith(t, n, before, "lone"), "the lone command's entry")

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const burst = 32
	before = n.raft.LastIndex()
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			_, err := n.Acquire(ctx, lock.AcquireRequest{Key: fmt.Sprintf("burst/%d", i), Owner: lock.NewOwner(), TTL: time.Minute})
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, 1, entriesWith(t, n, before, "burst/"), "entries carrying the burst")
}

// entriesWith counts the log entries after index from whose commands hold a
// key starting with prefix.
func entriesWith(t *testing.T, n *Node, from uint64, prefix string) int {
	t.Helper()
	entries := 0
	for _, cmds := range commandsAfter(t, n, from) {
		if slices.ContainsFunc(cmds, func(c fsm.Command) bool { return strings.HasPrefix(c.Key, prefix) }) {
			entries++
		}
	}
	return entries
}

// commandsWith counts the commands in the log entries after index from
// whose key starts with prefix.
func commandsWith(t *testing.T, n *Node, from uint64, prefix string) int {
	t.Helper()
	count := 0
	for _, cmds := range commandsAfter(t, n, from) {
		for _, c := range cmds {
			if strings.HasPrefix(c.Key, prefix) {
				count++
			}
		}
	}
	return count
}

// commandsAfter returns the commands of each command entry of n's log after
// index from.
func commandsAfter(t *testing.T, n *Node, from uint64) [][]fsm.Command {
	t.Helper()
	var entries [][]fsm.Command
	for i := from + 1; i <= n.raft.LastIndex(); i++ {
		var l raft.Log
		require.NoError(t, n.store.GetLog(i, &l))
		if l.Type != raft.LogCommand {
			continue
		}
		cmds, err := fsm.DecodeBatch(l.Data)
		require.NoError(t, err)
		entries = append(entries, cmds)
	}
	return entries
}
