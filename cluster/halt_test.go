package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/lock"
)

// newerAcquireAll plays a build in which acquire-all is a new command, of
// level 2: a member whose levels.max is 1 is an older build that cannot
// read it.
func newerAcquireAll(c fsm.Command) int {
	if c.Op == fsm.OpAcquireAll {
		return 2
	}
	return fsm.CommandLevel(c)
}

// olderBuild is the levels of a build that reads only the baseline, in a
// world where acquire-all is of level 2.
func olderBuild() *commandLevels {
	return &commandLevels{max: fsm.BaselineLevel, levelOf: newerAcquireAll}
}

// A member that meets a committed entry it cannot read stops there: it
// applies nothing after it, refuses reads, leaves raft (no vote, no lead),
// says which entry and what to do, and the others go on. Started again on
// the same build it halts at the same entry; started with a build that
// reads it, it catches up to the same state as the others.
func TestMemberHaltsAtAnEntryItCannotRead(t *testing.T) {
	c := newCluster(t, 3, nil)
	// n2 runs the "older build". The others read acquire-all at the
	// baseline, as they would if the leader had no level check: this test
	// is about what a member does when it meets one anyway.
	c.cfgs[2].levels = olderBuild()
	c.stop(2)
	old := c.restart(2)
	leader := c.leader()
	require.NotEqual(t, old, leader, "the older member must not lead for this test")

	ctx := testCtx(t)
	_, before := acquire(t, leader, "before", time.Minute)
	waitApplied(t, old, leader)
	beforeApplied, _ := old.sm.appliedIndex()

	set, err := leader.AcquireAll(ctx, lock.AcquireRequest{Key: "x", Keys: []string{"x", "y"}, Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err, "the newer members commit it")
	_, after := acquire(t, leader, "after", time.Minute)
	assert.Greater(t, after.Token, set.Token)

	select {
	case <-old.Done():
	case <-time.After(patience):
		t.Fatal("the older member did not stop")
	}
	var halt *HaltError
	require.ErrorAs(t, old.Err(), &halt)
	assert.ErrorIs(t, old.Err(), ErrHalted)
	assert.ErrorIs(t, old.Err(), fsm.ErrUnknownOp)
	assert.Contains(t, old.Err().Error(), "install the version the other members run")
	assert.Contains(t, old.Err().Error(), "same data dir")
	assert.False(t, halt.Snapshot)
	assert.Greater(t, halt.Index, beforeApplied)

	// The entry it names is the acquire-all the others committed.
	var entry raft.Log
	require.NoError(t, leader.store.GetLog(halt.Index, &entry))
	cmds, err := fsm.DecodeBatch(entry.Data)
	require.NoError(t, err)
	require.Len(t, cmds, 1)
	assert.Equal(t, fsm.OpAcquireAll, cmds[0].Op)

	// Nothing at or after it was applied.
	applied, _ := old.sm.appliedIndex()
	assert.Less(t, applied, halt.Index)
	st, _ := old.sm.lookup("x", 0)
	assert.Zero(t, st.Token, "the acquire-all was not applied")
	st, _ = old.sm.lookup("after", 0)
	assert.Zero(t, st.Token, "nor anything after it")
	st, _ = old.sm.lookup("before", 0)
	assert.Equal(t, before.Token, st.Token, "what came before was")
	assert.Less(t, old.sm.counts().lastToken, set.Token)

	// Reads are refused, saying why; it neither votes nor leads.
	_, err = old.InspectStale("before")
	assert.ErrorIs(t, err, lock.ErrClosed)
	assert.ErrorIs(t, err, ErrHalted)
	_, err = old.Inspect(ctx, "before")
	assert.ErrorIs(t, err, ErrHalted)
	_, err = old.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute})
	assert.ErrorIs(t, err, ErrHalted)
	// Done is closed when the halt's Close begins; Close returns once it
	// has ended (raft shut down included).
	old.Close()
	assert.Equal(t, raft.Shutdown, old.State())
	assert.Contains(t, old.Readiness().Reason, "cannot read log entry")

	// The others go on.
	_, later := acquire(t, leader, "later", time.Minute)
	assert.Greater(t, later.Token, after.Token)

	// The same build again: it halts at the same entry.
	require.NoError(t, old.Close())
	c.nodes[2] = nil
	again := c.restart(2)
	select {
	case <-again.Done():
	case <-time.After(patience):
		t.Fatal("the older member, started again, did not stop")
	}
	var haltAgain *HaltError
	require.ErrorAs(t, again.Err(), &haltAgain)
	assert.Equal(t, halt.Index, haltAgain.Index)
	require.NoError(t, again.Close())
	c.nodes[2] = nil

	// A build that reads it: it applies everything, to the others' state.
	c.cfgs[2].levels = nil
	upgraded := c.restart(2)
	leader = c.leader()
	waitApplied(t, upgraded, leader)
	assert.NoError(t, upgraded.Err())
	require.Eventually(t, func() bool {
		return bytes.Equal(leader.sm.machineSnapshot(), upgraded.sm.machineSnapshot())
	}, patience, 10*time.Millisecond, "the upgraded member's state is the leader's")
	info, err := upgraded.InspectStale("y")
	require.NoError(t, err)
	assert.Equal(t, set.Token, info.Token)
}

