package cluster

import (
	"sort"
	"strings"

	raft "github.com/raftlock/raftlock/internal/raft"
)

// noteIgnoredBootstrap runs when a node asked to Bootstrap starts on a data
// dir that already holds cluster state (a restart never bootstraps again):
// it says so, and warns about each member Peers lists at another address
// than the membership stored in the data dir, which raft uses. A warning
// rather than an error: membership changes after bootstrap (joins, leaves,
// replacements) while the command line that bootstrapped stays as it was,
// and restarting with that same command line must keep working.
func (n *Node) noteIgnoredBootstrap(stored raft.Configuration) {
	cfg := n.cfg
	members := make(map[string]string, len(stored.Servers))
	var ids []string
	for _, s := range stored.Servers {
		members[string(s.ID)] = string(s.Address)
		ids = append(ids, string(s.ID)+"="+string(s.Address))
	}
	sort.Strings(ids)
	var gone []string
	for _, p := range cfg.Peers {
		addr, ok := members[p.ID]
		switch {
		case !ok:
			gone = append(gone, p.ID)
		case p.ID != cfg.NodeID && addr != p.Addr:
			n.log.Warn("the bootstrap peers list a member at another address than the cluster state in the data dir holds; "+
				"that state is used, the peers list only applies to an empty data dir: correct the peers list (agent -peers) to match, "+
				"or, if the member moved, remove it (raftlock leave) and have it join again from an empty data dir",
				"member", p.ID, "peers_addr", p.Addr, "stored_addr", addr)
		}
	}
	args := []any{"members", strings.Join(ids, ",")}
	if len(gone) > 0 {
		sort.Strings(gone)
		args = append(args, "listed_not_members", strings.Join(gone, ","))
	}
	n.log.Info("the data dir already holds cluster state: starting from it; the bootstrap settings "+
		"(agent -bootstrap and -peers, Config.Bootstrap and Peers) are ignored, as on every restart", args...)
}
