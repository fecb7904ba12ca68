package cluster

import (
	"context"
	"fmt"

	"github.com/raftlock/raftlock/cluster/internal/membership"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/fsm"
	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
)

// How this node serves the node RPC (package nodewire holds its bytes): a
// line per request kind, saying whether any node serves it (or only the
// leader), how a request of another node is admitted, and how it is
// served. To add a kind: its types in nodewire, then its line here.

// kindServer is how this node serves one request kind.
type kindServer struct {
	anyNode bool // any node serves it; the other kinds only the leader
	// admit checks a request that came from another node, and bounds what
	// it asks to what one reply carries. (A request made on this node was
	// checked where it entered it: lock's Validate methods.)
	admit func(req nodewire.Request) error
	// serve answers the request on n; t is n's term while it leads. Kinds
	// served only by the leader get a t; the others may get nil. Its errors
	// are answered as nodewire.CodeFor says. The answer goes into into when
	// into is of the kind's answer type (a fresh answer otherwise): a
	// caller that keeps room for it, beside its request, spares an
	// allocation.
	serve func(ctx context.Context, n *Node, t *leaderTerm, req nodewire.Request, into nodewire.Answer) (nodewire.Answer, error)
}

// servers is the one table of the request kinds this node serves. A kind
// it lacks is refused as bad, as a node of a build without it refuses it.
var servers = map[nodewire.Kind]kindServer{
	nodewire.KindCommand:     served(false, admitCommand, serveCommand),
	nodewire.KindRead:        served(false, admitRead, serveRead),
	nodewire.KindJoin:        served(false, admitJoin, serveJoin),
	nodewire.KindJoinEmpty:   served(false, admitJoin, serveJoin),
	nodewire.KindRemove:      served(false, admitRemove, serveRemove),
	nodewire.KindList:        served(false, admitList, serveList),
	nodewire.KindInfo:        served(true, admitInfo, serveInfo),
	nodewire.KindWaitAcquire: served(false, admitWaitAcquire, serveWaitAcquire),
	nodewire.KindIdentity:    served(true, admitIdentity, serveIdentity),
	nodewire.KindSessionRead: served(false, admitSessionRead, serveSessionRead),
	nodewire.KindServerStats: served(true, admitServerStats, serveServerStats),
	nodewire.KindGroup:       served(false, admitGroup, serveGroup),
}

// served makes the line of a kind whose requests are R and answers A.
func served[R nodewire.Request, A any, P interface {
	*A
	nodewire.Answer
}](anyNode bool, admit func(R) error, serve func(context.Context, *Node, *leaderTerm, R) (A, error)) kindServer {
	return kindServer{
		anyNode: anyNode,
		admit: func(req nodewire.Request) error {
			r, ok := req.(R)
			if !ok {
				return fmt.Errorf("%w: %v request of type %T", ErrBadRequest, req.Kind(), req)
			}
			return admit(r)
		},
		serve: func(ctx context.Context, n *Node, t *leaderTerm, req nodewire.Request, into nodewire.Answer) (nodewire.Answer, error) {
			r, ok := req.(R)
			if !ok {
				return nil, fmt.Errorf("%w: %v request of type %T", ErrBadRequest, req.Kind(), req)
			}
			a, err := serve(ctx, n, t, r)
			if err != nil {
				return nil, err
			}
			p, ok := into.(P)
			if !ok {
				p = new(A)
			}
			*p = a
			return p, nil
		},
	}
}

// admit checks a request of another node (see kindServer.admit).
func admit(req nodewire.Request) error {
	s, ok := servers[req.Kind()]
	if !ok {
		return fmt.Errorf("%w: bad request kind %d", ErrBadRequest, byte(req.Kind()))
	}
	return s.admit(req)
}

// admitCommand lets through the client commands (acquire, release, extend,
// cancel-wait, force-release, and the session ops), unstamped (only the leader stamps; the
// term's own commands are never forwarded). Decoding checked the command's
// limits.
func admitCommand(r *nodewire.Command) error {
	switch r.Cmd.Op {
	case fsm.OpAcquire, fsm.OpRelease, fsm.OpExtend, fsm.OpCancelWait, fsm.OpForceRelease,
		fsm.OpSessionCreate, fsm.OpSessionRenew, fsm.OpSessionDestroy, fsm.OpAcquireAll:
	default:
		return fmt.Errorf("%w: %v may not be forwarded", ErrBadRequest, r.Cmd.Op)
	}
	if r.Cmd.Stamp != 0 {
		return fmt.Errorf("%w: forwarded command carries a stamp", ErrBadRequest)
	}
	return nil
}