// A snapshot of a format this build cannot read halts the machine (rather
// than being refused again and again while the member looks healthy), and
// a halted machine applies, restores and snapshots nothing.
func TestStateMachineHaltsOnSnapshotOfNewerFormat(t *testing.T) {
	sm := newStateMachine(testLogger("sm"), nil)
	snap := []byte{snapshotVersion + 1, 0, 0, 0, 0, 0, 0, 0, 9}
	err := sm.Restore(nopCloser{bytes.NewReader(snap)})
	var halt *HaltError
	require.ErrorAs(t, err, &halt)
	assert.True(t, halt.Snapshot)
	assert.ErrorIs(t, err, fsm.ErrBadVersion)
	assert.Contains(t, err.Error(), "cannot read a snapshot")
	select {
	case <-sm.halted:
	default:
		t.Fatal("halted not closed")
	}

	// Halted: nothing applied, nothing snapshotted.
	b, err := fsm.AppendBatch(nil, []fsm.Command{{Op: fsm.OpTick, Stamp: time.Second}})
	require.NoError(t, err)
	out := sm.ApplyBatch([]*raft.Log{{Index: 5, Term: 1, Type: raft.LogCommand, Data: b}})
	assert.ErrorIs(t, out[0].(error), ErrHalted)
	applied, _ := sm.appliedIndex()
	assert.Zero(t, applied)
	assert.Zero(t, sm.now())
	_, err = sm.Snapshot()
	assert.ErrorIs(t, err, ErrHalted)
	good := newStateMachine(testLogger("sm"), nil)
	var buf bytes.Buffer
	s, err := good.Snapshot()
	require.NoError(t, err)
	require.NoError(t, s.(*snapshot).write(&buf))
	assert.ErrorIs(t, sm.Restore(nopCloser{&buf}), ErrHalted, "a halted machine restores nothing")
}

// The machine's own snapshot format, inside the adapter's, counts the
// same; its header still says up to which entry.
func TestStateMachineHaltsOnMachineSnapshotOfNewerFormat(t *testing.T) {
	sm := newStateMachine(testLogger("sm"), nil)
	snap := []byte{snapshotVersion, 0, 0, 0, 0, 0, 0, 0, 9, 99}
	err := sm.Restore(nopCloser{bytes.NewReader(snap)})
	var halt *HaltError
	require.ErrorAs(t, err, &halt)
	assert.Equal(t, uint64(9), halt.Index)
	assert.ErrorIs(t, err, fsm.ErrBadVersion)
	assert.Contains(t, err.Error(), "cannot read the snapshot of the log up to entry 9")

	// A snapshot that is merely damaged is refused without halting: at
	// start-up raft then tries an older one.
	fresh := newStateMachine(testLogger("sm"), nil)
	err = fresh.Restore(nopCloser{bytes.NewReader([]byte{snapshotVersion, 0})})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrHalted)
	assert.NoError(t, fresh.haltError())
}

// An entry that is not a batch at all halts the machine too (never
// skipped), and so does every entry after it, configuration entries
// included: the applied index stays before it.
func TestStateMachineHaltsOnUndecodableEntry(t *testing.T) {
	sm := newStateMachine(testLogger("sm"), nil)
	b, err := fsm.AppendBatch(nil, []fsm.Command{{Op: fsm.OpTick, Stamp: time.Second}})
	require.NoError(t, err)
	out := sm.ApplyBatch([]*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: b},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte{1, 1, 200, 0}},
		{Index: 3, Term: 1, Type: raft.LogConfiguration},
		{Index: 4, Term: 1, Type: raft.LogCommand, Data: b},
	})
	_, ok := out[0].([]fsm.Result)
	assert.True(t, ok, "the entry before is applied")
	for i := 1; i < 4; i++ {
		err, _ := out[i].(error)
		var halt *HaltError
		require.ErrorAs(t, err, &halt, "entry %d", i+1)
		assert.Equal(t, uint64(2), halt.Index)
	}
	applied, _ := sm.appliedIndex()
	assert.Equal(t, uint64(1), applied)
	assert.Equal(t, time.Second, sm.now())
	assert.ErrorIs(t, sm.haltError(), fsm.ErrUnknownOp)
}

type nopCloser struct {
	r interface{ Read([]byte) (int, error) }
}

func (n nopCloser) Read(p []byte) (int, error) { return n.r.Read(p) }
func (nopCloser) Close() error                 { return nil }

