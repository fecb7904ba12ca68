package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/raftlock/raftlock/cluster/nodewire"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/transport"
)

// Command groups. The operations of one HTTP batch run concurrently, each
// on a goroutine of its own, and reach this node one by one over half a
// millisecond or more on a busy host: forwarded one by one, they reach the
// leader's proposer one by one too, and a batch's commands land in two or
// three raft entries, the batch's answer waiting for the last. A
// CommandGroup collects the first command of each of its members and sends
// them together, when the last member has sent one or finished without:
// to the leader in one forwarding message (nodewire.KindGroup), which queues them
// for proposal at once, so that they share one entry; on the leader
// straight into its proposal queue, at once. The members wait for the
// batch's answer anyway, so waiting for each other costs them nothing.
//
// Each member's command keeps its own meaning and retries: the group is
// only its first attempt's way to the leader, answered one reply per
// command, as if sent alone; a member whose grouped attempt fails (no
// leader, the leader replaced, the connection lost) sees that failure as
// its own attempt's and goes on alone by the rules of do. A leader too old
// to know nodewire.KindGroup refuses the message as a whole (before anything ran),
// and every member then sends its command alone.

// errGroupAbandoned: the group's exchange ended with the group's context,
// perhaps after the leader had its commands: their outcome is unknown.
var errGroupAbandoned = errors.New("cluster: the command group's exchange was abandoned")

// A CommandGroup sends the commands of concurrent callers to the leader
// together; see NewCommandGroup.
type CommandGroup struct {
	n   *Node
	ctx context.Context // bounds the group's exchange with the leader

	mu      sync.Mutex
	expect  int // members that have neither sent their command nor finished
	seats   []*groupSeat
	flushed bool
}

// groupSeat is one member's command, waiting for the group to go.
type groupSeat struct {
	cmd  fsm.Command
	done chan groupOutcome // one outcome; size one, so the sender never blocks
}

// groupOutcome is the outcome of one member's grouped attempt: as an
// attempt in do reports it, or alone when the member is to send its
// command on its own.
type groupOutcome struct {
	ans   nodewire.Answer
	err   error
	hint  string // a leader address from a "not leader" reply
	tried string // where the group went ("" when served here)
	alone bool
}

// groupMember is what a member's context carries.
type groupMember struct {
	g    *CommandGroup
	used atomic.Bool // its first request went through the group, or it finished
}

type groupMemberKey struct{}

// NewCommandGroup returns a group of size members: callers that will each
// run one operation on this node concurrently (an HTTP batch's operations).
// Each runs it with a context from Member, and calls the function Member
// returns when it is done. The first lock command each member sends (an
// acquire without wait, a release, an extend) waits until every member has
// sent one or finished, and they all go to the leader together. ctx bounds
// that exchange: it is the context of whatever the members serve. Exactly
// size callers take a Member each: one never taken would hold the others
// until their contexts end (then each withdraws its command, unsent).
func (n *Node) NewCommandGroup(ctx context.Context, size int) *CommandGroup {
	return &CommandGroup{n: n, ctx: ctx, expect: size}
}

// Member returns a member's context (derived from ctx) and the function it
// calls once done. A member that sent no command (its input was refused, or
// it sent something a group does not carry) no longer counts once done.
func (g *CommandGroup) Member(ctx context.Context) (context.Context, func()) {
	m := &groupMember{g: g}
	return context.WithValue(ctx, groupMemberKey{}, m), func() {
		if m.used.CompareAndSwap(false, true) {
			g.leave()
		}
	}
}

// groupable says whether cmd may travel in a group: the commands that
// answer without waiting for another caller.
func groupable(cmd fsm.Command) bool {
	switch cmd.Op {
	case fsm.OpAcquire, fsm.OpAcquireAll:
		return cmd.Wait <= 0
	case fsm.OpRelease, fsm.OpExtend:
		return true
	}
	return false
}

// groupSeatFor returns the group ctx's member belongs to when req is its
// first request and a command a group carries; nil otherwise. A member's
// first request that a group does not carry makes it leave the group.
func groupSeatFor(ctx context.Context, req nodewire.Request) *CommandGroup {
	m, _ := ctx.Value(groupMemberKey{}).(*groupMember)
	if m == nil || !m.used.CompareAndSwap(false, true) {
		return nil
	}
	if c, ok := req.(*nodewire.Command); ok && groupable(c.Cmd) {
		return m.g
	}
	m.g.leave()
	return nil
}

