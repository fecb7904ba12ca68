package membership

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"
)

// Why members tell each other their API addresses. Gossip (gossip.go)
// carries each member's API address as a tag, but gossip is optional (off
// by default in an embedded node), so the exchange below stays for nodes
// without it: it is what lets a client given one node find the others
// (Stats().Members[i].APIAddr). A node with gossip on does not ask (its
// members' tags say it) but still answers, and records what a member
// without gossip tells it when asking, so mixed clusters keep working.
// The exchange carries each member's command level and raftlock version
// too (package cluster's levels.go), as the gossip tags do.

// Every member learns the others' API addresses (Config.APIAddr) by asking
// each one directly (nodewire.KindInfo), so that Stats().Members can tell a client
// given one node where the others serve. The question carries the asker's
// own address, so one exchange informs both: a node that starts (or
// restarts with a new API address) asks everyone at once, and everyone
// knows. A member is also asked when it appears in the raft configuration
// or changes raft address, and again every peerInfoRefresh. One that does
// not answer (down, or too old to know nodewire.KindInfo) is asked again at the next
// poll; its API address stays unknown meanwhile.
const (
	peerInfoPoll    = 2 * time.Second
	peerInfoRefresh = 30 * time.Second
	peerInfoTimeout = time.Second
)

type peerInfo struct {
	addr    string // the raft address that answered
	apiAddr string
	level   int    // the command level it reads; 0 if it did not say (the baseline: package cluster's levels.go)
	version string // its raftlock version; "" if it did not say
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

// info is what member id said of itself; the zero peerInfo if nothing.
func (d *peerDirectory) info(id string) peerInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peers[id]
}

// HeardFrom records what a member said of itself when it asked for our info
// (its API address, command level and version). A node not (yet) in this
// node's configuration is not recorded; it will be asked once it is.
func (mgr *Manager) HeardFrom(id, apiAddr string, level int, version string) {
	servers, err := Servers(mgr.raft)
	if err != nil || id == mgr.cfg.NodeID {
		return
	}
	addr, member := servers[id]
	if !member {
		return
	}
	mgr.peers.mu.Lock()
	defer mgr.peers.mu.Unlock()
	mgr.peers.peers[id] = peerInfo{addr: addr, apiAddr: apiAddr, level: level, version: version, learned: time.Now()}
}

func (mgr *Manager) runPeerInfo() {
	ctx, cancel := mgr.closingContext() // so that Close does not wait for a peer's answer
	defer cancel()
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		select {
		case <-mgr.closing:
			return
		case <-poll.C:
		}
		mgr.refreshPeerInfo(ctx)
		poll.Reset(peerInfoPoll)
	}
}

// refreshPeerInfo forgets members that left the configuration and asks,
// all at once, the members it knows nothing (or nothing recent) about.
func (mgr *Manager) refreshPeerInfo(ctx context.Context) {
	servers, err := Servers(mgr.raft)
	if err != nil {
		return
	}
	now := time.Now()
	ask := map[string]string{}
	mgr.peers.mu.Lock()
	for id := range mgr.peers.peers {
		if _, ok := servers[id]; !ok {
			delete(mgr.peers.peers, id)
		}
	}
	for id, addr := range servers {
		if id == mgr.cfg.NodeID {
			continue
		}
		if p, ok := mgr.peers.peers[id]; !ok || p.addr != addr || now.Sub(p.learned) >= peerInfoRefresh {
			ask[id] = addr
		}
	}
	mgr.peers.mu.Unlock()

	var wg sync.WaitGroup
	for id, addr := range ask {
		wg.Go(func() {
			callCtx, cancel := context.WithTimeout(ctx, peerInfoTimeout)
			defer cancel()
			info, err := mgr.askInfo(callCtx, addr)
			if err != nil || info.ID != id {
				return
			}
			mgr.peers.mu.Lock()
			defer mgr.peers.mu.Unlock()
			if _, member := servers[id]; member {
				mgr.peers.peers[id] = peerInfo{addr: addr, apiAddr: info.APIAddr, level: info.Level, version: info.Version, learned: time.Now()}
			}
		})
	}
	wg.Wait()
}

// askInfo asks the node at addr who it is, telling it who this node is
// (nodewire.KindInfo). A build older than this one refuses the optional fields it
// does not know (nodewire.CodeBadRequest), so it is asked again without them:
// without the version (a build from before versions were told), then
// without the level too (a build from before levels).
func (mgr *Manager) askInfo(ctx context.Context, addr string) (*nodewire.Info, error) {
	self := nodewire.Info{ID: mgr.cfg.NodeID, APIAddr: mgr.cfg.APIAddr, Level: mgr.cfg.Level, Version: mgr.cfg.Version}
	forms := []nodewire.Info{self}
	if self.Version != "" {
		older := self
		older.Version = ""
		forms = append(forms, older)
	}
	if self.HasLevel() {
		oldest := self
		oldest.Version, oldest.Level = "", 0
		forms = append(forms, oldest)
	}
	var rep nodewire.Reply
	for _, form := range forms {
		var err error
		rep, err = mgr.node.Call(ctx, addr, nodewire.EncodeRequest(&form))
		if err != nil {
			return nil, err
		}
		if rep.Code != nodewire.CodeBadRequest {
			break
		}
	}
	if err := rep.Err(); err != nil {
		return nil, fmt.Errorf("cluster: asking %s for its info: %w", addr, err)
	}
	info, ok := rep.Answer.(*nodewire.Info)
	if !ok {
		return nil, fmt.Errorf("cluster: asking %s for its info: %w: %T answer", addr, nodewire.ErrBadRequest, rep.Answer)
	}
	return info, nil
}
