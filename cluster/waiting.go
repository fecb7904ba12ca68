package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/cluster/internal/waiting"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/fsm"
)

// Waiting at the leader (a waiting acquire parked there until its grant or
// the end of its wait, withdrawn when its caller goes) is package
// waiting's; this is what a node gives it to run on: the node (waitHost)
// and its leader term (leaderTerm, as a waiting.Term).

// newWaiters makes the node's waiters, before its state machine, which
// tells them of every grant and end of a wait.
func (n *Node) newWaiters() *waiting.Waiters {
	return waiting.New(waiting.Config{
		RequestTimeout:  n.cfg.RequestTimeout,
		ElectionTimeout: n.cfg.ElectionTimeout,
		Log:             n.log,
		Monotonic:       n.clock.Monotonic,
		Closing:         n.closing,
	}, waitHost{n})
}

// waitHost is the node as its waiters see it (waiting.Node).
type waitHost struct{ n *Node }

func (h waitHost) Addr() string { return h.n.Addr() }

func (h waitHost) Term() waiting.Term {
	if t := h.n.term.Load(); t != nil {
		return t
	}
	return nil // not a nil *leaderTerm: waiting compares with nil
}

func (h waitHost) LeaderChanged() <-chan struct{} { return h.n.leaderChanged.Wait() }

// CallLeader sends cmd to the leader (see leaderTarget) and waits for its
// answer, which callLeader cuts short when raft reports another leader
// meanwhile (the caller sends it again to the new leader at once); the old
// leader then withdraws it, in its own term only, so the withdrawal can
// never follow the new leader's entries in the log.
func (h waitHost) CallLeader(ctx context.Context, cmd fsm.Command, hint string) (ans nodewire.WaitAnswer, tried, leaderHint string, err error) {
	addr, raftLeader, err := h.n.leaderTarget(hint)
	if err != nil {
		return nodewire.WaitAnswer{}, "", "", err
	}
	rep, err := h.n.callLeader(ctx, addr, raftLeader, nodewire.EncodeRequest(&nodewire.WaitAcquire{Command: nodewire.Command{Cmd: cmd}}), true, nil)
	if err == nil {
		err = rep.Err()
	}
	if err != nil {
		return nodewire.WaitAnswer{}, addr, rep.Leader, err
	}
	a, ok := rep.Answer.(*nodewire.WaitAnswer)
	if !ok {
		return nodewire.WaitAnswer{}, addr, "", fmt.Errorf("%w: %v reply to a waiting acquire", ErrBadRequest, rep.Kind)
	}
	return *a, addr, "", nil
}

func (h waitHost) Command(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	return h.n.command(ctx, cmd)
}

func (h waitHost) Read(ctx context.Context, key string) (nodewire.ReadResult, error) {
	return h.n.read(ctx, key, nil)
}

func (h waitHost) Closed(unknown bool) error {
	if !h.n.closed() {
		return nil
	}
	return h.n.closedError(unknown)
}

func (h waitHost) LogFault(unknown bool) error { return h.n.logFaultError(unknown) }

// A leaderTerm is the term waiting parks its waiters in (waiting.Term).

func (t *leaderTerm) Ready(ctx context.Context) error { return t.n.until(ctx, t, t.ready) }

func (t *leaderTerm) Until(ctx context.Context, ch <-chan struct{}) error {
	return t.n.until(ctx, t, ch)
}

func (t *leaderTerm) Admit(ctx context.Context, cmd fsm.Command) error {
	return t.n.admitQuota(ctx, t, cmd) // see quota.go
}

func (t *leaderTerm) Enqueue(cmd fsm.Command) (waiting.Pending, error) {
	p, err := t.enqueue(cmd)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (fsm.Result, error) { return t.await(ctx, p) }, nil
}

func (t *leaderTerm) Now() time.Duration { return t.clock.now() }

func (t *leaderTerm) Done() <-chan struct{} { return t.stop }

func (t *leaderTerm) KeyState(key string) (fsm.KeyState, time.Duration) {
	return t.n.sm.lookup(key, t.clock.now())
}

func (t *leaderTerm) SessionLive(id fsm.Owner) bool { return t.n.sm.sessionLive(id, 0) }
