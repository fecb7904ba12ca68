package fsm

// Command levels.
//
// A replica can apply only the commands its build decodes, and a replica
// that cannot decode a committed command must never skip it (its state
// would diverge from the others': a grant it skipped consumed a fencing
// token, so its counter would be lower). So each command has a level, the
// lowest MaxCommandLevel a build must have to decode it, and a cluster
// proposes a command only when every member's build reads its level (the
// cluster package checks it before proposing).
//
// BaselineLevel is the level of every command this package had when
// levels were introduced (the acquire of every kind and form,
// acquire-all, release, extend, cancel-wait, tick, new-term,
// drop-unclaimed, force-release and the session ops): every build from
// then on reads it, and a member that advertises no level is taken to read
// exactly it. A build that adds a command gives it the next level and
// raises MaxCommandLevel to it; a command whose new form only some builds
// read (a new field, a new wire op byte) gets a new level the same way.
// Levels only grow: a build reads every level up to its MaxCommandLevel.
//
// A snapshot reaches members as commands do (the leader sends one to a
// member that lags), so a snapshot version that only some builds read
// gets a level too: ReleasesLevel, the first above the baseline, is that
// of snapshot version 6 (the remembered releases, releases.go). A node
// writes the newest version every member reads (SnapshotVersionFor of the
// lowest level among them), so during a rolling upgrade it writes version
// 5, which every build with levels reads.
const (
	BaselineLevel   = 1
	ReleasesLevel   = 2
	MaxCommandLevel = ReleasesLevel
)

// SnapshotVersionFor is the newest snapshot version a build that reads
// level reads, and so the version to write (Machine.SnapshotIn) when level
// is the lowest any member reads: 6 from ReleasesLevel, else 5.
func SnapshotVersionFor(level int) int {
	if level >= ReleasesLevel {
		return snapshotVersion
	}
	return snapshotVersionV5
}

// SnapshotLevel is the level a build must read to restore snapshot b, by
// the version it starts with: the baseline for versions up to 5 (and for
// bytes too short to say: Restore refuses those), ReleasesLevel for 6, and
// above MaxCommandLevel for a version this build does not know.
func SnapshotLevel(b []byte) int {
	switch {
	case len(b) == 0 || b[0] <= snapshotVersionV5:
		return BaselineLevel
	case b[0] == snapshotVersion:
		return ReleasesLevel
	}
	return MaxCommandLevel + 1
}

// CommandLevel is the level of c: the lowest MaxCommandLevel a build must
// have to decode it. Every command this build encodes is at most
// MaxCommandLevel.
func CommandLevel(c Command) int {
	switch c.Op {
	case OpAcquire, OpRelease, OpExtend, OpCancelWait, OpTick, OpNewTerm, OpDropUnclaimed,
		OpSessionCreate, OpSessionRenew, OpSessionDestroy, OpAcquireAll, OpForceRelease:
		return BaselineLevel
	}
	// An op this build does not know cannot be encoded by it; were one
	// asked for, it needs a build newer than this one.
	return MaxCommandLevel + 1
}
