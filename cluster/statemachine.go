package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/lockfsm"
	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/internal/watchhub"
	"github.com/raftlock/raftlock/lock"
)

// The state machine adapter.
//
// One raft LogCommand entry carries one fsm batch (fsm.AppendBatch). The
// adapter is a raft.BatchingFSM: ApplyBatch applies each entry's commands in
// order and answers each entry with its []fsm.Result; configuration entries
// only advance the applied index, and raft's no-op and barrier entries never
// reach it. A mutex serializes the machine between raft's FSM goroutine and
// the node's reads. Snapshot only starts an fsm.Freezer under that mutex;
// Persist copies 4096 keys per hold of it and encodes and writes each chunk
// outside it, so an apply waits for one chunk at most, however large the
// state (Stats.Freeze sums the holds). A snapshot is a version byte, the
// applied index, and the bytes fsm.Machine.Snapshot would have given when it
// started.
//
// The machine's events (a queued owner granted on hand-off, dropped at its
// wait deadline, or dropped unclaimed) go to the leader's registry of
// waiting acquires parked at it; followers keep none.

// stateMachine adapts fsm.Machine to raft: one raft log entry of type
// LogCommand carries one fsm batch (fsm.AppendBatch), and applying it answers
// the proposer with one fsm.Result per command, in order.
//
// raft calls Apply, ApplyBatch, Snapshot and Restore from its FSM goroutine;
// the node reads concurrently (Lookup for reads, NextDeadline for the expiry
// timer), so mu serializes every touch of the machine.
type stateMachine struct {
	log hclog.Logger

	mu sync.Mutex // protects m, applied, progress
	// published is the state's size as of the last apply or restore
	// (usage); written under mu.
	published atomic.Pointer[quotaUse]
	m         *fsm.Machine
	applied   uint64        // index of the last log entry applied (commands and configuration changes)
	changed   chan struct{} // closed and replaced whenever applied advances

	// afterApply runs after each applied batch, outside mu (the node pokes
	// the leader's expiry timer with it). Set before raft starts.
	afterApply func()
	// monotonic, set before raft starts, is the node's Clock.Monotonic; nil
	// records nothing. With it the adapter measures, for the raft term of
	// the last stamped entry applied (stampTerm; 0 after a restore, whose
	// term is not known), the largest stamp minus monotonic reading at its
	// apply (stampLead) over that term's entries; stamped says whether it
	// has. Under mu. See clockBase.
	monotonic func() time.Duration
	stampTerm uint64
	stampLead time.Duration
	stamped   bool

	// hub remembers recent changes for watches and wakes their watchers
	// (watch.go; it has its own lock). applying, under mu, is the index of
	// the entry being applied, which the machine's OnChange records in hub
	// with each key. Both set before raft starts.
	hub         *watchhub.Hub
	maxWatchers int
	applying    uint64

	// levels are the command levels this build reads (set before raft
	// starts): a command above levels.max is one it cannot read.
	levels commandLevels
	// halt is set, once, when the machine meets a committed entry or a
	// snapshot it cannot read; halted is closed then. From then on nothing
	// is applied, restored or snapshotted (halt.go).
	halt   atomic.Pointer[HaltError]
	halted chan struct{}
	// writeVersion says which fsm snapshot version to write (the newest
	// every member reads: Node.machineSnapshotVersion). The node sets it
	// once it can tell (raft may snapshot before); until then, the version
	// every build with levels reads is written.
	writeVersion atomic.Pointer[func() int]

	restores atomic.Uint64 // snapshots restored since start
	handoffs atomic.Uint64 // EventGranted applied: keys handed to a queued waiter
	expired  atomic.Uint64 // EventExpired applied: leases that ran out
	applies  timing        // ApplyBatch calls and the time spent in them
	freezes  timing        // per snapshot: how long its copy held mu, summed over its chunks

	// snapshotSize is the size of the snapshot raft opened last
	// (sizedSnapshots), which Restore reads: the size of the stream it
	// decodes (or of its buffer).
	snapshotSize atomic.Int64
}

var (
	_ raft.FSM         = (*stateMachine)(nil)
	_ raft.BatchingFSM = (*stateMachine)(nil)
)

