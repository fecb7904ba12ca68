package cluster

import (
	"context"
	"sync"
	"time"
)

// Why members tell each other their API addresses. Gossip (gossip.go)
// carries each member's API address as a tag, but gossip is optional (off
// by default in an embedded node), so the exchange below stays for nodes
// without it: it is what lets a client given one node find the others
// (Stats().Members[i].APIAddr). A node with gossip on does not ask (its
// members' tags say it) but still answers, and records what a member
// without gossip tells it when asking, so mixed clusters keep working.

// Every member learns the others' API addresses (Config.APIAddr) by asking
// each one directly (kindInfo), so that Stats().Members can tell a client
// given one node where the others serve. The question carries the asker's
// own address, so one exchange informs both: a node that starts (or
// restarts with a new API address) asks everyone at once, and everyone
// knows. A member is also asked when it appears in the raft configuration
// or changes raft address, and again every peerInfoRefresh. One that does
// not answer (down, or too old to know kindInfo) is asked again at the next
// poll; its API address stays unknown meanwhile.
const (
	peerInfoPoll    = 2 * time.Second
	peerInfoRefresh = 30 * time.Second
	peerInfoTimeout = time.Second
)

type peerInfo struct {
	addr    string // the raft address that answered
	apiAddr string
	level   int // the command level it reads; 0 if it did not say (the baseline: levels.go)
	learned time.Time
}

// peerDirectory holds what members said about themselves, by member ID.
type peerDirectory struct {
	mu    sync.Mutex // protects peers
	peers map[string]peerInfo
}

func (d *peerDirectory) apiAddr(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peers[id].apiAddr
}

// level is the command level member id said it reads; 0 if it said none.
func (d *peerDirectory) level(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peers[id].level
}

// heardFrom records what a member said of itself when it asked for our info
// (its API address and command level). A node not (yet) in this node's
// configuration is not recorded; it will be asked once it is.
func (n *Node) heardFrom(id, apiAddr string, level int) {
	servers, err := n.Servers()
	if err != nil || id == n.cfg.NodeID {
		return
	}
	addr, member := servers[id]
	if !member {
		return
	}
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	n.peers.peers[id] = peerInfo{addr: addr, apiAddr: apiAddr, level: level, learned: time.Now()}
}

func (n *Node) runPeerInfo() {
	defer n.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // so that Close does not wait for a peer's answer
		<-n.closing
		cancel()
	}()
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		select {
		case <-n.closing:
			return
		case <-poll.C:
		}
		n.refreshPeerInfo(ctx)
		poll.Reset(peerInfoPoll)
	}
}

// refreshPeerInfo forgets members that left the configuration and asks,
// all at once, the members it knows nothing (or nothing recent) about.
func (n *Node) refreshPeerInfo(ctx context.Context) {
	servers, err := n.Servers()
	if err != nil {
		return
	}
	now := time.Now()
	ask := map[string]string{}
	n.peers.mu.Lock()
	for id := range n.peers.peers {
		if _, ok := servers[id]; !ok {
			delete(n.peers.peers, id)
		}
	}
	for id, addr := range servers {
		if id == n.cfg.NodeID {
			continue
		}
		if p, ok := n.peers.peers[id]; !ok || p.addr != addr || now.Sub(p.learned) >= peerInfoRefresh {
			ask[id] = addr
		}
	}
	n.peers.mu.Unlock()

	self := nodeInfo{id: n.cfg.NodeID, apiAddr: n.cfg.APIAddr, level: n.levels.max}
	body := encodeRequest(&self)
	var wg sync.WaitGroup
	for id, addr := range ask {
		wg.Go(func() {
			callCtx, cancel := context.WithTimeout(ctx, peerInfoTimeout)
			defer cancel()
			rep, err := n.call(callCtx, addr, body)
			if err == nil && rep.code == codeBadRequest && self.hasLevel() {
				// A build from before levels refuses the level field: ask
				// it without (it reads the baseline anyway).
				plain := self
				plain.level = 0
				rep, err = n.call(callCtx, addr, encodeRequest(&plain))
			}
			info, ok := rep.answer.(*nodeInfo)
			if err != nil || !ok || info.id != id {
				return
			}
			n.peers.mu.Lock()
			defer n.peers.mu.Unlock()
			if _, member := servers[id]; member {
				n.peers.peers[id] = peerInfo{addr: addr, apiAddr: info.apiAddr, level: info.level, learned: time.Now()}
			}
		})
	}
	wg.Wait()
}
