package raft

// Tests of the fork's change (doc.go): a leader that writes in parallel
// counts itself in the commit quorum only once its write is durable.

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// splitStore is an InmemStore that can split a write, remembering which
// of its entries a power loss would keep (durable) and which it would drop
// (stored without a sync since). SyncLogs can be held open, made to fail,
// and reports when it starts.
type splitStore struct {
	*InmemStore

	mu      sync.Mutex
	written uint64        // the last index stored
	durable uint64        // the last index a power loss keeps
	hold    chan struct{} // when not nil, SyncLogs waits until it is closed
	fail    error         // SyncLogs fails with it
	epoch   int           // power losses so far: a sync in flight across one never finishes
	syncs   chan struct{} // one value each time a SyncLogs starts (dropped when full)
}

func newSplitStore() *splitStore {
	return &splitStore{InmemStore: NewInmemStore(), syncs: make(chan struct{}, 16)}
}

func (s *splitStore) StoreLogs(logs []*Log) error {
	if err := s.InmemStore.StoreLogs(logs); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written = logs[len(logs)-1].Index
	s.durable = s.written // a whole write syncs what came before it too
	return nil
}

func (s *splitStore) StoreLog(log *Log) error { return s.StoreLogs([]*Log{log}) }

func (s *splitStore) StoreLogsNoSync(logs []*Log) error {
	if err := s.InmemStore.StoreLogs(logs); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written = logs[len(logs)-1].Index
	return nil
}

func (s *splitStore) SyncLogs() error {
	s.mu.Lock()
	target, hold, epoch := s.written, s.hold, s.epoch
	s.mu.Unlock()
	select {
	case s.syncs <- struct{}{}:
	default:
	}
	if hold != nil {
		<-hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.epoch != epoch:
		return errors.New("power lost")
	case s.fail != nil:
		return s.fail
	}
	s.durable = max(s.durable, target)
	return nil
}

func (s *splitStore) DeleteRange(min, max uint64) error {
	if err := s.InmemStore.DeleteRange(min, max); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if max >= s.written { // the tail went
		s.written = min - 1
		s.durable = minUint64(s.durable, s.written)
	}
	return nil
}

func minUint64(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return b
}

// holdSyncs makes the next SyncLogs calls wait; the function returned lets
// them go on.
func (s *splitStore) holdSyncs() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.hold = ch
	s.mu.Unlock()
	for len(s.syncs) > 0 { // the starts of earlier syncs
		<-s.syncs
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.hold = nil
			s.mu.Unlock()
			close(ch)
		})
	}
}

// powerLoss drops every entry stored since the last sync that finished.
func (s *splitStore) powerLoss() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch++
	if s.written > s.durable {
		s.InmemStore.DeleteRange(s.durable+1, s.written)
		s.written = s.durable
	}
}

func (s *splitStore) state() (written, durable uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written, s.durable
}

type splitNode struct {
	raft  *Raft
	store *splitStore
	snaps *InmemSnapshotStore
	trans *InmemTransport
	fsm   *MockFSM
	conf  *Config
}

// startSplitCluster starts n voters whose leader writes in parallel, each
// on a splitStore, all connected.
func startSplitCluster(t *testing.T, n int) []*splitNode {
	t.Helper()
	nodes := make([]*splitNode, n)
	var config Configuration
	for i := range nodes {
		addr, trans := NewInmemTransportWithTimeout("", 5*time.Second)
		conf := inmemConfig(t)
		conf.LocalID = ServerID(fmt.Sprintf("node%d", i))
		conf.Logger = newTestLoggerWithPrefix(t, string(conf.LocalID))
		conf.LeaderWritesInParallel = true
		nodes[i] = &splitNode{store: newSplitStore(), snaps: NewInmemSnapshotStore(), trans: trans, fsm: &MockFSM{}, conf: conf}
		config.Servers = append(config.Servers, Server{Suffrage: Voter, ID: conf.LocalID, Address: addr})
	}
	for _, a := range nodes {
		for _, b := range nodes {
			a.trans.Connect(b.trans.LocalAddr(), b.trans)
		}
	}
	for _, nd := range nodes {
		require.NoError(t, BootstrapCluster(nd.conf, nd.store, nd.store, nd.snaps, nd.trans, config))
		r, err := NewRaft(nd.conf, nd.fsm, nd.store, nd.store, nd.snaps, nd.trans)
		require.NoError(t, err)
		nd.raft = r
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			// A sync held open would keep a main loop from ending.
			nd.store.mu.Lock()
			if nd.store.hold != nil {
				close(nd.store.hold)
				nd.store.hold = nil
			}
			nd.store.mu.Unlock()
			nd.raft.Shutdown().Error()
		}
	})
	return nodes
}