func serveCommand(ctx context.Context, n *Node, t *leaderTerm, r *nodewire.Command) (nodewire.CommandAnswer, error) {
	if r.Cmd.Op == fsm.OpCancelWait {
		res, err := n.waiters.CancelWait(ctx, t, r.Cmd) // see package waiting
		return nodewire.CommandAnswer{Res: res}, err
	}
	if err := n.admitQuota(ctx, t, r.Cmd); err != nil {
		return nodewire.CommandAnswer{}, err // see quota.go
	}
	if r.Cmd.Op == fsm.OpRelease {
		n.waiters.Released(r.Cmd.Key, r.Cmd.Owner)
	}
	var (
		p   *proposal
		err error
	)
	answeredAcquire := n.waiters.QueueAcquires([]fsm.Command{r.Cmd}, func() { p, err = t.enqueue(r.Cmd) })
	res := fsm.Result{}
	if err == nil {
		res, err = t.await(ctx, p)
	}
	answeredAcquire(0, res, err)
	return nodewire.CommandAnswer{Res: res}, err
}

func admitWaitAcquire(r *nodewire.WaitAcquire) error {
	if (r.Cmd.Op != fsm.OpAcquire && r.Cmd.Op != fsm.OpAcquireAll) || r.Cmd.Wait <= 0 {
		return fmt.Errorf("%w: a waiting acquire must be an acquire with a wait", ErrBadRequest)
	}
	return admitCommand(&r.Command)
}

func serveWaitAcquire(ctx context.Context, n *Node, t *leaderTerm, r *nodewire.WaitAcquire) (nodewire.WaitAnswer, error) {
	return n.waiters.AtLeader(ctx, t, r.Cmd, n.clock.Monotonic())
}

func admitRead(r *nodewire.Read) error {
	if err := lock.ValidateKey(r.Key); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if r.WithOwner && r.Owner.IsZero() {
		return fmt.Errorf("%w: zero owner", ErrBadRequest)
	}
	return nil
}

func serveRead(ctx context.Context, n *Node, t *leaderTerm, r *nodewire.Read) (nodewire.ReadResult, error) {
	return n.readAtLeader(ctx, t, r)
}

// admitList also bounds a forwarded listing to a page that fits a frame: a
// longer one is paged (more).
func admitList(r *nodewire.List) error {
	if err := (lock.ListRequest{Prefix: r.Prefix, After: r.After, Limit: r.Limit}).Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if r.Limit == 0 || r.Limit > nodewire.MaxListPage {
		r.Limit = nodewire.MaxListPage
	}
	return nil
}

func serveList(ctx context.Context, n *Node, t *leaderTerm, r *nodewire.List) (nodewire.ListPage, error) {
	return n.listAtLeader(ctx, t, r)
}

func admitJoin(r *nodewire.Join) error {
	if r.ID == "" || r.Addr == "" {
		return fmt.Errorf("%w: join needs an id and an address", ErrBadRequest)
	}
	return nodeIDRequestError("join", r.ID)
}

// nodeIDRequestError checks the node ID a request of another node carries.
func nodeIDRequestError(what, id string) error {
	if err := nodewire.CheckNodeID(id); err != nil {
		return fmt.Errorf("%w: %s from node ID %q, which %v", ErrBadRequest, what, id, err)
	}
	return nil
}

func serveJoin(ctx context.Context, n *Node, _ *leaderTerm, r *nodewire.Join) (nodewire.NoAnswer, error) {
	c := membership.Candidate{ID: raft.ServerID(r.ID), Addr: raft.ServerAddress(r.Addr), ClusterID: r.ClusterID, Fresh: r.Empty}
	return nodewire.NoAnswer{}, n.membership.AddMember(ctx, c)
}

func admitRemove(r *nodewire.Remove) error {
	if r.ID == "" {
		return fmt.Errorf("%w: remove needs an id", ErrBadRequest)
	}
	return nil
}

func serveRemove(ctx context.Context, n *Node, _ *leaderTerm, r *nodewire.Remove) (nodewire.NoAnswer, error) {
	return nodewire.NoAnswer{}, n.membership.RemoveServer(ctx, r.ID)
}

func admitInfo(r *nodewire.Info) error { return nodeIDRequestError("info", r.ID) }

