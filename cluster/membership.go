package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/lock"
)

// join asks the members listed in Config.Join, in turn, to add this node as
// a voter. A member that does not lead answers with the leader's address,
// which join then asks directly. It retries with a growing pause until ctx ends.
//
// New calls it for a node whose data dir held no raft state, which says so
// (kindJoinEmpty): if the cluster still lists its ID (its data dir was
// emptied), the leader removes that member first. (Its log is no test:
// the leader may have replicated to it already.)
func (n *Node) join(ctx context.Context) error { return n.joinAs(ctx, kindJoinEmpty) }

func (n *Node) joinAs(ctx context.Context, kind requestKind) error {
	body, err := request{kind: kind, id: n.cfg.NodeID, addr: n.Addr()}.appendBinary(nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrJoin, err)
	}
	backoff := 50 * time.Millisecond
	var lastErr error
	for {
		for _, addr := range n.cfg.Join {
			// A member that does not lead points at the leader; follow at
			// most a few such hints, so two confused members cannot loop.
			for hops := 0; hops < 3 && addr != "" && addr != n.Addr(); hops++ {
				rep, err := n.call(ctx, addr, body)
				if err != nil {
					lastErr = fmt.Errorf("%s: %w", addr, err)
					break
				}
				switch rep.code {
				case codeOK:
					n.log.Info("joined cluster", "via", addr)
					return nil
				case codeNotLeader:
					lastErr = fmt.Errorf("%s: not the leader", addr)
					addr = rep.leader
					continue
				case codeBadRequest:
					if kind == kindJoinEmpty && strings.Contains(rep.msg, "request kind") {
						// A leader from before kindJoinEmpty: join as before.
						n.log.Warn("the leader does not know join-empty; joining without asking it to remove an old member of this ID", "leader", addr)
						kind = kindJoin
						body, _ = request{kind: kind, id: n.cfg.NodeID, addr: n.Addr()}.appendBinary(nil)
						continue
					}
					return fmt.Errorf("%w: %s refused: %s", ErrJoin, addr, rep.msg)
				default:
					lastErr = fmt.Errorf("%s: %s", addr, rep.msg)
				}
				break
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: no member of %v added this node (last error: %v)", ErrJoin, n.cfg.Join, lastErr)
		case <-n.closing:
			return fmt.Errorf("%w: node closed", ErrJoin)
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		}
	}
}

// rejoin runs when a node with existing state is given Join addresses: it
// asks to be added again, in the background and until it succeeds or the
// node closes. A node that left gracefully was removed from the
// configuration and would otherwise never be heard from again; for a node
// that is still a member, the request is a no-op. It must not block New: after
// a full-cluster restart no leader can exist until enough members are up.
func (n *Node) rejoin() {
	defer n.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := n.joinAs(ctx, kindJoin); err != nil && !n.closed() {
		n.log.Warn("rejoining the cluster failed", "error", err)
	}
}

// addMember runs on the leader for a joining node. It joins as a voter while
// fewer than Config.Voters voters exist, and as a non-voter otherwise (the
// voter keeper promotes it later if a voter goes). Adding a member that is
// already in the configuration at the same address is a no-op, so a join
// retried after an unknown outcome succeeds; at a new address (a restart on
// another port) its address is updated and its suffrage kept.
//
// empty says the joining node holds no raft state. A member of that ID then
// lost its log and its vote record (its data dir was emptied, as the
// refusal of a damaged log asks): still counted as a voter, it could vote
// for a candidate that lacks entries it had helped commit. It is removed
// first (committing the removal needs the other members to hold the whole
// log), then added again as a new server, as Consul does for a server that
// comes back with a new identity. A fresh join retried after an unknown
// outcome is removed and added again too: churn, not harm.
func (n *Node) addMember(ctx context.Context, id, addr string, empty bool) error {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return configChangeError(err)
	}
	if empty {
		for _, s := range cf.Configuration().Servers {
			if string(s.ID) == id {
				n.log.Warn("a member rejoins with an empty data dir: removing its old entry before adding it again", "id", id, "addr", addr)
				if err := n.waitFuture(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, 0)); err != nil {
					return configChangeError(err)
				}
				return n.addMember(ctx, id, addr, false)
			}
		}
	}
	voters := 0
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == id && string(s.Address) == addr {
			return nil
		}
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	if voters < n.cfg.Voters {
		n.log.Info("adding voter", "id", id, "addr", addr)
		return configChangeError(n.waitFuture(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0)))
	}
	n.log.Info("adding non-voter", "id", id, "addr", addr, "voters", voters)
	return configChangeError(n.waitFuture(ctx, n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0)))
}

// removeServer runs on the leader for a leaving node. Removing a server
// that is not a member is a no-op.
func (n *Node) removeServer(ctx context.Context, id string) error {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return configChangeError(err)
	}
	member := false
	for _, s := range cf.Configuration().Servers {
		member = member || string(s.ID) == id
	}
	if !member {
		return nil
	}
	n.log.Info("removing server", "id", id)
	if err := n.waitFuture(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, 0)); err != nil {
		return configChangeError(err)
	}
	// A voter that leaves is replaced at once, not at the next review.
	n.voters.wake()
	return nil
}

func configChangeError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return errNotLeader
	case errors.Is(err, raft.ErrLeadershipLost):
		return errLostLeadership
	case errors.Is(err, raft.ErrRaftShutdown):
		return errShuttingDown
	}
	return err
}

// Leave takes the node out of the cluster gracefully and closes it. A
// leader first hands leadership to another voter, so the cluster does not
// wait out an election timeout; then the leader removes this node from the
// configuration (a joint decision committed like any entry); then the node
// closes. The last member of a cluster just closes. If Leave fails the node
// is still open and still a member; Close it, or try again.
func (n *Node) Leave(ctx context.Context) error {
	if n.closed() {
		return fmt.Errorf("cluster: leave: %w", lock.ErrClosed)
	}
	servers, err := n.Servers()
	if err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	others := 0
	for id := range servers {
		if id != n.cfg.NodeID {
			others++
		}
	}
	if others > 0 {
		if n.IsLeader() {
			if err := n.waitFuture(ctx, n.raft.LeadershipTransfer()); err != nil {
				// The leader can still remove itself; raft then steps it down.
				n.log.Warn("leadership transfer before leaving failed", "error", err)
			}
		}
		if _, _, err := n.do(ctx, request{kind: kindRemove, id: n.cfg.NodeID}); err != nil {
			return fmt.Errorf("cluster: leave: %w", err)
		}
	}
	return n.Close()
}
