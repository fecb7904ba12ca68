package cluster

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/raftlock/raftlock/cluster/internal/membership"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/fsm"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// Proposal batching (group commit): one goroutine per term drains the queue
// into a single raft entry (up to 512 commands) and keeps up to two entries
// in flight; what arrives while they commit goes out together next. Under
// load one fsync carries many lock operations, local and forwarded alike.
// (More entries in flight measured slower: raft's leader writes each
// dispatch to its own disk before replicating it, so a third entry only
// splits batches.) One exception to "propose at once": while the queue holds
// nothing but acquires that will certainly be queued (they may wait, and
// the leader's state machine shows another owner holding the key), it is
// held back for up to 2ms. Under contention the holder's release arrives
// meanwhile and both share one entry, so a hand-off costs one commit rather
// than a commit stuck behind a waiter's own entry; the waiters lose nothing,
// since they would wait anyway.

// Proposal batching (group commit): the proposer drains everything queued
// into one raft entry, up to maxBatch commands, and keeps up to maxInflight
// entries between raft.Apply and their commit. While the entries in flight
// are being written and replicated, new commands pile up and go out together
// in the next entry, so under load one fsync carries many lock operations.
const (
	maxBatch    = 512
	maxInflight = 2
)

// Commands often arrive in bursts: the operations of one HTTP batch, or the
// clients a commit answered coming back with their next call, forwarded
// from a follower in one write and served by one goroutine each. The first
// of them to queue wakes the proposer, which would otherwise propose it
// alone while the rest are still on their way (runnable goroutines a yield
// away from queueing), so that a burst of n cost two or three entries and
// every caller of the batch waited for the last. Before it takes the queue,
// the proposer therefore yields the processor (gather) until two yields in
// a row add nothing, at most maxGatherYields times: each yield lets what
// is runnable queue. The two yields a lone caller pays cost about a
// microsecond, far less than any timer would; nothing waits on a guess.
const (
	maxGatherYields = 8
	gatherQuiet     = 2 // yields in a row that add nothing before taking
)

// maxDefer is how long the proposer may hold back a queue made only of
// acquires that will certainly wait (see allDeferrable). Under contention the
// holder's release follows within a fraction of a millisecond, and the two
// then share one entry: a hand-off costs one commit, not a commit queued
// behind a waiter's own entry. The waiters lose nothing: they would wait.
const maxDefer = 2 * time.Millisecond

// clockSync is how far the log time committed may lag the leader's log
// clock while any lease or wait is pending; see runExpiryTimer.
const clockSync = time.Second

// proposal is one command waiting for the leader to stamp, propose and apply it.
type proposal struct {
	cmd    fsm.Command
	queued time.Time // when propose queued it
	// done receives exactly one answer. Size one, so the proposer never
	// blocks on a caller that gave up.
	done chan proposalResult
}

type proposalResult struct {
	res fsm.Result
	err error // errNotLeader, errLostLeadership, errShuttingDown
}

// leaderTerm is this node's leadership, from raft telling it that it leads
// until raft telling it that it no longer does. It owns the log clock, the
// proposer and the expiry timer of that term.
type leaderTerm struct {
	n *Node

	ready      chan struct{} // closed once every earlier entry is applied and clock is set
	clock      *logClock     // set before ready closes
	readyIndex uint64        // raft's commit index when ready closed; set before ready closes

	stop    chan struct{} // closed when the term ends
	stopped sync.WaitGroup

	mu       sync.Mutex // protects queue, closed
	queue    []*proposal
	closed   bool
	enqueued chan struct{} // size one: "the queue is not empty"

	poke chan struct{} // size one: "the state machine applied something; recheck the next deadline"
}

func newLeaderTerm(n *Node) *leaderTerm {
	return &leaderTerm{
		n:        n,
		ready:    make(chan struct{}),
		stop:     make(chan struct{}),
		enqueued: make(chan struct{}, 1),
		poke:     make(chan struct{}, 1),
	}
}

// isReady reports whether the term's log clock runs (ready is closed).
func (t *leaderTerm) isReady() bool {
	select {
	case <-t.ready:
		return true
	default:
		return false
	}
}

func (t *leaderTerm) start() {
	t.stopped.Go(func() {
		if !t.becomeReady() {
			<-t.stop
			t.rejectQueued()
			return
		}
		t.stopped.Go(t.runExpiryTimer)
		t.stopped.Go(t.dropUnclaimedAfterGrace)
		t.runProposer()
	})
}

// end stops the term's goroutines and rejects every command not yet
// proposed with errNotLeader, which callers retry at the next leader.
// Commands already proposed are answered by raft (ErrLeadershipLost).
func (t *leaderTerm) end() {
	close(t.stop)
	t.stopped.Wait()
}

