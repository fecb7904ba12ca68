package waiting

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/fsm"
)

// Node is what waiting asks of the raftlock node it runs in (package
// cluster's Node): where the leader is and how to reach it.
type Node interface {
	// Addr is this node's address, as a leader hint may name it.
	Addr() string
	// Term is this node's leader term, nil while it does not lead.
	Term() Term
	// LeaderChanged returns a channel closed at the next change of leader,
	// or when this node's leader term becomes ready. Take it before
	// reading the state it guards, so that a change in between is not
	// missed.
	LeaderChanged() <-chan struct{}
	// CallLeader sends cmd, a waiting acquire, to the leader (the one hint
	// names, else the one raft reports) and waits for its answer; a leader
	// change reported while the call is parked cuts it short. tried is
	// where it went, "" when no leader was there to send it to; leaderHint
	// is what a "not leader" reply named.
	CallLeader(ctx context.Context, cmd fsm.Command, hint string) (ans nodewire.WaitAnswer, tried, leaderHint string, err error)
	// Command runs cmd at the leader, wherever it leads, retried across
	// leader changes as the node's own commands are.
	Command(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	// Read reads key at the leader: a linearizable read.
	Read(ctx context.Context, key string) (nodewire.ReadResult, error)
	// Closed is a lock call's error once the node closes (lock.ErrClosed,
	// or why it halted), nil while it runs. LogFault is its error while
	// the node, its only voter, cannot write its raft log; nil otherwise.
	// unknown: an earlier attempt may have taken effect, and the error
	// says so.
	Closed(unknown bool) error
	LogFault(unknown bool) error
}

// Term is one leader term of the node: a waiter parks, is answered and is
// withdrawn in the term its call reached, never in a later one.
type Term interface {
	// Ready returns once the term's log clock runs, every entry of earlier
	// terms applied. Until waits for ch to close while the term lasts.
	// Their errors are nodewire.ErrNotLeader once the term ends, ctx's,
	// and nodewire.ErrShuttingDown.
	Ready(ctx context.Context) error
	Until(ctx context.Context, ch <-chan struct{}) error
	// Admit refuses, with lock.ErrQuotaExceeded, an acquire that could add
	// state past one of the node's limits; its other errors are Until's.
	Admit(ctx context.Context, cmd fsm.Command) error
	// Enqueue queues cmd for proposal in this term, after every command
	// queued before it; its errors are nodewire.ErrNotLeader and the
	// node's refusal of a command some member cannot read.
	Enqueue(cmd fsm.Command) (Pending, error)
	// Now reads the term's log clock.
	Now() time.Duration
	// Done is closed when the term ends.
	Done() <-chan struct{}
	// KeyState reads key from the node's state machine at the term's log
	// clock, and the log time it was read at.
	KeyState(key string) (fsm.KeyState, time.Duration)
	// SessionLive reports whether the node's state machine holds session
	// id live.
	SessionLive(id fsm.Owner) bool
}

// Pending waits for the result of a command Term.Enqueue queued: until it
// is applied, ctx ends (ctx's error) or the node closes
// (nodewire.ErrShuttingDown).
type Pending func(ctx context.Context) (fsm.Result, error)

// Config is what waiting needs of the node's settings (package cluster's
// Config names them) and clock.
type Config struct {
	RequestTimeout, ElectionTimeout time.Duration
	Log                             hclog.Logger
	// Monotonic reads the node's monotonic clock.
	Monotonic func() time.Duration
	// Closing is closed when the node starts closing.
	Closing <-chan struct{}
}

// Waiters is a node's waiting acquires: its own callers' (Acquire) and,
// while it leads, the ones parked at it (AtLeader). Its methods are safe
// for concurrent use.
type Waiters struct {
	cfg  Config
	node Node
	log  hclog.Logger
	// parked holds the waiting acquires parked at this node while it
	// leads (its own callers' and forwarded ones), answered when it
	// applies their grant or the end of their wait.
	parked *registry
	// local counts this node's callers blocked in a waiting Acquire.
	local atomic.Int64
}

// New makes a node's waiters. Its Deliver is the node's state machine's
// observer, so New comes before the state machine.
func New(cfg Config, node Node) *Waiters {
	return &Waiters{cfg: cfg, node: node, log: cfg.Log, parked: newRegistry(answerMemory(cfg.RequestTimeout), cfg.Monotonic)}
}

// Local counts this node's callers blocked in a waiting Acquire.
func (w *Waiters) Local() int { return int(w.local.Load()) }

// Deliver is the node's state machine's observer of the events of each
// applied entry: it runs inside Apply, so it never blocks.
func (w *Waiters) Deliver(ev fsm.Event) { w.parked.deliver(ev) }

// NewTerm forgets, as this node starts to lead, the grants it answered in
// an earlier term: their holds may have ended under other leaders.
func (w *Waiters) NewTerm() { w.parked.forgetAcked() }

// Released notes, as the leader queues owner's release of key, that a
// grant it answered to owner ends (see registry).
func (w *Waiters) Released(key string, owner fsm.Owner) { w.parked.forget(key, owner) }

// QueueAcquires calls queue, which queues cmds for proposal at the leader,
// so that a withdrawal of the same owner's waiter waits until the
// immediate acquires among them are answered (see registry). Call
// answered(i, res, err) with the answer of each cmds[i].
func (w *Waiters) QueueAcquires(cmds []fsm.Command, queue func()) (answered func(i int, res fsm.Result, err error)) {
	return w.parked.queueAcquires(cmds, queue)
}

// patience is how long a withdrawal (a cancel-wait) gets to commit, and a
// read after the wait ran out unanswered: not a whole RequestTimeout,
// since no leader answered.
func (w *Waiters) patience() time.Duration {
	return min(w.cfg.RequestTimeout, 2*w.cfg.ElectionTimeout)
}
