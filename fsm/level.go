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
const (
	BaselineLevel   = 1
	MaxCommandLevel = BaselineLevel
)

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