// becomeReady waits until every entry committed in earlier terms is applied
// (a barrier), then starts the log clock at the machine's log time plus
// the real time this node measured since it applied the last stamp, when it
// did (stateMachine.clockBase). Until then nothing is stamped: a stamp from
// a clock not yet past every applied stamp would be harmless (the machine
// keeps the max) but the remaining times answered from it would overstate.
func (t *leaderTerm) becomeReady() bool {
	n := t.n
	if !t.untilApplied("leadership barrier", func() raft.Future { return n.raft.Barrier(0) }) {
		return false
	}
	logTime := n.sm.now()
	// The clock starts before the term's first entry, new-term, which it
	// stamps: measured from the last stamp applied, and not from that entry's
	// own apply, which would throw the measurement away.
	t.clock = newLogClock(n.clock, n.sm.clockBase(n.clock.Monotonic()))
	if !t.startEpoch() {
		return false
	}
	// Every entry after the barrier is a command or configuration entry,
	// which the state machine counts, so reads may treat everything up to
	// here as applied (see readAtLeader).
	t.readyIndex = n.raft.CommitIndex()
	close(t.ready)
	clockTime := t.clock.now()
	n.log.Info("leading", "term", n.raft.CurrentTerm(), "log_time", clockTime, "counted_since_last_stamp", clockTime-logTime)
	n.leaderChanged.Fire()
	return true
}

// propose queues cmd and waits for its result. It never blocks past ctx,
// the node's closing, or the term's end (before cmd was proposed).
func (t *leaderTerm) propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	p, err := t.enqueue(cmd)
	if err != nil {
		return fsm.Result{}, err
	}
	return t.await(ctx, p)
}

// enqueue queues cmd for proposal without waiting: commands are proposed
// in the order they were queued. Its errors are errNotLeader, and
// ErrMemberTooOld for a command some member cannot read (levels.go).
func (t *leaderTerm) enqueue(cmd fsm.Command) (*proposal, error) {
	if err := t.n.admitLevel(cmd); err != nil {
		return nil, err
	}
	p := newProposal(cmd, time.Now())
	if !t.push(p) {
		return nil, errNotLeader
	}
	return p, nil
}

func newProposal(cmd fsm.Command, queued time.Time) *proposal {
	return &proposal{cmd: cmd, queued: queued, done: make(chan proposalResult, 1)}
}

// push appends ps to the queue at once and wakes the proposer; false,
// queueing nothing, once the term is closed.
func (t *leaderTerm) push(ps ...*proposal) bool {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return false
	}
	t.queue = append(t.queue, ps...)
	t.mu.Unlock()
	select {
	case t.enqueued <- struct{}{}:
	default:
	}
	return true
}

// await waits for the result of an enqueued proposal.
func (t *leaderTerm) await(ctx context.Context, p *proposal) (fsm.Result, error) {
	select {
	case r := <-p.done:
		return r.res, r.err
	case <-ctx.Done():
		return fsm.Result{}, ctx.Err()
	case <-t.n.closing:
		return fsm.Result{}, errShuttingDown
	}
}

// take removes the next batch from the queue. It returns none, and how long
// to hold back, while the queue holds only acquires that will certainly
// wait and the oldest has waited less than maxDefer.
func (t *leaderTerm) take() ([]*proposal, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.queue) > 0 {
		if hold := maxDefer - time.Since(t.queue[0].queued); hold > 0 && t.allDeferrable() {
			return nil, hold
		}
	}
	n := min(len(t.queue), maxBatch)
	batch := t.queue[:n:n]
	t.queue = t.queue[n:]
	if len(t.queue) == 0 {
		t.queue = nil // let the backing array go
	} else {
		select {
		case t.enqueued <- struct{}{}:
		default:
		}
	}
	return batch, 0
}

// gather yields the processor so that commands already on their way (their
// goroutines runnable) join the queue before the proposer takes it: until
// gatherQuiet yields in a row leave the queue as it was, or
// maxGatherYields. See maxGatherYields.
func (t *leaderTerm) gather() {
	n, quiet := t.queued(), 0
	for range maxGatherYields {
		runtime.Gosched()
		m := t.queued()
		if m == n {
			if quiet++; quiet == gatherQuiet {
				return
			}
			continue
		}
		n, quiet = m, 0
		if n >= maxBatch {
			return // a full entry is waiting anyway
		}
	}
}

// queued is the queue's length.
func (t *leaderTerm) queued() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue)
}

// allDeferrable reports whether every queued command is an acquire that may
// wait for a key another owner holds now, by the leader's state machine:
// one whose answer would be "queued". Holding such commands back a little
// delays only their place in the queue, never an answer anyone waits for
// (and if the key is freed meanwhile, the acquire is granted a little later,
// which is a legal order too). Caller holds t.mu.
func (t *leaderTerm) allDeferrable() bool {
	for _, p := range t.queue {
		c := p.cmd
		if c.Op != fsm.OpAcquire || c.Wait <= 0 {
			return false
		}
		if st, _ := t.n.sm.lookup(c.Key, 0); !st.Held || st.Owner == c.Owner {
			return false
		}
	}
	return true
}

