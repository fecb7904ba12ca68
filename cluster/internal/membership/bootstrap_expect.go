package membership

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/serf/serf"

	raft "github.com/raftlock/raftlock/internal/raft"
)

// BootstrapExpect: N nodes started with the same flags form one cluster.
//
// A node with Config.BootstrapExpect N and a data dir without raft state
// watches gossip. It does nothing while any member gossip shows is in a
// raft configuration (role tag set): a cluster exists, and this node joins
// it (gossipRaftJoiner), as Consul's maybeBootstrap stands down when a
// server reports raft peers. Once it sees N alive members with the same N
// and no such member, the member with the lowest ID among the N lowest (the
// proposer) claims them: it promises itself, then asks the other N-1,
// through a serf query, to promise it. A node promises only if it has no
// raft state, knows no leader, sees no member in a raft configuration, and
// has promised no other proposer; a promise lasts until its proposer
// releases it (it does when any of the N says no, or the claim times out,
// and only then; each claim carries a random number, so a release that
// arrives after the proposer's next claim releases nothing). With every promise, and still no raft state, the proposer
// bootstraps raft with the N as voters (sorted by ID, each at the raft
// address its tag gives), and records a cluster ID derived from them. It
// alone writes that configuration; the others receive it from the leader
// it elects (raft grants votes from an empty configuration).
//
// Why this cannot make two clusters: a bootstrap needs N promises, one from
// each member of its set, proposer included, and a node promises one
// proposer at a time, never releasing a promise to a proposer that
// bootstrapped. Two bootstraps therefore need two disjoint sets of N fresh
// nodes, all started with the same BootstrapExpect, each set unable to see
// the other (or a member already in a cluster) through gossip: 2N fresh
// nodes split in two. Start exactly N (fewer than 2N) nodes with
// BootstrapExpect N, and later nodes with it or with RetryJoin alone: they
// see the cluster's members in gossip and join. A data dir with raft state
// never bootstraps (a restart of all members comes back as the same
// cluster), nor does a node whose data dir already names a cluster.
//
// Promises live in memory, on purpose. A promise matters only while its
// promiser has no raft state: once the proposer has bootstrapped, it asks
// the others for their votes after a heartbeat timeout or two, and a vote is
// raft state, written to the promiser's raft store before it answers; a node
// with raft state never promises again, restarted or not. So only a
// promiser that restarts inside that window (a second or so after it
// promised) can promise twice, and its second promise helps a second
// bootstrap only if N-1 other fresh nodes with the same BootstrapExpect,
// not promised to the first proposer, promise too while none of them sees
// the first cluster's members in gossip (their role tag says they are in a
// configuration from the bootstrap on): 2N-1 fresh nodes started (not N),
// split, and a crash in that window. A promise on disk would close the
// window, at a price: a promiser bound to a proposer that crashed before
// bootstrapping and never came back (a pod replaced under a new name)
// would stay bound across its own restarts, and a cluster of identical
// replicas could not form without an operator deleting files. In memory,
// a restart releases it; a proposer that crashes after collecting promises
// holds its promisers only until it comes back under the same ID (it is
// promised again) or they restart.

const (
	queryBootstrapClaim   = "raftlock-bootstrap-claim"
	queryBootstrapRelease = "raftlock-bootstrap-release"
	// bootstrapClaimTimeout bounds one claim: the query and its answers.
	bootstrapClaimTimeout = 5 * time.Second
)

// expectState is a fresh BootstrapExpect node's promise.
type expectState struct {
	mu         sync.Mutex // protects promisedTo, claim, done
	promisedTo string     // proposer ID, "" if none
	claim      uint64     // the proposer's claim promised: a release of an older claim arriving late is ignored
	done       bool       // this node bootstrapped (or gave up: a cluster exists)
}

// bootstrapClaim is the claim query's payload.
type bootstrapClaim struct {
	Proposer string   `json:"proposer"`
	Claim    uint64   `json:"claim"` // random, one per attempt
	Expect   int      `json:"expect"`
	Set      []string `json:"set"` // sorted IDs, proposer first
}

// bootstrapRelease is the release query's payload.
type bootstrapRelease struct {
	Proposer string `json:"proposer"`
	Claim    uint64 `json:"claim"`
}

