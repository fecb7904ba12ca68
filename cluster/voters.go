package cluster

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Membership: a bounded number of voters.
//
// Join asks the listed addresses in turn to add this node; a member that
// does not lead answers with the leader's address and Join asks that one. The
// leader adds it as a voter while fewer than Config.Voters (3 by default)
// voters exist, and as a non-voter otherwise. Non-voters replicate every
// lock, serve and forward calls like any node, but do not vote or acknowledge commits, so embedding a node in 30 replicas
// of a service keeps a 3-voter quorum and 3 fsyncs per commit.
//
// Every node runs a voter keeper; only the leader's acts. It learns from
// raft's heartbeat observations which members stop answering. A voter that
// leaves is replaced at once; a voter that has missed heartbeats for
// DeadVoterTimeout (30s) is replaced by a reachable non-voter (lowest ID
// first, so the choice is deterministic) and then demoted, never before its
// replacement votes, so the count of live voters never drops on the keeper's
// account. A demoted member that returns stays a non-voter until a voter is
// needed. Members named in Peers at bootstrap are all voters, however many.
//
// A non-voter (or demoted voter) that misses heartbeats for
// DeadMemberTimeout (72h, like Consul's reconnect_timeout) is removed from
// the configuration: replicas of a service that crash rather than leave and
// come back under new names would otherwise stay members forever, each a
// replication stream the leader keeps trying. Otherwise members are removed
// only when they leave gracefully; this is the one exception, and it never
// touches a voter. A removed member that returns asks to join again (see
// "Starting, restarting, stopping" in node.go), and is added as a non-voter.

// voterCheckInterval is how often the leader reviews its voters even when
// raft reports nothing: a voter's death is known only by time passing.
const voterCheckInterval = time.Second

// voterKeeper is the leader's view of which members answer its heartbeats,
// and the loop that keeps Config.Voters of the answering ones voting.
// Every node runs the loop; only the leader acts.
type voterKeeper struct {
	mu      sync.Mutex                      // protects failing
	failing map[raft.ServerID]time.Duration // Monotonic reading of the first missed heartbeat in a row

	poke chan struct{} // size one: "review the voters now"
}

func newVoterKeeper() *voterKeeper {
	return &voterKeeper{failing: make(map[raft.ServerID]time.Duration), poke: make(chan struct{}, 1)}
}

func (k *voterKeeper) wake() {
	select {
	case k.poke <- struct{}{}:
	default:
	}
}

// startVoterKeeper registers for raft's heartbeat observations and starts
// the review loop; it stops when the node closes.
func (n *Node) startVoterKeeper() {
	observations := make(chan raft.Observation, 64)
	observer := raft.NewObserver(observations, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.PeerObservation:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(observer)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.raft.DeregisterObserver(observer)
		n.keepVoters(observations)
	}()
}

func (n *Node) keepVoters(observations <-chan raft.Observation) {
	k := n.voters
	ticker := time.NewTicker(voterCheckInterval)
	defer ticker.Stop()
	for {
		select {
		case <-n.closing:
			return
		case o := <-observations:
			k.mu.Lock()
			switch o := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				if _, ok := k.failing[o.PeerID]; !ok {
					k.failing[o.PeerID] = n.clock.Monotonic()
				}
			case raft.ResumedHeartbeatObservation:
				delete(k.failing, o.PeerID)
			case raft.PeerObservation:
				// Replication to it starts or stops: a new stream has
				// missed nothing yet, and a member that was removed and
				// joins again must not inherit its old count.
				delete(k.failing, o.Peer.ID)
			}
			k.mu.Unlock()
			continue
		case <-ticker.C:
		case <-k.poke:
		}
		if !n.IsLeader() {
			// A new leader learns afresh who answers it.
			k.mu.Lock()
			clear(k.failing)
			k.mu.Unlock()
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout)
		if err := n.reviewVoters(ctx); err != nil && !n.closed() {
			n.log.Debug("reviewing voters", "error", err)
		}
		cancel()
	}
}

// reviewVoters, on the leader, promotes reachable non-voters while fewer
// than Config.Voters live voters remain, then demotes the voters that have
// been unreachable for DeadVoterTimeout, but only once enough live voters
// stand without them, and removes the non-voters unreachable for
// DeadMemberTimeout. Non-voters are promoted in ID order, so the choice
// does not depend on map order or timing.
func (n *Node) reviewVoters(ctx context.Context) error {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	now := n.clock.Monotonic()
	n.voters.mu.Lock()
	missing := func(id raft.ServerID) (since time.Duration, ok bool) {
		since, ok = n.voters.failing[id]
		return since, ok
	}
	var live, dead, gone []raft.ServerID
	var candidates []raft.Server
	servers := cf.Configuration().Servers
	for id := range n.voters.failing {
		// A failure observed after the member left (its stream stopping)
		// must not count against it should it join again.
		if !slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == id }) {
			delete(n.voters.failing, id)
		}
	}
	for _, s := range servers {
		since, failing := missing(s.ID)
		switch {
		case s.Suffrage == raft.Voter && failing && now-since >= n.cfg.DeadVoterTimeout && string(s.ID) != n.cfg.NodeID:
			dead = append(dead, s.ID)
		case s.Suffrage == raft.Voter:
			live = append(live, s.ID)
		case !failing:
			candidates = append(candidates, s)
		case now-since >= n.cfg.DeadMemberTimeout:
			gone = append(gone, s.ID)
		}
	}
	n.voters.mu.Unlock()
	slices.SortFunc(candidates, func(a, b raft.Server) int { return cmp.Compare(a.ID, b.ID) })

	for len(live) < n.cfg.Voters && len(candidates) > 0 {
		c := candidates[0]
		candidates = candidates[1:]
		n.log.Info("promoting non-voter", "id", c.ID, "voters", len(live), "target", n.cfg.Voters)
		if err := n.waitFuture(ctx, n.raft.AddVoter(c.ID, c.Address, 0, 0)); err != nil {
			return configChangeError(err)
		}
		live = append(live, c.ID)
	}
	for _, id := range dead {
		if len(live) < n.cfg.Voters {
			break // keep it: demoting would leave fewer voters than wanted
		}
		n.log.Warn("demoting unreachable voter; a non-voter takes its vote", "id", id, "timeout", n.cfg.DeadVoterTimeout,
			"what_to_do", "start that member again: it comes back as a non-voter")
		if err := n.waitFuture(ctx, n.raft.DemoteVoter(id, 0, 0)); err != nil {
			return configChangeError(err)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		n.log.Warn("removing unreachable non-voter", "id", id, "timeout", n.cfg.DeadMemberTimeout,
			"what_to_do", "nothing, if it is gone for good; started again on its data dir, it asks to be added back")
		if err := n.waitFuture(ctx, n.raft.RemoveServer(id, 0, 0)); err != nil {
			return configChangeError(err)
		}
		n.voters.mu.Lock()
		delete(n.voters.failing, id)
		n.voters.mu.Unlock()
	}
	return nil
}