// newStateMachine returns an empty adapter; observe (may be nil) receives
// the machine's events, under mu, after the adapter has counted them.
func newStateMachine(log hclog.Logger, observe func(fsm.Event)) *stateMachine {
	s := &stateMachine{log: log, changed: make(chan struct{}), levels: buildLevels, halted: make(chan struct{})}
	s.startWatches(0)
	s.m = fsm.New(func(ev fsm.Event) {
		switch ev.Kind {
		case fsm.EventGranted:
			s.handoffs.Add(1)
		case fsm.EventExpired:
			s.expired.Add(1)
		}
		if observe != nil {
			observe(ev)
		}
	})
	s.m.OnChange(func(key string) { s.hub.Record(s.applying, key) })
	return s
}

// Apply applies one log entry; raft uses ApplyBatch, this is for completeness.
func (s *stateMachine) Apply(l *raft.Log) any {
	return s.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in log order. Each LogCommand entry
// answers []fsm.Result. Configuration entries only advance the applied
// index. An entry this build cannot read halts the machine (halt.go): it
// and every later entry are answered with the *HaltError, change nothing
// and leave the applied index where it was.
func (s *stateMachine) ApplyBatch(logs []*raft.Log) []any {
	start := time.Now()
	defer func() { s.applies.observe(time.Since(start)) }()
	out := make([]any, len(logs))
	s.mu.Lock()
	var stampTerm uint64 // the raft term of the last command entry, if any
	for i, l := range logs {
		if h := s.halt.Load(); h != nil {
			out[i] = h
			continue
		}
		if l.Type == raft.LogCommand {
			s.applying = l.Index
			out[i] = s.applyEntry(l)
			if s.halt.Load() != nil {
				continue
			}
			stampTerm = max(l.Term, 1)
		}
		s.applied = max(s.applied, l.Index)
	}
	if stampTerm != 0 {
		s.noteStampLocked(stampTerm)
	}
	s.publishUsageLocked()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	if s.afterApply != nil {
		s.afterApply()
	}
	return out
}

// applyEntry applies one command entry; caller holds mu. An entry it
// cannot decode halts the machine: skipping it would let this member's
// state diverge from the others'.
func (s *stateMachine) applyEntry(l *raft.Log) any {
	cmds, err := decodeEntry(l.Data, s.levels)
	if err != nil {
		return s.stop(&HaltError{Index: l.Index, Build: buildDescription(s.levels.max), Cause: err})
	}
	results := make([]fsm.Result, len(cmds))
	for i, c := range cmds {
		results[i] = s.m.Apply(c)
	}
	return results
}

// stop halts the machine with h, unless it is halted already, and returns
// the halt's error. It logs once, at ERROR, what to do.
func (s *stateMachine) stop(h *HaltError) *HaltError {
	if !s.halt.CompareAndSwap(nil, h) {
		return s.halt.Load()
	}
	s.log.Error("halted: a committed entry (or snapshot) cannot be read; nothing from it on is applied", "index", h.Index,
		"snapshot", h.Snapshot, "error", h.Cause, "build", h.Build,
		"what_to_do", "install the raftlock version the other members run and start this member again with the same data dir; nothing is lost: the entry stays in the log (if every member runs the same version, report this as a bug)")
	close(s.halted)
	return h
}

// haltError is the machine's *HaltError once halted, else nil.
func (s *stateMachine) haltError() error {
	if h := s.halt.Load(); h != nil {
		return h
	}
	return nil
}

// appliedIndex returns the last applied index and a channel closed when it
// next advances.
func (s *stateMachine) appliedIndex() (uint64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied, s.changed
}

// noteStampLocked measures the machine's log time, the stamp of the last
// entry applied (stamps do not decrease in log order), against the
// monotonic time now, just after applying it; term is that entry's raft
// term (0: unknown). The best measure of a term is kept: an entry stamped
// long ago and committed only now (a tail left by a leader that lost its
// quorum) must not undo a closer one of the same leader. Caller holds mu.
func (s *stateMachine) noteStampLocked(term uint64) {
	if s.monotonic == nil {
		return
	}
	lead := s.m.Now() - s.monotonic()
	if s.stamped && term != 0 && term == s.stampTerm {
		lead = max(lead, s.stampLead)
	}
	s.stampTerm, s.stampLead, s.stamped = term, lead, true
}

// clockBase is the log time a new leader's clock may start from, given mono,
// its Monotonic reading now: the machine's log time, or more when this node
// has applied a stamped entry since it started. Real time since it applied
// an entry is at least the monotonic time measured since, and the entry was
// stamped before it was applied, so its stamp plus that time is a log time
// that real time has reached by the clock of the leader that stamped it:
// the leader of the last term that committed stamps, whose clock, term
// after term, runs no faster than that of any earlier leader that granted
// a lease. So a lease keeps counting down while no leader stamps. Without a
// measurement the clock starts at the log time and stands still over the
// outage. See "The log clock" in logclock.go.
func (s *stateMachine) clockBase(mono time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	base := s.m.Now()
	if s.stamped {
		base = max(base, min(s.stampLead+mono, fsm.MaxStamp))
	}
	return base
}

// now is the machine's log time.
func (s *stateMachine) now() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Now()
}