func serveInfo(_ context.Context, n *Node, _ *leaderTerm, r *nodewire.Info) (nodewire.Info, error) {
	n.membership.HeardFrom(r.ID, r.APIAddr, r.Level, r.Version)
	ans := nodewire.Info{ID: n.cfg.NodeID, APIAddr: n.cfg.APIAddr}
	if r.HasLevel() || r.Version != "" {
		ans.Level = n.levels.max
	}
	if r.Version != "" {
		ans.Version = n.version
	}
	return ans, nil
}

func admitIdentity(r *nodewire.Identity) error { return nodeIDRequestError("identity", r.ID) }

func serveIdentity(_ context.Context, n *Node, _ *leaderTerm, r *nodewire.Identity) (nodewire.Identity, error) {
	return *n.membership.IdentityReply(r), nil
}

func admitSessionRead(r *nodewire.SessionRead) error {
	if r.Session.IsZero() {
		return fmt.Errorf("%w: zero session", ErrBadRequest)
	}
	return nil
}

func admitServerStats(r *nodewire.ServerStatsRequest) error {
	if r.ID == "" {
		return fmt.Errorf("%w: server stats needs the asking leader's id", ErrBadRequest)
	}
	return nil
}

func serveSessionRead(ctx context.Context, n *Node, t *leaderTerm, r *nodewire.SessionRead) (nodewire.SessionResult, error) {
	if err := n.readIndex(ctx, t); err != nil {
		return nodewire.SessionResult{}, err
	}
	return n.sm.session(r.Session, t.clock.now()), nil
}

func serveServerStats(_ context.Context, n *Node, _ *leaderTerm, r *nodewire.ServerStatsRequest) (nodewire.ServerStats, error) {
	n.membership.HeardFromLeader(r)
	return n.membership.OwnServerStats(), nil
}

// admitGroup lets through the commands a group carries (groupable), each as
// admitCommand admits it.
func admitGroup(r *nodewire.Group) error {
	for i, c := range r.Cmds {
		if !groupable(c) {
			return fmt.Errorf("%w: group command %d: %v (wait %v) does not travel in a group", ErrBadRequest, i, c.Op, c.Wait)
		}
		if err := admitCommand(&nodewire.Command{Cmd: c}); err != nil {
			return fmt.Errorf("group command %d: %w", i, err)
		}
	}
	return nil
}

// serveGroup checks each command's quota, queues every admitted command for
// proposal at once (so that they share an entry), and answers each with
// the reply it would have had alone.
func serveGroup(ctx context.Context, n *Node, t *leaderTerm, r *nodewire.Group) (nodewire.GroupAnswer, error) {
	ans := nodewire.GroupAnswer{Replies: make([]nodewire.Reply, len(r.Cmds))}
	queued := make([]int, 0, len(r.Cmds)) // the index of each admitted command
	cmds := make([]fsm.Command, 0, len(r.Cmds))
	for i, c := range r.Cmds {
		if err := n.admitQuota(ctx, t, c); err != nil {
			ans.Replies[i] = n.errorReply(nodewire.KindCommand, err)
			continue
		}
		if c.Op == fsm.OpRelease {
			n.waiters.Released(c.Key, c.Owner)
		}
		queued = append(queued, i)
		cmds = append(cmds, c)
	}
	var (
		ps   []*proposal
		errs []error
	)
	answeredAcquire := n.waiters.QueueAcquires(cmds, func() { ps, errs = t.enqueueAll(cmds) })
	for j, i := range queued {
		res, err := fsm.Result{}, errs[j]
		if err == nil {
			res, err = t.await(ctx, ps[j])
		}
		answeredAcquire(j, res, err)
		if err != nil {
			ans.Replies[i] = n.errorReply(nodewire.KindCommand, err)
		} else {
			ans.Replies[i] = nodewire.Reply{Code: nodewire.CodeOK, Kind: nodewire.KindCommand, Answer: &nodewire.CommandAnswer{Res: res}}
		}
	}
	return ans, nil
}

// serve answers a request on n (see kindServer.serve): one forwarded by
// another node, or one of n's own while it leads.
func serve(ctx context.Context, n *Node, t *leaderTerm, req nodewire.Request, into nodewire.Answer) (nodewire.Answer, error) {
	s, ok := servers[req.Kind()]
	if !ok {
		return nil, fmt.Errorf("%w: bad request kind %d", ErrBadRequest, byte(req.Kind()))
	}
	return s.serve(ctx, n, t, req, into)
}
