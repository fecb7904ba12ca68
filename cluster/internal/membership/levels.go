package membership

import (
	"cmp"
	"fmt"
	"strconv"

	"github.com/raftlock/raftlock/fsm"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// What each member reads: package cluster's levels.go says why the leader
// asks (it proposes nothing a member cannot read); these are the answers,
// from the gossip tag "level" or the member info exchange (peers.go).

// tagLevel is the gossip tag of a member's command level.
const tagLevel = "level"

// parseLevel reads an advertised level: the level, or 0 when none is
// advertised or it is garbage (the member then counts as reading
// fsm.BaselineLevel).
func parseLevel(s string) int {
	if l, err := strconv.Atoi(s); err == nil && l >= fsm.BaselineLevel {
		return l
	}
	return 0
}

// memberBuild is what member id told of its build, as this node knows it:
// the command level it reads and its raftlock version, 0 and "" for what
// it has not told (yet, or ever: a build from before it was told). Its own
// build for itself; else what gossip says of it, else what it told in the
// info exchange. gossiped is gossipByID's answer (nil when gossip is off).
func (mgr *Manager) memberBuild(id string, gossiped map[string]GossipMember) (level int, version string) {
	if id == mgr.cfg.NodeID {
		return mgr.cfg.Level, mgr.cfg.Version
	}
	g := gossiped[id]
	level, version = g.Level, g.Version
	if level == 0 || version == "" {
		p := mgr.peers.info(id)
		level, version = cmp.Or(level, p.level), cmp.Or(version, p.version)
	}
	return level, version
}

// memberLevel is the command level member id reads, as this node knows
// it (memberBuild), the baseline when it has not told, with its version
// ("" when not known).
func (mgr *Manager) memberLevel(id string, gossiped map[string]GossipMember) (level int, version string) {
	level, version = mgr.memberBuild(id, gossiped)
	return max(level, fsm.BaselineLevel), version
}

// LowestMember is the member that reads the lowest command level.
type LowestMember struct {
	Server  raft.Server
	Level   int    // the level it reads (memberLevel)
	Version string // its raftlock version, "" when not known
}

// LowestLevel is what every member reads: the lowest command level among
// the servers of the latest raft configuration, voters and non-voters
// alike, this node included, as this node knows them (memberLevel), and
// the first server that reads only that. With no configuration yet, this
// node alone. The leader's command check and the snapshot version ask it.
func (mgr *Manager) LowestLevel() (LowestMember, error) {
	f := mgr.raft.GetConfiguration() // the latest configuration, without a round trip
	if err := f.Error(); err != nil {
		return LowestMember{}, fmt.Errorf("cluster: reading the configuration: %w", err)
	}
	servers := f.Configuration().Servers
	if len(servers) == 0 {
		return LowestMember{Server: raft.Server{ID: raft.ServerID(mgr.cfg.NodeID)}, Level: mgr.cfg.Level, Version: mgr.cfg.Version}, nil
	}
	gossiped := mgr.gossipByID()
	var low LowestMember
	for i, srv := range servers {
		level, version := mgr.memberLevel(string(srv.ID), gossiped)
		if i == 0 || level < low.Level {
			low = LowestMember{Server: srv, Level: level, Version: version}
		}
	}
	return low, nil
}