func (t *leaderTerm) rejectQueued() {
	t.mu.Lock()
	t.closed = true
	rest := t.queue
	t.queue = nil
	t.mu.Unlock()
	for _, p := range rest {
		p.done <- proposalResult{err: errNotLeader}
	}
}

// runProposer is the only goroutine that stamps and proposes in this term,
// so stamps are non-decreasing in log order.
func (t *leaderTerm) runProposer() {
	defer t.rejectQueued()
	slots := make(chan struct{}, maxInflight)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	var buf []byte
	var cmds []fsm.Command
	held := time.NewTimer(time.Hour) // fires when a held-back queue is due
	held.Stop()
	defer held.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-t.enqueued:
		case <-held.C:
		}
		select {
		case <-t.stop:
			return
		case slots <- struct{}{}:
		}
		t.gather()
		batch, hold := t.take()
		if len(batch) == 0 {
			<-slots
			if hold > 0 {
				held.Reset(hold)
			}
			continue
		}
		stamp := t.clock.now()
		cmds = cmds[:0]
		for _, p := range batch {
			c := p.cmd
			c.Stamp = stamp
			cmds = append(cmds, c)
		}
		t.n.proposalSizes.observe(len(cmds))
		var err error
		buf, err = fsm.AppendBatch(buf[:0], cmds)
		if err != nil {
			// Commands are validated before they are queued; this is a bug.
			t.n.log.Error("encoding batch", "error", err, "what_to_do", "a bug: report it; the commands of the batch were refused")
			for _, p := range batch {
				p.done <- proposalResult{res: fsm.Result{Status: fsm.StatusInvalid, Now: stamp}}
			}
			<-slots
			continue
		}
		// raft keeps the slice until it is written; give it its own copy.
		proposed := time.Now()
		f := t.n.raft.Apply(append([]byte(nil), buf...), 0)
		inflight.Go(func() {
			defer func() { <-slots }()
			if answer(batch, f, t.n.closing) == nil {
				t.n.commits.observe(time.Since(proposed))
			}
		})
	}
}

// answer waits for one proposed entry and answers each of its commands. It
// returns raft's error for the entry (nil once it was applied).
//
// raft does not answer an entry that was committed but not yet applied when
// it shut down, so the wait also ends when the node closes; the goroutine
// left waiting on such a future is the price of not hanging Close.
func answer(batch []*proposal, f raft.ApplyFuture, closing <-chan struct{}) error {
	var (
		results []fsm.Result
		invalid bool // applied, but not as the batch we sent (a bug)
	)
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	var err error
	select {
	case err = <-errc:
	case <-closing:
		err = raft.ErrRaftShutdown
	}
	if err == nil {
		results, _ = f.Response().([]fsm.Result)
		invalid = len(results) != len(batch)
	}
	for i, p := range batch {
		switch {
		case err != nil:
			p.done <- proposalResult{err: classifyApplyError(err)}
		case invalid:
			p.done <- proposalResult{res: fsm.Result{Status: fsm.StatusInvalid}}
		default:
			p.done <- proposalResult{res: results[i]}
		}
	}
	return err
}

// classifyApplyError sorts raft's answers into the retry classes: rejected
// before the entry reached the log (safe to retry anywhere), or proposed
// with an unknown outcome.
func classifyApplyError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrAbortedByRestore):
		return errNotLeader
	case errors.Is(err, raft.ErrRaftShutdown):
		return errShuttingDown
	default: // raft.ErrLeadershipLost and anything unexpected
		return errLostLeadership
	}
}

// runExpiryTimer proposes a tick when the machine's next deadline (a lease
// end or a waiter's wait deadline) is due on the log clock, so an expired
// lock passes to its next waiter with nobody polling; and, while anything
// is pending, at least every clockSync.
func (t *leaderTerm) runExpiryTimer() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	tickDone := make(chan struct{}, 1)
	ticking := false
	for first := true; ; first = false {
		// The first pass needs no signal: deadlines of the previous term may
		// be due already, with nothing being applied to poke us.
		if !first {
			select {
			case <-t.stop:
				return
			case <-t.poke:
			case <-timer.C:
			case <-tickDone:
				ticking = false
			}
		}
		at, ok := t.n.sm.nextDeadline()
		if !ok {
			timer.Stop()
			continue
		}
		// While anything is pending, keep the committed log time within
		// clockSync of the leader's clock: a new leader starts its clock
		// from the last committed stamp, so this bounds how much a leader
		// change can lengthen a lease.
		at = min(at, t.n.sm.now()+clockSync)
		if wait := t.clock.until(at); wait > 0 {
			timer.Reset(wait)
			continue
		}
		if ticking {
			continue // the tick in flight will poke when applied
		}
		ticking = true
		go func() {
			ctx, cancel := t.context()
			defer cancel()
			if _, err := t.propose(ctx, fsm.Command{Op: fsm.OpTick}); err != nil {
				t.n.log.Debug("tick", "error", err)
			}
			tickDone <- struct{}{}
		}()
	}
}

