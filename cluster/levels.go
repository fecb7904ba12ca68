package cluster

import (
	"fmt"
	"runtime/debug"

	"github.com/raftlock/raftlock/fsm"
	raft "github.com/raftlock/raftlock/internal/raft"
)

// Mixed versions: the leader proposes nothing a member cannot read.
//
// Each member advertises the highest command level its build decodes
// (fsm.MaxCommandLevel): as the gossip tag "level" when gossip is on, and
// in the member info exchange otherwise (nodewire.KindInfo; see package
// membership's peers.go, and package nodewire). A member that advertises nothing — a build from before levels,
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

// admitLevel refuses cmd, with an error matching ErrMemberTooOld,
// when some member of the raft configuration does not read its level.
func (n *Node) admitLevel(cmd fsm.Command) error {
	need := n.levels.of(cmd)
	if need <= fsm.BaselineLevel {
		return nil // every member reads it
	}
	low, err := n.membership.LowestLevel()
	if err != nil {
		return err
	}
	if low.Level >= need {
		return nil
	}
	runs := "its version is not known here"
	if low.Version != "" {
		runs = "it runs raftlock " + low.Version
	}
	suffrage := "voter"
	if low.Server.Suffrage != raft.Voter {
		suffrage = "non-voter"
	}
	return fmt.Errorf("%w: %v needs command level %d, and %s %s reads level %d (%s): "+
		"install on %s raftlock %s (the version this leader runs) and try again; nothing was done",
		ErrMemberTooOld, cmd.Op, need, suffrage, low.Server.ID, low.Level, runs, low.Server.ID, n.version)
}

// machineSnapshotVersion is the fsm snapshot version this node writes: the
// newest every member reads (fsm.SnapshotVersionFor of LowestLevel), since
// any of them may be sent it, by this node as leader now or after an
// election. When the configuration cannot be read, the version every
// member reads.
func (n *Node) machineSnapshotVersion() int {
	low, err := n.membership.LowestLevel()
	if err != nil {
		return fsm.SnapshotVersionFor(fsm.BaselineLevel)
	}
	return fsm.SnapshotVersionFor(low.Level)
}

// raftlockVersion is the module's version as the build recorded it.
var raftlockVersion = func() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Path == "github.com/raftlock/raftlock" && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}()