// leave drops a member that will send no command.
func (g *CommandGroup) leave() {
	g.mu.Lock()
	g.expect--
	g.unlockAndSendDue()
}

// unlockAndSendDue unlocks g.mu, which the caller holds, and sends the
// group when every member still expected has a seat, once.
func (g *CommandGroup) unlockAndSendDue() {
	var seats []*groupSeat
	if !g.flushed && g.expect <= len(g.seats) && len(g.seats) > 0 {
		g.flushed = true
		seats, g.seats = g.seats, nil
	}
	g.mu.Unlock()
	if seats != nil {
		go g.send(seats)
	}
}

// attempt is a member's first attempt at cmd: it waits for the group to
// go and returns this command's outcome. When ctx ends before the group
// went, the command is withdrawn (certainly not sent).
func (g *CommandGroup) attempt(ctx context.Context, cmd fsm.Command) groupOutcome {
	s := &groupSeat{cmd: cmd, done: make(chan groupOutcome, 1)}
	g.mu.Lock()
	if g.flushed {
		// Cannot happen (the group goes only once every member has a
		// seat or is done), but a member must never wait for nothing.
		g.mu.Unlock()
		return groupOutcome{alone: true}
	}
	g.seats = append(g.seats, s)
	g.unlockAndSendDue()
	select {
	case o := <-s.done:
		return o
	case <-ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(g.seats, s); i >= 0 {
		g.seats = slices.Delete(g.seats, i, i+1)
		g.expect--
		g.unlockAndSendDue()
		return groupOutcome{err: fmt.Errorf("%w: %w", transport.ErrNotSent, ctx.Err())}
	}
	g.mu.Unlock()
	// On its way: its outcome is unknown, as for a forwarded call cut short.
	return groupOutcome{err: ctx.Err()}
}

// send takes seats to the leader and tells each its outcome.
func (g *CommandGroup) send(seats []*groupSeat) {
	if len(seats) == 1 {
		seats[0].done <- groupOutcome{alone: true} // one command is sent as itself
		return
	}
	n := g.n
	// A message carries at most maxGroupCommands (which keeps it under the
	// transport's frame limit); the rest, if any, go alone.
	sent := seats[:min(len(seats), nodewire.MaxGroupCommands)]
	for _, s := range seats[len(sent):] {
		s.done <- groupOutcome{alone: true}
	}
	req := &nodewire.Group{Cmds: make([]fsm.Command, len(sent))}
	for i, s := range sent {
		req.Cmds[i] = s.cmd
	}
	tell := func(o groupOutcome) {
		for _, s := range sent {
			s.done <- o
		}
	}
	var ans nodewire.Answer
	var tried string
	if t := n.term.Load(); t != nil {
		var err error
		if ans, err = serve(g.ctx, n, t, req, nil); err != nil {
			tell(groupOutcome{err: err})
			return
		}
	} else {
		addr, raftLeader, err := n.leaderTarget("")
		if err != nil {
			tell(groupOutcome{err: err})
			return
		}
		tried = addr
		rep, err := n.callLeader(g.ctx, addr, raftLeader, nodewire.EncodeRequest(req), false, nil)
		if err == nil {
			err = rep.Err()
		}
		switch {
		case errors.Is(err, ErrBadRequest):
			// Refused as a whole before anything ran: a leader that does
			// not know nodewire.KindGroup. Each goes alone.
			tell(groupOutcome{alone: true})
			return
		case err != nil && g.ctx.Err() != nil:
			// Given up on with the members' common context: it may have
			// been sent, as a member's own call cut short by its context.
			tell(groupOutcome{err: fmt.Errorf("%w: %w", errGroupAbandoned, err), tried: addr})
			return
		case err != nil:
			tell(groupOutcome{err: err, hint: rep.Leader, tried: addr})
			return
		}
		ans = rep.Answer
	}
	ga, ok := ans.(*nodewire.GroupAnswer)
	if !ok || len(ga.Replies) != len(sent) {
		tell(groupOutcome{alone: true}) // not an answer to this group (a bug): nothing to read from it
		return
	}
	for i, s := range sent {
		r := ga.Replies[i]
		o := groupOutcome{ans: r.Answer, err: r.Err(), hint: r.Leader, tried: tried}
		if r.Code == nodewire.CodeOK {
			if _, ok := r.Answer.(*nodewire.CommandAnswer); !ok {
				o = groupOutcome{err: fmt.Errorf("%w: %v answer in a group reply", ErrBadRequest, r.Kind)}
			}
		}
		s.done <- o
	}
}