// unclaimed is how many waiters of earlier terms nobody has claimed again.
func (s *stateMachine) unclaimed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Unclaimed()
}

func (s *stateMachine) nextDeadline() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.NextDeadline()
}

// lookup reads key as seen at log time at (or the machine's own, if later),
// and the machine's log time.
func (s *stateMachine) lookup(key string, at time.Duration) (fsm.KeyState, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := max(at, s.m.Now())
	return s.m.Lookup(key, now), now
}

// read is lookup plus, for a key held as one of a multi-key grant, the
// grant's keys in byte order (nil otherwise), in one view.
func (s *stateMachine) read(key string, at time.Duration) (fsm.KeyState, []string, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := max(at, s.m.Now())
	st := s.m.Lookup(key, now)
	return st, lockfsm.SetKeys(s.m, st), now
}

// list returns, as seen at log time at (or the machine's own, if later), the
// held keys with prefix that sort after after, in byte order: at most limit
// of them (0: all), and whether more follow.
func (s *stateMachine) list(prefix, after string, limit int, at time.Duration) nodewire.ListPage {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := max(at, s.m.Now())
	var page nodewire.ListPage
	size := 0
	s.m.RangeFrom(prefix, after, now, func(key string, st fsm.KeyState) bool {
		if limit > 0 && len(page.Locks) == limit {
			page.More = true
			return false
		}
		st.Holds = st.Holds[:min(len(st.Holds), nodewire.MaxListHolds)]
		setKeys := lockfsm.SetKeys(s.m, st)
		n := nodewire.MaxListEntryLen + len(st.Holds)*nodewire.MaxHoldLen + len(setKeys)*(binary.MaxVarintLen64+fsm.MaxKeyLen) + 1
		if size += n; size > nodewire.ListPageBudget && len(page.Locks) > 0 {
			page.More = true // the rest on the next page, within a frame
			return false
		}
		page.Locks = append(page.Locks, lock.LockInfo{Key: key, KeyInfo: lockfsm.KeyInfo(st, now, setKeys)})
		return true
	})
	return page
}

// session reads session id as seen at log time at (or the machine's own,
// if later).
func (s *stateMachine) session(id fsm.Owner, at time.Duration) nodewire.SessionResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := max(at, s.m.Now())
	st := s.m.Session(id, now)
	if !st.Live {
		return nodewire.SessionResult{}
	}
	return nodewire.SessionResult{Live: true, TTL: st.TTL, Remaining: st.ExpiresAt - now, LockDelay: st.LockDelay, Keys: st.Keys}
}

// sessionState reads session id from this node's own state machine, at
// its own log time.
func (s *stateMachine) sessionState(id fsm.Owner) fsm.SessionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Session(id, 0)
}

// sessionLive reports whether session id is live at log time at (or the
// machine's own, if later).
func (s *stateMachine) sessionLive(id fsm.Owner, at time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Session(id, max(at, s.m.Now())).Live
}

// machineCounts are the machine's figures for Stats.
type machineCounts struct {
	keys      int // keys held
	waiters   int // callers queued over all keys
	sessions  int // live sessions
	locks     int // keys plus the extra holds of semaphore and read/write keys (quota.go)
	lastToken uint64
	logTime   time.Duration
}

// quotaUse is what the quotas count (quota.go).
type quotaUse struct{ locks, waiters, sessions int }

// usage is the state's size after the last apply or restore, read without
// the machine's lock (quotas' fast path: admitQuota).
func (s *stateMachine) usage() quotaUse {
	if u := s.published.Load(); u != nil {
		return *u
	}
	return quotaUse{}
}

// publishUsageLocked records the state's size for usage. Caller holds mu.
func (s *stateMachine) publishUsageLocked() {
	s.published.Store(&quotaUse{locks: s.m.Len() + s.m.ExtraHolds(), waiters: s.m.Waiters(), sessions: s.m.Sessions()})
}