func waitForSplitLeader(t *testing.T, nodes []*splitNode) *splitNode {
	t.Helper()
	var leader *splitNode
	require.Eventually(t, func() bool {
		leader = nil
		for _, nd := range nodes {
			if nd.raft.State() == Leader {
				if leader != nil {
					return false
				}
				leader = nd
			}
		}
		return leader != nil
	}, 10*time.Second, 5*time.Millisecond, "no leader")
	return leader
}

// partition cuts a node off from every other.
func partition(nodes []*splitNode, cut *splitNode) {
	for _, nd := range nodes {
		if nd != cut {
			nd.trans.Disconnect(cut.trans.LocalAddr())
			cut.trans.Disconnect(nd.trans.LocalAddr())
		}
	}
}

// answer is f's answer, once it has one (f.Error must not be called again).
func answer(f Future) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }()
	return ch
}

// notCommittedWindow is how long a test watches for a commit that must not
// happen: many commit timeouts and heartbeats of inmemConfig, so that a
// leader counting itself too early would have committed.
const notCommittedWindow = 300 * time.Millisecond

// The only voter's entries commit only once its own sync returned.
func TestLeaderSync_SoleVoterCommitsAfterItsSync(t *testing.T) {
	nodes := startSplitCluster(t, 1)
	leader := waitForSplitLeader(t, nodes)
	require.NoError(t, leader.raft.Apply([]byte("before"), time.Second).Error())

	release := leader.store.holdSyncs()
	f := leader.raft.Apply([]byte("x"), 0)
	<-leader.store.syncs // written, and its sync started
	written, durable := leader.store.state()
	require.Less(t, durable, written)
	ans := answer(f)
	select {
	case err := <-ans:
		t.Fatalf("the only voter answered (%v) for an entry its sync had not made durable", err)
	case <-time.After(notCommittedWindow):
	}
	require.Less(t, leader.raft.CommitIndex(), written)

	release()
	require.NoError(t, <-ans)
	_, durable = leader.store.state()
	require.GreaterOrEqual(t, durable, f.(IndexFuture).Index())
}

// Three voters, one cut off: with the leader's sync held, its unsynced
// write and the other follower's durable copy are two of three copies but
// only one durable one, short of the quorum of two; the entry must not
// commit. Once the leader's sync returns, it does.
func TestLeaderSync_NotCountedBeforeItsSync(t *testing.T) {
	nodes := startSplitCluster(t, 3)
	leader := waitForSplitLeader(t, nodes)
	require.NoError(t, leader.raft.Apply([]byte("before"), time.Second).Error())
	var follower, cut *splitNode
	for _, nd := range nodes {
		switch {
		case nd == leader:
		case follower == nil:
			follower = nd
		default:
			cut = nd
		}
	}
	partition(nodes, cut)

	release := leader.store.holdSyncs()
	f := leader.raft.Apply([]byte("x"), 0)
	<-leader.store.syncs
	index, _ := leader.store.state()
	require.Eventually(t, func() bool { _, d := follower.store.state(); return d >= index }, 5*time.Second, time.Millisecond,
		"the follower did not store the entry")
	ans := answer(f)
	select { // the follower's answer arrives meanwhile
	case err := <-ans:
		t.Fatalf("answered (%v) on the leader's unsynced write and one follower", err)
	case <-time.After(notCommittedWindow):
	}
	require.Less(t, leader.raft.CommitIndex(), index)

	release()
	require.NoError(t, <-ans)
}

// The leader does not wait for its own sync when the followers are a
// quorum by themselves: the entry commits while the leader's sync is held.
func TestLeaderSync_FollowersCommitWhileLeaderSyncs(t *testing.T) {
	nodes := startSplitCluster(t, 3)
	leader := waitForSplitLeader(t, nodes)
	require.NoError(t, leader.raft.Apply([]byte("before"), time.Second).Error())

	release := leader.store.holdSyncs()
	defer release()
	f := leader.raft.Apply([]byte("x"), 0)
	require.NoError(t, f.Error())
	_, durable := leader.store.state()
	require.Less(t, durable, f.(IndexFuture).Index(), "the leader's sync was not held")
}