// waitApplied waits until n has applied every entry leader had committed
// when it was called.
func waitApplied(t *testing.T, n, leader *Node) {
	t.Helper()
	want := leader.raft.AppliedIndex()
	require.Eventually(t, func() bool { return n.raft.AppliedIndex() >= want }, patience, 5*time.Millisecond,
		"%s did not apply up to %d", n.ID(), want)
}

// machineSnapshot is the machine's state as fsm encodes it.
func (s *stateMachine) machineSnapshot() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Snapshot()
}

// A node whose latest snapshot is of a format its build cannot read (a
// newer build wrote it) refuses to start, saying so, rather than fall back
// to an older snapshot whose log may be gone.
func TestNewRefusesSnapshotOfNewerFormat(t *testing.T) {
	cfg := testConfig(t, "n0")
	cfg.Bootstrap = true
	n, err := New(cfg)
	require.NoError(t, err)
	acquire(t, n, "k", time.Minute)
	require.NoError(t, n.raft.Snapshot().Error())
	require.NoError(t, n.Close())

	// A copy of the snapshot as a newer build would write it: same index,
	// taken later, so raft restores it first.
	store, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 3, testLogger("snaps"))
	require.NoError(t, err)
	metas, err := store.List()
	require.NoError(t, err)
	require.NotEmpty(t, metas)
	meta, rc, err := store.Open(metas[0].ID)
	require.NoError(t, err)
	var state bytes.Buffer
	_, err = state.ReadFrom(rc)
	require.NoError(t, err)
	rc.Close()
	b := state.Bytes()
	b[0] = snapshotVersion + 1
	_, trans := raft.NewInmemTransport("")
	sink, err := store.Create(meta.Version, meta.Index, meta.Term, meta.Configuration, meta.ConfigurationIndex, trans)
	require.NoError(t, err)
	_, err = sink.Write(b)
	require.NoError(t, err)
	require.NoError(t, sink.Close())

	cfg.Bootstrap = false
	_, err = New(cfg)
	var halt *HaltError
	require.ErrorAs(t, err, &halt)
	assert.True(t, halt.Snapshot)
	assert.ErrorIs(t, err, fsm.ErrBadVersion)
	assert.Contains(t, err.Error(), "cannot read a snapshot")
	assert.Contains(t, err.Error(), "install the version the other members run")

	// Every restore is refused once halted: started again, the same.
	_, err = New(cfg)
	assert.ErrorIs(t, err, ErrHalted)
}

// A damaged latest snapshot is not taken for a newer build's (which halts
// the node): the snapshot store checks each snapshot's checksum as it is
// read, and a restore that fails it leaves raft to go on from the older
// snapshot and the log, as a snapshot refused before any read did.
func TestNewGoesOnFromAnOlderSnapshotWhenTheLatestIsDamaged(t *testing.T) {
	for name, at := range map[string]func(size int64) int64{
		"its version byte": func(int64) int64 { return 0 },
		"in the middle":    func(size int64) int64 { return size / 2 },
		"its last byte":    func(size int64) int64 { return size - 1 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t, "n0")
			cfg.Bootstrap = true
			n, err := New(cfg)
			require.NoError(t, err)
			_, first := acquire(t, n, "first", time.Hour)
			require.NoError(t, n.raft.Snapshot().Error())
			_, second := acquire(t, n, "second", time.Hour)
			fillPastAChunk(t, n)
			require.NoError(t, n.raft.Snapshot().Error())
			require.NoError(t, n.Close())

			store, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 3, testLogger("snaps"))
			require.NoError(t, err)
			metas, err := store.List()
			require.NoError(t, err)
			require.Len(t, metas, 2)
			path := filepath.Join(cfg.DataDir, "snapshots", metas[0].ID, "state.bin")
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			var b [1]byte
			_, err = f.ReadAt(b[:], at(metas[0].Size))
			require.NoError(t, err)
			b[0] ^= 0x7f
			_, err = f.WriteAt(b[:], at(metas[0].Size))
			require.NoError(t, err)
			require.NoError(t, f.Close())

			cfg.Bootstrap = false
			n, err = New(cfg)
			require.NoError(t, err, "a damaged snapshot halted the node or kept it from starting")
			t.Cleanup(func() { n.Close() })
			for key, lease := range map[string]lock.Lease{"first": first, "second": second} {
				info, err := n.Inspect(context.Background(), key)
				require.NoError(t, err)
				require.True(t, info.Locked, key)
				require.Equal(t, lease.Token, info.Token, key)
			}
		})
	}
}

// fillPastAChunk holds locks with long metadata until a snapshot takes
// more than the MiB the snapshot store reads and checks at a time, so
// that a restore decodes the snapshot's start before the store has read
// its end.
func fillPastAChunk(t *testing.T, n *Node) {
	meta := strings.Repeat("m", lock.MaxMetadataLen)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 1200; i += 16 {
				_, err := n.Acquire(testCtx(t), lock.AcquireRequest{Key: fmt.Sprintf("filler-%04d", i), Owner: lock.NewOwner(), TTL: time.Hour, Metadata: meta})
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
}