// growth is how much cmd could add to the state, and the state's size,
// for the quotas' check at admission.
func (s *stateMachine) growth(cmd fsm.Command) (fsm.Growth, quotaUse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Growth(cmd), quotaUse{locks: s.m.Len() + s.m.ExtraHolds(), waiters: s.m.Waiters(), sessions: s.m.Sessions()}
}

func (s *stateMachine) counts() machineCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return machineCounts{keys: s.m.Len(), waiters: s.m.Waiters(), sessions: s.m.Sessions(), locks: s.m.Len() + s.m.ExtraHolds(), lastToken: s.m.LastToken(), logTime: s.m.Now()}
}

// freezeChunk is how many keys a snapshot copies per hold of the state
// machine's lock: an apply waits for at most one chunk's copy (a fraction of
// a millisecond), however many keys the state holds.
const freezeChunk = 4096

// Snapshot starts a copy of the state as it is now (fsm.Freezer); Persist
// copies it a chunk at a time, between applies, and writes it, in the
// newest fsm snapshot version every member reads (writeVersion), since
// raft may send it to any of them.
//
// A halted machine refuses: raft would record the snapshot as covering the
// entries it could not apply and compact them out of the log, where a
// build that reads them must find them.
func (s *stateMachine) Snapshot() (raft.FSMSnapshot, error) {
	if err := s.haltError(); err != nil {
		return nil, err
	}
	version := fsm.SnapshotVersionFor(fsm.BaselineLevel)
	if f := s.writeVersion.Load(); f != nil {
		version = (*f)() // outside mu: it reads the configuration and what members told
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fz, err := s.m.StartFreezeIn(version)
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot: %w", err)
	}
	return &snapshot{sm: s, applied: s.applied, fz: fz}, nil
}

// Restore replaces the state with a snapshot's. raft calls it at start-up
// (the latest snapshot) and when the leader sends one to a lagging follower.
//
// A snapshot of a format this build does not read (fsm.ErrBadVersion: a
// newer build wrote it; its fsm.SnapshotLevel is above this build's) halts
// the machine, as an unreadable entry does: otherwise a follower would
// refuse every snapshot the leader sends and go on looking healthy, and at start-up raft would fall back to an older
// snapshot whose log may be gone. A halted machine restores nothing.
func (s *stateMachine) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := s.haltError(); err != nil {
		return err
	}
	size := s.snapshotSize.Swap(0)
	var b []byte
	var err error
	streamed := size > snapshotHeaderLen
	if streamed {
		// The header and the machine snapshot's version byte, which says
		// whether this build reads it; the rest is decoded as it is read.
		b = make([]byte, snapshotHeaderLen+1)
		if _, err := io.ReadFull(rc, b); err != nil {
			return fmt.Errorf("cluster: reading snapshot: %w", err)
		}
	} else if b, err = readSnapshot(rc, size); err != nil {
		return fmt.Errorf("cluster: reading snapshot: %w", err)
	}
	applied, state, err := decodeSnapshot(b)
	if err == nil && fsm.SnapshotLevel(state) > s.levels.max {
		// As an entry above this build's level (decodeEntry).
		err = fmt.Errorf("%w: machine snapshot version %d needs command level %d", fsm.ErrBadVersion, state[0], fsm.SnapshotLevel(state))
	}
	if errors.Is(err, fsm.ErrBadVersion) {
		return s.refuseNewer(rc, applied, err)
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	if streamed {
		err = s.m.RestoreFrom(io.MultiReader(bytes.NewReader(state), rc), size-snapshotHeaderLen)
	} else {
		err = s.m.Restore(state)
	}
	if errors.Is(err, fsm.ErrBadVersion) {
		s.mu.Unlock()
		return s.refuseNewer(rc, applied, err)
	}
	if err == nil {
		s.applied = applied
		s.hub.Reset(applied) // the state was replaced: every watch answers
		s.noteStampLocked(0)
		s.publishUsageLocked()
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("cluster: restoring snapshot: %w", err)
	}
	s.restores.Add(1)
	return nil
}

// refuseNewer halts the machine on a snapshot of a format this build does
// not read (err matches fsm.ErrBadVersion) — unless the snapshot is only
// damaged: the snapshot store checks a snapshot's checksum as it is read
// and fails the read at its end when it does not match, so the rest is
// read first, and a damaged version byte fails the restore (raft goes on
// to an older snapshot) instead of halting the node as a newer format does.
func (s *stateMachine) refuseNewer(rc io.Reader, applied uint64, err error) error {
	if _, damage := io.Copy(io.Discard, rc); damage != nil {
		return fmt.Errorf("cluster: reading snapshot: %w", damage)
	}
	return s.stop(&HaltError{Index: applied, Snapshot: true, Build: buildDescription(s.levels.max), Cause: err})
}