// context is for the term's own commands (ticks, drop-unclaimed): bounded
// by RequestTimeout, and ended with the term.
func (t *leaderTerm) context() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), t.n.cfg.RequestTimeout)
	go func() {
		select {
		case <-t.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (t *leaderTerm) pokeExpiryTimer() {
	select {
	case t.poke <- struct{}{}:
	default:
	}
}

// enqueueAll queues cmds for proposal at once, in order, so that they
// share an entry (unless the proposer has a full entry's worth queued).
// errs[i] is cmds[i]'s refusal (as enqueue's), ps[i] its proposal otherwise.
func (t *leaderTerm) enqueueAll(cmds []fsm.Command) (ps []*proposal, errs []error) {
	ps, errs = make([]*proposal, len(cmds)), make([]error, len(cmds))
	admitted := make([]*proposal, 0, len(cmds))
	now := time.Now()
	for i, cmd := range cmds {
		if errs[i] = t.n.admitLevel(cmd); errs[i] == nil {
			ps[i] = newProposal(cmd, now)
			admitted = append(admitted, ps[i])
		}
	}
	if !t.push(admitted...) {
		for i := range ps {
			if ps[i] != nil {
				ps[i], errs[i] = nil, errNotLeader
			}
		}
	}
	return ps, errs
}

// Claims (see "claims" in package waiting): a new term's first command is
// new-term (startEpoch), and the waiters of earlier terms that nobody claims
// again are dropped after a grace (dropUnclaimedAfterGrace).

// unclaimedGrace is how long, in election timeouts, a new leader leaves the
// waiters of earlier terms queued for their callers to claim them again
// before it drops the rest. Callers send again as soon as they see the new
// leader's term ready; a few election timeouts cover a slow follower.
const unclaimedGrace = 4

// startEpoch proposes the term's first command, OpNewTerm, and waits until
// it is applied: from then on a waiter queued in an earlier term is granted
// only once its caller has claimed it again. It returns false when the term
// ends first.
func (t *leaderTerm) startEpoch() bool {
	n := t.n
	return t.untilApplied("new-term entry", func() raft.Future {
		// Stamped by the term's clock, already running, like every command
		// after it: stamps stay non-decreasing in log order.
		body, err := fsm.AppendBatch(nil, []fsm.Command{{Op: fsm.OpNewTerm, Stamp: t.clock.now()}})
		if err != nil {
			n.log.Error("encoding new-term", "error", err, "what_to_do", "a bug: report it")
			return nil
		}
		return n.raft.Apply(body, 0)
	})
}

// untilApplied waits for the entry of raft's future that start returns (nil:
// give up), again with a new one after each failure, until one is applied
// (true) or the term ends (false). A failure is lost leadership (the term is
// about to end) or a leadership transfer in progress (it may fail, and we
// keep leading): it tries again until one or the other is settled.
func (t *leaderTerm) untilApplied(what string, start func() raft.Future) bool {
	for {
		f := start()
		if f == nil {
			return false
		}
		err := membership.WaitFuture(context.Background(), f, t.stop)
		if err == nil {
			return true
		}
		if errors.Is(err, nodewire.ErrShuttingDown) { // t.stop: the term ended
			return false
		}
		t.n.log.Debug(what+" failed", "error", err)
		select {
		case <-t.stop:
			return false
		case <-time.After(t.n.cfg.CommitTimeout):
		}
	}
}

// dropUnclaimedAfterGrace drops, once the grace has passed, the waiters of
// earlier terms that nobody claimed again: their callers are gone, and
// they should not count in queues until their wait deadlines.
func (t *leaderTerm) dropUnclaimedAfterGrace() {
	n := t.n
	timer := time.NewTimer(unclaimedGrace * n.cfg.ElectionTimeout)
	defer timer.Stop()
	select {
	case <-t.stop:
		return
	case <-timer.C:
	}
	if n.sm.unclaimed() == 0 {
		return
	}
	ctx, cancel := t.context()
	defer cancel()
	res, err := t.propose(ctx, fsm.Command{Op: fsm.OpDropUnclaimed})
	if err != nil {
		n.log.Debug("drop-unclaimed", "error", err)
		return
	}
	n.log.Info("dropped waiters that nobody claimed after the leader change", "waiters", res.Waiters)
}
