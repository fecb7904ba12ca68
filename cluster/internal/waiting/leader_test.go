package waiting

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// A caller's cancel-wait that reaches the leader after its ctx ended (the
// caller stopped waiting for the answer, or its connection died) is still
// proposed: it is the withdrawal of a caller that is gone, without which
// the owner's waiter keeps its place, or a grant to it stays with nobody,
// until its wait or TTL runs out (see CancelWait).
func TestCancelWaitOfAGoneCallerIsProposed(t *testing.T) {
	w, term := newTestWaiters()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cmd := fsm.Command{Op: fsm.OpCancelWait, Key: "k", Owner: fsm.Owner(lock.NewOwner())}
	_, err := w.CancelWait(ctx, term, cmd)
	require.ErrorIs(t, err, context.Canceled, "nobody waits for the answer")
	assert.Equal(t, []fsm.Command{cmd}, term.proposed(), "the withdrawal is proposed all the same")
}

// While a call of the owner is parked, a cancel-wait whose ctx has ended
// returns at once and proposes nothing: the parked call withdraws itself
// if its caller is gone, and a newer call's place is not the gone caller's
// to take.
func TestCancelWaitOfAGoneCallerBehindAParkedCall(t *testing.T) {
	w, term := newTestWaiters()
	owner := fsm.Owner(lock.NewOwner())
	_, err := w.parked.park("k", owner, func() error { return nil })
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = w.CancelWait(ctx, term, fsm.Command{Op: fsm.OpCancelWait, Key: "k", Owner: owner})
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, term.proposed())
}

func newTestWaiters() (*Waiters, *recordingTerm) {
	start := time.Now()
	w := New(Config{
		RequestTimeout: time.Second, ElectionTimeout: time.Second, Log: hclog.NewNullLogger(),
		Monotonic: func() time.Duration { return time.Since(start) }, Closing: make(chan struct{}),
	}, nil)
	return w, &recordingTerm{done: make(chan struct{})}
}

// recordingTerm is a leader term that records what is queued for
// proposal and never applies it: a Pending waits for its ctx.
type recordingTerm struct {
	mu    sync.Mutex
	queue []fsm.Command
	done  chan struct{}
}

func (r *recordingTerm) proposed() []fsm.Command {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queue
}

func (r *recordingTerm) Ready(context.Context) error { return nil }

func (r *recordingTerm) Until(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-r.done:
		return nodewire.ErrNotLeader
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *recordingTerm) Admit(context.Context, fsm.Command) error { return nil }

func (r *recordingTerm) Enqueue(cmd fsm.Command) (Pending, error) {
	r.mu.Lock()
	r.queue = append(r.queue, cmd)
	r.mu.Unlock()
	return func(ctx context.Context) (fsm.Result, error) {
		<-ctx.Done()
		return fsm.Result{}, ctx.Err()
	}, nil
}

func (r *recordingTerm) Now() time.Duration                            { return 0 }
func (r *recordingTerm) Done() <-chan struct{}                         { return r.done }
func (r *recordingTerm) KeyState(string) (fsm.KeyState, time.Duration) { return fsm.KeyState{}, 0 }
func (r *recordingTerm) SessionLive(fsm.Owner) bool                    { return false }
