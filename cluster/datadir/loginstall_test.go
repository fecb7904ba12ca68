package datadir

import (
	"bytes"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// appliedFSM records the indexes raft applies, and closes reached once it
// applied index want.
type appliedFSM struct {
	mu      sync.Mutex
	applied []uint64
	want    uint64
	reached chan struct{}
}

func (f *appliedFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, l.Index)
	if l.Index == f.want {
		close(f.reached)
	}
	return nil
}

func (f *appliedFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, raft.ErrNothingNewToSnapshot }

func (f *appliedFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	_, err := io.Copy(io.Discard, r)
	return err
}

// A follower whose log reaches past a snapshot it is sent keeps the entries
// past it. raft (v1.7.3) empties a log like raft-wal's (IsMonotonic) after
// installing a snapshot, yet goes on believing the log ends where it ended:
// a leader whose log ends there too (a new leader, elected with the same
// entries) then appends and commits, and raft, reading the entries after the
// snapshot to apply them, finds none and panics ("log not found"). The
// leader's side is played here through raft's in-memory transport.
func TestFollowerKeepsItsLogPastAnInstalledSnapshot(t *testing.T) {
	dir := t.TempDir()
	logger := testLogger("follower")
	store, _, err := OpenLogStore(dir, LogStoreWAL, 0, logger, nil)
	require.NoError(t, err)
	fileSnaps, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
	require.NoError(t, err)
	snaps, err := store.TrackDurability(dir, fileSnaps)
	require.NoError(t, err)
	logs, err := raft.NewLogCache(512, store)
	require.NoError(t, err)

	followerAddr, followerTrans := raft.NewInmemTransportWithTimeout("follower", patience)
	leaderAddr, leaderTrans := raft.NewInmemTransportWithTimeout("leader", patience)
	leaderTrans.Connect(followerAddr, followerTrans)
	followerTrans.Connect(leaderAddr, leaderTrans)

	rc := raft.DefaultConfig()
	rc.LocalID = "follower"
	// No election while the test plays the leader.
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = time.Hour, time.Hour, time.Hour
	rc.Logger = logger
	fsm := &appliedFSM{want: 101, reached: make(chan struct{})}
	r, err := raft.NewRaft(rc, fsm, logs, store, snaps, followerTrans)
	require.NoError(t, err)
	store.SetAppliedIndex(r.AppliedIndex)
	t.Cleanup(func() {
		require.NoError(t, r.Shutdown().Error())
		require.NoError(t, followerTrans.Close())
		require.NoError(t, leaderTrans.Close())
		require.NoError(t, store.Close())
	})

	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader"), Addr: []byte(leaderAddr)}
	entries := func(from, to, term uint64) []*raft.Log {
		var out []*raft.Log
		for i := from; i <= to; i++ {
			out = append(out, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte("x")})
		}
		return out
	}
	appendEntries := func(req *raft.AppendEntriesRequest) {
		t.Helper()
		var resp raft.AppendEntriesResponse
		require.NoError(t, leaderTrans.AppendEntries("follower", followerAddr, req, &resp))
		require.True(t, resp.Success, "append after %d refused", req.PrevLogEntry)
	}

	// The follower stores entries 1-100 and learns that 10 are committed.
	appendEntries(&raft.AppendEntriesRequest{RPCHeader: header, Term: 1, Entries: entries(1, 100, 1), LeaderCommitIndex: 10})

	// A leader that thinks the follower is far behind (its answers were
	// lost) sends its snapshot, at index 50.
	configuration := raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: "leader", Address: leaderAddr},
		{Suffrage: raft.Voter, ID: "follower", Address: followerAddr},
	}}
	data := []byte("state at index 50")
	var snapResp raft.InstallSnapshotResponse
	require.NoError(t, leaderTrans.InstallSnapshot("follower", followerAddr, &raft.InstallSnapshotRequest{
		RPCHeader: header, SnapshotVersion: raft.SnapshotVersionMax, Term: 1, LastLogIndex: 50, LastLogTerm: 1,
		Configuration: raft.EncodeConfiguration(configuration), ConfigurationIndex: 1, Size: int64(len(data)),
	}, &snapResp, bytes.NewReader(data)))
	require.True(t, snapResp.Success)

	// raft still counts on entries up to 100: the log must serve them.
	require.Equal(t, uint64(100), r.LastIndex())
	last, err := store.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(100), last, "the log past the snapshot was deleted")
	for i := uint64(51); i <= 100; i++ {
		var l raft.Log
		require.NoError(t, store.GetLog(i, &l), "index %d", i)
	}

	// A new leader, elected with the same log, appends and commits from
	// where both logs end.
	appendEntries(&raft.AppendEntriesRequest{RPCHeader: header, Term: 2, PrevLogEntry: 100, PrevLogTerm: 1,
		Entries: entries(101, 101, 2), LeaderCommitIndex: 101})
	select {
	case <-fsm.reached:
	case <-time.After(patience):
		t.Fatal("index 101 was not applied")
	}
	fsm.mu.Lock()
	defer fsm.mu.Unlock()
	var want []uint64
	for i := uint64(1); i <= 10; i++ {
		want = append(want, i)
	}
	for i := uint64(51); i <= 101; i++ {
		want = append(want, i)
	}
	assert.Equal(t, want, fsm.applied)
}

// Entries past an installed snapshot stay only when the log holds the
// snapshot's last entry with the snapshot's term; otherwise the whole log
// goes, as raft asks. The snapshot is the one raft applied last, not a newer
// one of this node's own: keeping the log only from there would leave a gap
// after the state raft goes on from.
func TestDeletionAfterSnapshotInstallKeepsOnlyAnAgreeingLog(t *testing.T) {
	for _, tc := range []struct {
		name      string
		snapTerm  uint64
		ownAt     uint64 // a newer snapshot of the node's own; 0: none
		wantFirst uint64
		wantLast  uint64
	}{
		{"agrees", 1, 0, 50, 100},
		{"disagrees", 2, 0, 0, 0},
		{"agrees, with a newer snapshot of its own", 1, 80, 50, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			store, _, err := OpenLogStore(dir, LogStoreWAL, 0, testLogger("store"), nil)
			require.NoError(t, err)
			defer store.Close()
			fileSnaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
			require.NoError(t, err)
			snaps, err := store.TrackDurability(dir, fileSnaps)
			require.NoError(t, err)
			var logs []*raft.Log
			for i := uint64(1); i <= 100; i++ {
				logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")})
			}
			require.NoError(t, store.StoreLogs(logs))
			if tc.ownAt != 0 {
				sink, err := snaps.Create(raft.SnapshotVersionMax, tc.ownAt, 1, raft.Configuration{}, 1, nil)
				require.NoError(t, err)
				require.NoError(t, sink.Close())
			}
			sink, err := snaps.Create(raft.SnapshotVersionMax, 50, tc.snapTerm, raft.Configuration{}, 1, nil)
			require.NoError(t, err)
			require.NoError(t, sink.Close())
			store.SetAppliedIndex(func() uint64 { return 50 }) // raft restored it

			require.NoError(t, store.DeleteRange(1, 100)) // what raft does after installing it
			first, err := store.FirstIndex()
			require.NoError(t, err)
			last, err := store.LastIndex()
			require.NoError(t, err)
			assert.Equal(t, [2]uint64{tc.wantFirst, tc.wantLast}, [2]uint64{first, last})
		})
	}
}