// promise records a promise to proposer's claim, unless one to another
// proposer stands.
func (e *expectState) promise(proposer string, claim uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.promisedTo != "" && e.promisedTo != proposer {
		return false
	}
	e.promisedTo, e.claim = proposer, claim
	return true
}

// release takes back the promise to proposer's claim, if it is the one
// promised, unless this node bootstrapped.
func (e *expectState) release(proposer string, claim uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.promisedTo == proposer && e.claim == claim && !e.done {
		e.promisedTo, e.claim = "", 0
	}
}

func (e *expectState) promised() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.promisedTo
}

// awaitingBootstrap reports whether this node promised a proposer and has
// no raft state yet: it then waits for the leader's configuration rather
// than asking to join (which, fresh, would have it removed and added back).
func (mgr *Manager) awaitingBootstrap() bool {
	e := mgr.gossip.expect
	return e != nil && e.promised() != "" && !mgr.hasRaftState()
}

// bootstrapExpect runs on a fresh node with BootstrapExpect until raft has
// state (it bootstrapped, or a leader reached it) or the node closes.
func (mgr *Manager) bootstrapExpect() {
	g := mgr.gossip
	want := mgr.cfg.BootstrapExpect
	mgr.log.Info("waiting for the members to bootstrap a cluster", "bootstrap_expect", want)
	var lastWaitingFor int
	for {
		changed := g.changed.Wait()
		if mgr.hasRaftState() {
			return
		}
		members := mgr.gossipMembers()
		inCluster, peers, mismatched := "", []GossipMember(nil), []string(nil)
		for _, m := range members {
			if m.Status != GossipAlive {
				continue
			}
			switch {
			case m.Role != "":
				inCluster = string(m.ID)
			case m.Expect == want:
				peers = append(peers, m)
			default:
				mismatched = append(mismatched, fmt.Sprintf("%s=%d", m.ID, m.Expect))
			}
		}
		pause := time.Second
		switch {
		case inCluster != "":
			// A cluster exists: gossipRaftJoiner joins it.
			mgr.log.Debug("a member of an existing cluster is in gossip: not bootstrapping", "member", inCluster)
		case len(peers) < want:
			if len(peers) != lastWaitingFor {
				lastWaitingFor = len(peers)
				args := []any{"seen", len(peers), "bootstrap_expect", want}
				if len(mismatched) > 0 {
					args = append(args, "other_bootstrap_expect", mismatched, "what_to_do", "start every member with the same -bootstrap-expect")
				}
				mgr.log.Info("waiting for more members before bootstrapping", args...)
			}
		case string(peers[0].ID) == mgr.cfg.NodeID:
			if mgr.claimAndBootstrap(peers[:want]) {
				return
			}
			// Someone said no: try again after a random pause, so that two
			// proposers with different views do not keep colliding.
			pause = time.Second + rand.N(2*time.Second)
		}
		if !mgr.pause(pause, changed) {
			return
		}
	}
}

