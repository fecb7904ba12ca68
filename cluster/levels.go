package cluster

import (
	"cmp"
	"fmt"
	"strconv"

	"github.com/raftlock/raftlock/fsm"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// Mixed versions: the leader proposes nothing a member cannot read.
//
// Each member advertises the highest command level its build decodes
// (fsm.MaxCommandLevel): as the gossip tag "level" when gossip is on, and
// in the member info exchange otherwise (kindInfo; see peers.go and
// package nodewire). A member that advertises nothing — a build from before levels,
// or one whose advertisement has not arrived yet — is taken to read
// fsm.BaselineLevel, which every build reads.
//
// Before a command joins the leader's proposal queue (leaderTerm.enqueue),
// the leader checks its level (fsm.CommandLevel) against every server of
// the latest raft configuration, voters and non-voters alike, itself
// included. A command above some member's level is refused with
// ErrMemberTooOld, naming the member and what to install, and nothing
// is proposed: so in a rolling upgrade new commands are refused until every
// member reads them, and the commands every build reads go on throughout.
// A command at the baseline costs nothing: every member reads it.
//
// A member added after the check, or restarted on an older build, may
// still meet such a command in the log (replicated to it, or replayed); it
// then halts rather than skip it (halt.go).
//
// Snapshots obey the same rule: a leader sends its latest snapshot to a
// member that lags, so every node, followers included (any may lead
// next), writes the newest snapshot version that every member of the
// latest configuration reads (machineSnapshotVersion): version 6, with the
// remembered releases, once all read fsm.ReleasesLevel, version 5 until
// then. A member added on an older build after a snapshot was written may
// still be sent it, and halts as it would at a command.
//
// Members also tell their raftlock version (the gossip tag "version", or
// the info exchange's version field), for people: Stats().Members shows
// each member's version and level as this node knows them, and marks the
// members that read a lower level than the leader (Member.BelowLeader),
// the ones holding newer commands back, so that an operator in a rolling
// upgrade sees which member still runs what.

// commandLevels is what a node knows of command levels: the highest its
// build decodes, and each command's. Nodes use fsm's (buildLevels); a test
// plays a cluster of mixed builds in one process with others
// (Config.levels).
type commandLevels struct {
	max     int
	levelOf func(fsm.Command) int
}

var buildLevels = commandLevels{max: fsm.MaxCommandLevel, levelOf: fsm.CommandLevel}

func (l commandLevels) of(c fsm.Command) int { return l.levelOf(c) }

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
func (n *Node) memberBuild(id string, gossiped map[string]gossipMember) (level int, version string) {
	if id == n.cfg.NodeID {
		return n.levels.max, n.version
	}
	g := gossiped[id]
	level, version = g.Level, g.Version
	if level == 0 || version == "" {
		p := n.peers.info(id)
		level, version = cmp.Or(level, p.level), cmp.Or(version, p.version)
	}
	return level, version
}

// memberLevel is the command level member id reads, as this node knows
// it (memberBuild), the baseline when it has not told, with its version
// ("" when not known).
func (n *Node) memberLevel(id string, gossiped map[string]gossipMember) (level int, version string) {
	level, version = n.memberBuild(id, gossiped)
	return max(level, fsm.BaselineLevel), version
}

// lowestMember is the member that reads the lowest command level.
type lowestMember struct {
	srv     raft.Server
	level   int    // the level it reads (memberLevel)
	version string // its raftlock version, "" when not known
}

// lowestLevel is what every member reads: the lowest command level among
// the servers of the latest raft configuration, voters and non-voters
// alike, this node included, as this node knows them (memberLevel), and
// the first server that reads only that. With no configuration yet, this
// node alone. Both the command check (admitLevel) and the snapshot version
// (machineSnapshotVersion) ask it.
func (n *Node) lowestLevel() (lowestMember, error) {
	f := n.raft.GetConfiguration() // the latest configuration, without a round trip
	if err := f.Error(); err != nil {
		return lowestMember{}, fmt.Errorf("cluster: reading the configuration: %w", err)
	}
	servers := f.Configuration().Servers
	if len(servers) == 0 {
		return lowestMember{srv: raft.Server{ID: raft.ServerID(n.cfg.NodeID)}, level: n.levels.max, version: n.version}, nil
	}
	gossiped := n.gossipByID()
	var low lowestMember
	for i, srv := range servers {
		level, version := n.memberLevel(string(srv.ID), gossiped)
		if i == 0 || level < low.level {
			low = lowestMember{srv: srv, level: level, version: version}
		}
	}
	return low, nil
}

// admitLevel refuses cmd, with an error matching ErrMemberTooOld,
// when some member of the raft configuration does not read its level.
func (n *Node) admitLevel(cmd fsm.Command) error {
	need := n.levels.of(cmd)
	if need <= fsm.BaselineLevel {
		return nil // every member reads it
	}
	low, err := n.lowestLevel()
	if err != nil {
		return err
	}
	if low.level >= need {
		return nil
	}
	runs := "its version is not known here"
	if low.version != "" {
		runs = "it runs raftlock " + low.version
	}
	suffrage := "voter"
	if low.srv.Suffrage != raft.Voter {
		suffrage = "non-voter"
	}
	return fmt.Errorf("%w: %v needs command level %d, and %s %s reads level %d (%s): "+
		"install on %s raftlock %s (the version this leader runs) and try again; nothing was done",
		ErrMemberTooOld, cmd.Op, need, suffrage, low.srv.ID, low.level, runs, low.srv.ID, n.version)
}

// machineSnapshotVersion is the fsm snapshot version this node writes: the
// newest every member reads (fsm.SnapshotVersionFor of lowestLevel), since
// any of them may be sent it, by this node as leader now or after an
// election. When the configuration cannot be read, the version every
// member reads.
func (n *Node) machineSnapshotVersion() int {
	low, err := n.lowestLevel()
	if err != nil {
		return fsm.SnapshotVersionFor(fsm.BaselineLevel)
	}
	return fsm.SnapshotVersionFor(low.level)
}