// Restore decodes a snapshot as it reads it (fsm's RestoreFrom, through a
// window of a MiB) when raft's snapshot store told its size
// (sizedSnapshots), which it does for every snapshot it restores: a buffer
// of the whole snapshot, 43 bytes a plain lock, is memory the machine's
// restore would touch for the first time beside its own, and page faults
// cost as much as decoding at millions of locks. That size is raft's
// record of the snapshot it opened last: on a member that has just stopped
// leading, a snapshot opened to be sent at the same moment as another
// arrives to be installed could give the wrong one, and the restore is
// then refused (a stream longer or shorter than its size), not misread;
// the leader sends the snapshot again. At start-up nothing else opens
// snapshots.
//
// readSnapshot reads a snapshot whole into one buffer of size bytes, the
// size raft's snapshot store gives for the snapshot it opened, instead of
// io.ReadAll's growing chunks and final copy: twice the snapshot's bytes
// allocated, page-faulted in and given back to the OS, a fifth of a
// restart's CPU at a million locks. A size that turns out wrong (another
// snapshot was opened meanwhile, or none: size 0) only costs a copy.
func readSnapshot(r io.Reader, size int64) ([]byte, error) {
	if size <= 0 || size > maxSnapshotBuffer {
		return io.ReadAll(r)
	}
	b := make([]byte, size+1) // the extra byte finds the end without another read
	n, err := io.ReadFull(r, b)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return b[:n], nil
	case err != nil:
		return nil, err
	}
	rest, err := io.ReadAll(r) // longer than the size said
	return append(b, rest...), err
}

// maxSnapshotBuffer bounds the size readSnapshot allocates at once on the
// word of the snapshot's metadata (a damaged meta.json must not make a node
// allocate gigabytes it never reads); larger snapshots (some 25 million
// locks) grow as they are read.
const maxSnapshotBuffer = 1 << 30

// sizedSnapshots tells the state machine the size of each snapshot raft
// opens, which raft does right before restoring one, at start-up and when a
// follower installs the leader's (raft passes Restore a reader only).
type sizedSnapshots struct {
	raft.SnapshotStore
	sm *stateMachine
}

func (s sizedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err == nil {
		s.sm.snapshotSize.Store(meta.Size)
	}
	return meta, rc, err
}

// snapshotVersion prefixes our snapshot format: version, applied index
// (8 bytes big endian), then the machine's own versioned snapshot.
const snapshotVersion = 1

// snapshotHeaderLen is the bytes before the machine's snapshot.
const snapshotHeaderLen = 9

var errBadSnapshot = errors.New("cluster: malformed snapshot")

type snapshot struct {
	sm      *stateMachine
	applied uint64
	fz      *fsm.Freezer
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("cluster: writing snapshot: %w", err)
	}
	return sink.Close()
}

// write copies the state a chunk at a time under the state machine's lock
// and writes each chunk outside it. Freeze times the holds, summed.
func (s *snapshot) write(w io.Writer) error {
	var hdr [9]byte
	hdr[0] = snapshotVersion
	binary.BigEndian.PutUint64(hdr[1:], s.applied)
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	var held time.Duration
	defer func() { s.sm.freezes.observe(held) }()
	for {
		s.sm.mu.Lock()
		start := time.Now()
		done, err := s.fz.Next(freezeChunk)
		held += time.Since(start)
		s.sm.mu.Unlock()
		if err != nil {
			return err
		}
		if err := s.fz.Flush(w); err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// Release stops a copy that Persist did not finish, so the state machine
// no longer keeps the state of its start.
func (s *snapshot) Release() {
	s.sm.mu.Lock()
	s.fz.Stop()
	s.sm.mu.Unlock()
}

func decodeSnapshot(b []byte) (applied uint64, state []byte, err error) {
	if len(b) < snapshotHeaderLen {
		return 0, nil, fmt.Errorf("%w: %d bytes", errBadSnapshot, len(b))
	}
	if b[0] != snapshotVersion {
		return 0, nil, fmt.Errorf("%w: version %d: %w", errBadSnapshot, b[0], fsm.ErrBadVersion)
	}
	return binary.BigEndian.Uint64(b[1:snapshotHeaderLen]), b[snapshotHeaderLen:], nil
}
