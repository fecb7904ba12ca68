package cluster

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/raftlock/raftlock/cluster/datadir"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// Stop, never skip.
//
// Every member must apply every committed entry, in order: a member that
// skipped one it could not read (a command of a newer build, during a
// rolling upgrade) would diverge from the others for good — a grant they
// made consumed a fencing token its counter never saw — and, once leader,
// could issue a token twice or grant a held lock. So a member whose state
// machine meets a committed entry it cannot decode, or a snapshot it
// cannot restore because a newer build wrote it, halts instead:
//
//   - the state machine applies nothing more (raft still hands it entries;
//     each is answered with the halt error and changes nothing), and
//     refuses to snapshot, so raft never compacts the entry away: it stays
//     in the log for a build that reads it;
//   - the node closes itself (from its own goroutine, not from raft's
//     apply): raft shuts down, so the member neither leads nor votes, and
//     every call on it, reads included, fails with an error that matches
//     lock.ErrClosed and ErrHalted and says what to do;
//   - Node.Done is closed and Node.Err returns that error (a *HaltError),
//     so an embedder can tell a halt from its own Close; the agent exits
//     with status 1 and the message.
//
// Started again on the same data dir with the same build, the member
// replays the same log and halts at the same entry: halting is as
// deterministic as applying. Started with a build that reads the entry, it
// applies everything and catches up; nothing was lost, since the entry
// stays in the log. The other members go on as they do when any member is
// down.
//
// The leader keeps this from happening in a rolling upgrade: it proposes
// no command whose level some member does not read (levels.go). A member
// can still meet one it cannot read when it joins (or restarts on an
// older build) after such commands were committed; halting is then what
// keeps it from serving a divergent state.

// ErrHalted matches the error of a node whose state machine met a
// committed log entry or a snapshot it cannot read (see HaltError): it
// applies nothing more and has closed itself.
var ErrHalted = errors.New("cluster: state machine halted")

// ErrLogSyncFailed matches the error of a node whose disk failed to make
// its raft log durable (a failed fsync of entries the leader had written
// while replicating them): it has closed itself rather than acknowledge
// entries that may not be on disk. Check the disk and start it again on
// the same DataDir: it keeps what is on disk, and the leader sends it the
// rest.
var ErrLogSyncFailed = datadir.ErrSyncFailed

// HaltError says why a node's state machine halted. It matches ErrHalted,
// and its Cause (fsm.ErrUnknownOp, fsm.ErrBadVersion, ...).
type HaltError struct {
	// Index is the log index of the entry that could not be read; for a
	// snapshot, the index the snapshot ends at (0 if its format does not
	// say it in a way this build reads).
	Index uint64
	// Snapshot is true when a snapshot, not a log entry, could not be read.
	Snapshot bool
	// Build describes this node's raftlock build and the command level it
	// reads.
	Build string
	Cause error
}

func (e *HaltError) Error() string {
	what := fmt.Sprintf("log entry %d", e.Index)
	switch {
	case e.Snapshot && e.Index == 0:
		what = "a snapshot"
	case e.Snapshot:
		what = fmt.Sprintf("the snapshot of the log up to entry %d", e.Index)
	}
	return fmt.Sprintf("cluster: state machine halted: this member runs %s, which cannot read %s (%v), "+
		"most likely written by a newer raftlock: install the version the other members run and start it again "+
		"with the same data dir; nothing is lost: the entry stays in the log", e.Build, what, e.Cause)
}

// Is makes a HaltError match ErrHalted.
func (e *HaltError) Is(target error) bool { return target == ErrHalted }

func (e *HaltError) Unwrap() error { return e.Cause }

// buildDescription names this build for people: its module version, the
// commit it was built from when Go recorded one, and the highest command
// level it reads.
func buildDescription(maxLevel int) string {
	commit := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				commit = " commit " + s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("raftlock %s%s (reads command level %d)", raftlockVersion, commit, maxLevel)
}

// Done returns a channel that is closed when the node begins to close: by
// Close or Leave, or by itself when its state machine halted or its disk
// failed a sync of the raft log (then Err says why). An embedder that runs as long as its node selects on it, then
// calls Close, which returns once the node is fully stopped (Close is
// idempotent).
func (n *Node) Done() <-chan struct{} { return n.closing }

// Err returns nil while the node runs and after a Close or Leave; once the
// node has stopped by itself (see Done) it returns why: a *HaltError,
// matching ErrHalted, that names the log entry this node's build cannot
// read and what to do; or an error matching ErrLogSyncFailed when its disk
// failed to make the raft log durable. Its lock calls then fail with errors
// matching lock.ErrClosed and the same error.
func (n *Node) Err() error { return n.stoppedError() }

// errorText is err's text, "" for nil.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// closeOnHalt closes the node when its state machine halts or its raft
// log's disk failed a sync (datadir.SyncFailedError: the log refuses every
// write from then on, and a member that can neither store nor acknowledge
// entries would only hold a place in the quorum). It runs from the end of
// New (a halt while New replays the log waits for New) until the node
// closes.
func (n *Node) closeOnHalt() {
	select {
	case <-n.sm.halted:
		n.log.Error("this member stops: its state machine cannot read a committed entry",
			"error", n.sm.haltError(), "what_to_do", "install the raftlock version the other members run and start it again with the same data dir")
	case <-n.store.Failed():
		n.log.Error("this member stops: its disk failed to sync the raft log",
			"error", n.store.FailedError(), "what_to_do", "check the disk, then start the member again with the same data dir")
	case <-n.closing:
		return
	}
	if err := n.Close(); err != nil {
		n.log.Warn("closing the halted node", "error", err)
	}
}

// stoppedError is why the node stopped by itself: its state machine's
// *HaltError or its log's *datadir.SyncFailedError; nil otherwise.
func (n *Node) stoppedError() error {
	if err := n.sm.haltError(); err != nil {
		return err
	}
	return n.store.FailedError()
}

// haltedError is what a call on a node that stopped by itself fails with:
// it matches lock.ErrClosed (the node is closed) and says why (ErrHalted or
// ErrLogSyncFailed). Nil while the node runs.
func (n *Node) haltedError() error {
	if err := n.stoppedError(); err != nil {
		return fmt.Errorf("%w: %w", lock.ErrClosed, err)
	}
	return nil
}

// decodeEntry decodes a committed entry's batch and checks that this
// build reads every command's level (levels, the build's: a test plays an
// older build by lowering it).
func decodeEntry(data []byte, levels commandLevels) ([]fsm.Command, error) {
	cmds, err := fsm.DecodeBatch(data)
	if err != nil {
		return nil, err
	}
	for i, c := range cmds {
		if l := levels.of(c); l > levels.max {
			return nil, fmt.Errorf("command %d: %w: %v needs command level %d", i, fsm.ErrUnknownOp, c.Op, l)
		}
	}
	return cmds, nil
}