// claimAndBootstrap asks set (sorted, this node first) for promises and
// bootstraps if every member gives one. It reports whether it is done:
// bootstrapped, or found raft state.
func (mgr *Manager) claimAndBootstrap(set []GossipMember) bool {
	g := mgr.gossip
	e := g.expect
	self := mgr.cfg.NodeID
	claim := rand.Uint64()
	if !e.promise(self, claim) {
		return false
	}
	ids := make([]string, len(set))
	for i, m := range set {
		ids[i] = string(m.ID)
	}
	payload, _ := json.Marshal(bootstrapClaim{Proposer: self, Claim: claim, Expect: mgr.cfg.BootstrapExpect, Set: ids})
	others := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == self })
	yes := map[string]bool{}
	var refusals []string
	if len(others) > 0 {
		resp, err := g.serf.Query(queryBootstrapClaim, payload, &serf.QueryParam{FilterNodes: others, Timeout: bootstrapClaimTimeout})
		if err != nil {
			mgr.log.Warn("asking the members to bootstrap failed", "error", err)
			mgr.abandonClaim(claim, others)
			return false
		}
		for r := range resp.ResponseCh() {
			var rep gossipQueryReply
			if err := json.Unmarshal(r.Payload, &rep); err != nil {
				refusals = append(refusals, r.From+": bad answer")
			} else if rep.OK {
				yes[r.From] = true
			} else {
				refusals = append(refusals, r.From+": "+rep.Reason)
			}
			if len(yes)+len(refusals) == len(others) {
				resp.Close()
				break
			}
		}
	}
	if len(yes) < len(others) {
		missing := slices.DeleteFunc(slices.Clone(others), func(id string) bool { return yes[id] })
		mgr.log.Info("not bootstrapping yet: not every member agreed", "set", ids, "refused", refusals, "no_answer", missing)
		mgr.abandonClaim(claim, others)
		return false
	}
	if mgr.hasRaftState() {
		return true
	}
	servers := make([]raft.Server, len(set))
	for i, m := range set {
		servers[i] = raft.Server{Suffrage: raft.Voter, ID: m.ID, Address: m.RaftAddr}
	}
	clusterID, err := NewClusterID(servers)
	if err != nil {
		mgr.log.Error("bootstrapping: drawing a cluster ID", "error", err)
		mgr.abandonClaim(claim, others)
		return false
	}
	e.mu.Lock()
	e.done = true
	e.mu.Unlock()
	if err := mgr.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		// Raft gained state meanwhile (a leader reached this node): it
		// refuses, and this node is a member of that cluster instead.
		mgr.log.Warn("bootstrap refused by raft; this node follows the cluster that reached it", "error", err)
		return true
	}
	mgr.joinedCluster(clusterID)
	mgr.log.Info("bootstrapped a new cluster with the members gossip showed", "voters", ids, "cluster", clusterID)
	return true
}

// abandonClaim releases this node's own promise and the others' to claim.
func (mgr *Manager) abandonClaim(claim uint64, others []string) {
	g := mgr.gossip
	g.expect.release(mgr.cfg.NodeID, claim)
	if len(others) == 0 {
		return
	}
	payload, _ := json.Marshal(bootstrapRelease{Proposer: mgr.cfg.NodeID, Claim: claim})
	resp, err := g.serf.Query(queryBootstrapRelease, payload, &serf.QueryParam{FilterNodes: others, Timeout: bootstrapClaimTimeout})
	if err == nil {
		resp.Close()
	}
}

// answerBootstrapClaim answers a proposer's claim.
func (mgr *Manager) answerBootstrapClaim(payload []byte) gossipQueryReply {
	no := func(format string, args ...any) gossipQueryReply {
		return gossipQueryReply{Reason: fmt.Sprintf(format, args...)}
	}
	var c bootstrapClaim
	if err := json.Unmarshal(payload, &c); err != nil || c.Proposer == "" {
		return no("unreadable claim")
	}
	e := mgr.gossip.expect
	switch {
	case mgr.hasRaftState():
		return no("%s has raft state (it is a member of a cluster)", mgr.cfg.NodeID)
	case mgr.ident.ClusterID() != "":
		return no("%s's data dir names cluster %s", mgr.cfg.NodeID, mgr.ident.ClusterID())
	case e == nil:
		return no("%s is not waiting to bootstrap", mgr.cfg.NodeID)
	case c.Expect != mgr.cfg.BootstrapExpect:
		return no("%s has bootstrap-expect %d, not %d", mgr.cfg.NodeID, mgr.cfg.BootstrapExpect, c.Expect)
	case !slices.Contains(c.Set, mgr.cfg.NodeID):
		return no("%s is not in the set", mgr.cfg.NodeID)
	}
	if id := mgr.leader(); id != "" {
		return no("%s knows leader %s", mgr.cfg.NodeID, id)
	}
	for _, m := range mgr.gossipMembers() {
		if m.Status == GossipAlive && m.Role != "" {
			return no("%s sees %s, a member of a cluster", mgr.cfg.NodeID, m.ID)
		}
	}
	if !e.promise(c.Proposer, c.Claim) {
		return no("%s promised %s", mgr.cfg.NodeID, e.promised())
	}
	mgr.log.Info("promised a proposer to be bootstrapped by it", "proposer", c.Proposer, "set", strings.Join(c.Set, ","))
	return gossipQueryReply{OK: true}
}

func (mgr *Manager) releaseBootstrapPromise(payload []byte) {
	var r bootstrapRelease
	if e := mgr.gossip.expect; e != nil && json.Unmarshal(payload, &r) == nil {
		e.release(r.Proposer, r.Claim)
	}
}