// A leader whose sync fails steps down, and the cluster goes on once the
// disk works again.
func TestLeaderSync_FailedSyncStepsDown(t *testing.T) {
	nodes := startSplitCluster(t, 3)
	leader := waitForSplitLeader(t, nodes)
	require.NoError(t, leader.raft.Apply([]byte("before"), time.Second).Error())

	leader.store.mu.Lock()
	leader.store.fail = errors.New("disk failed")
	leader.store.mu.Unlock()
	leader.raft.Apply([]byte("x"), 0)
	deadline := time.After(10 * time.Second)
	for stepped := false; !stepped; {
		select {
		case isLeader := <-leader.raft.LeaderCh():
			stepped = !isLeader
		case <-deadline:
			t.Fatal("the leader whose sync failed is still leading")
		}
	}
	leader.store.mu.Lock()
	leader.store.fail = nil
	leader.store.mu.Unlock()

	require.NoError(t, waitForSplitLeader(t, nodes).raft.Apply([]byte("after"), 5*time.Second).Error())
}

// A node that led may hold entries it wrote without a sync when another
// leader sends them again; it answers success only once they are durable.
func TestLeaderSync_FormerLeaderAcksOnlyDurableEntries(t *testing.T) {
	nodes := startSplitCluster(t, 1)
	leader := waitForSplitLeader(t, nodes)
	require.NoError(t, leader.raft.Apply([]byte("before"), time.Second).Error())

	release := leader.store.holdSyncs()
	defer release()
	leader.raft.Apply([]byte("x"), 0)
	<-leader.store.syncs // the leader's own sync of x, held
	index, _ := leader.store.state()
	var x, prev Log
	require.NoError(t, leader.store.GetLog(index, &x))
	require.NoError(t, leader.store.GetLog(index-1, &prev))

	// Another leader, of a later term, sends x again.
	addr, other := NewInmemTransportWithTimeout("", 10*time.Second)
	other.Connect(leader.trans.LocalAddr(), leader.trans)
	req := &AppendEntriesRequest{
		RPCHeader:    RPCHeader{ProtocolVersion: ProtocolVersionMax, ID: []byte("other"), Addr: []byte(addr)},
		Term:         x.Term + 1,
		PrevLogEntry: prev.Index,
		PrevLogTerm:  prev.Term,
		Entries:      []*Log{&x},
	}
	answered := make(chan *AppendEntriesResponse, 1)
	go func() {
		var resp AppendEntriesResponse
		if err := other.AppendEntries(leader.conf.LocalID, leader.trans.LocalAddr(), req, &resp); err != nil {
			t.Error(err)
		}
		answered <- &resp
	}()
	select {
	case resp := <-answered:
		_, durable := leader.store.state()
		require.False(t, resp.Success && durable < index, "answered success for an entry not durable")
	case <-leader.store.syncs: // the former leader syncs before it answers
	}
	release()
	resp := <-answered
	require.True(t, resp.Success)
	_, durable := leader.store.state()
	require.GreaterOrEqual(t, durable, index)
}

// The leader loses power while its sync is in flight, after the followers
// committed its entry: its unsynced write is gone, the others elect a
// leader, and once it is back it holds the same log and state as they do.
func TestLeaderSync_PowerLossWhileLeaderSyncs(t *testing.T) {
	nodes := startSplitCluster(t, 3)
	leader := waitForSplitLeader(t, nodes)
	require.NoError(t, leader.raft.Apply([]byte("before"), time.Second).Error())

	release := leader.store.holdSyncs()
	f := leader.raft.Apply([]byte("x"), 0)
	require.NoError(t, f.Error()) // the followers are a quorum
	partition(nodes, leader)
	leader.store.powerLoss()
	require.NoError(t, leader.raft.Shutdown().Error())
	release() // the sync in flight ends, failed
	last, _ := leader.store.state()
	require.Less(t, last, f.(IndexFuture).Index(), "the unsynced write survived the power loss")

	// Restart it on what its disk kept.
	_, trans := NewInmemTransportWithTimeout(leader.trans.LocalAddr(), 5*time.Second)
	leader.trans, leader.fsm = trans, &MockFSM{}
	for _, nd := range nodes {
		nd.trans.Connect(trans.LocalAddr(), trans)
		trans.Connect(nd.trans.LocalAddr(), nd.trans)
	}
	r, err := NewRaft(leader.conf, leader.fsm, leader.store, leader.store, leader.snaps, trans)
	require.NoError(t, err)
	leader.raft = r

	require.NoError(t, waitForSplitLeader(t, nodes).raft.Apply([]byte("after"), 5*time.Second).Error())
	want := []string{"before", "x", "after"}
	for _, nd := range nodes {
		require.Eventually(t, func() bool {
			var got []string
			for _, l := range nd.fsm.Logs() {
				got = append(got, string(l))
			}
			return fmt.Sprint(got) == fmt.Sprint(want)
		}, 10*time.Second, 5*time.Millisecond, "%s did not apply %v", nd.conf.LocalID, want)
	}
}
