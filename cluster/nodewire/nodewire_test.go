package nodewire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/transport"
)

var testOwner = fsm.Owner{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

func sampleRequests() []Request {
	return []Request{
		&Command{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second, Wait: time.Minute}},
		&Command{fsm.Command{Op: fsm.OpRelease, Key: "k", Owner: testOwner}},
		&Read{Key: "some/key"},
		&Read{Key: "k", Owner: testOwner, WithOwner: true},
		&WaitAcquire{Command{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second, Wait: time.Minute}}},
		&Join{ID: "n3", Addr: "10.0.0.3:7000"},
		&Join{ID: "n3", Addr: "10.0.0.3:7000", Empty: true},
		&Remove{ID: "n3"},
		&List{},
		&List{Prefix: "jobs/", After: "jobs/a", Limit: 100},
		&Info{ID: "n2", APIAddr: "http://10.0.0.2:7070"},
		&Info{ID: "n2"},
		&Identity{ID: "n3", ClusterID: "5f0c9a3b8e7d6c5b4a39281706f5e4d3"},
		&Identity{ID: "n3"},
		&WaitAcquire{Command{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, Session: testOwner, Wait: time.Minute, Meta: "m"}}},
		&WaitAcquire{Command{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second, Wait: time.Minute, Kind: fsm.KindSemaphore, Limit: 8}}},
		&Command{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second, Kind: fsm.KindRW, Shared: true}},
		&Command{fsm.Command{Op: fsm.OpSessionCreate, Session: testOwner, TTL: time.Second, LockDelay: time.Second}},
		&Command{fsm.Command{Op: fsm.OpSessionRenew, Session: testOwner}},
		&Command{fsm.Command{Op: fsm.OpSessionDestroy, Session: testOwner}},
		&SessionRead{Session: testOwner},
		&ServerStatsRequest{ID: "n0"},
		&ServerStatsRequest{ID: "n0", Health: HealthReport{Known: true, Healthy: true, Tolerance: 1, Voters: 3, HealthyVoters: 3}},
		&ServerStatsRequest{ID: "n0", Health: HealthReport{Known: true, Voters: 5, HealthyVoters: 3}},
		&Command{fsm.Command{Op: fsm.OpAcquireAll, Keys: []string{"a", "b"}, Owner: testOwner, TTL: time.Second}},
		&WaitAcquire{Command{fsm.Command{Op: fsm.OpAcquireAll, Keys: []string{"a", "b", "c"}, Owner: testOwner, TTL: time.Second, Wait: time.Minute, Meta: "m"}}},
		&Group{Cmds: []fsm.Command{
			{Op: fsm.OpAcquire, Key: "a", Owner: testOwner, TTL: time.Second, Meta: "m"},
			{Op: fsm.OpRelease, Key: "b", Owner: testOwner},
			{Op: fsm.OpExtend, Key: "c", Owner: testOwner, TTL: time.Minute},
			{Op: fsm.OpAcquireAll, Keys: []string{"d", "e"}, Owner: testOwner, TTL: time.Second},
		}},
		&Group{Cmds: []fsm.Command{{Op: fsm.OpRelease, Key: "k", Owner: testOwner}}},
	}
}

func sampleReplies() []Reply {
	return []Reply{
		{Code: CodeOK, Kind: KindCommand, Answer: &CommandAnswer{fsm.Result{Status: fsm.StatusGranted, Token: 7, ExpiresAt: 9 * time.Second, Now: 4 * time.Second, Waiters: 2}}},
		{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{Held: true, Mine: true, Token: 3, Remaining: time.Second, Waiters: 1}},
		{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{}},
		{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{Held: true, Token: 3, Remaining: time.Second, Meta: "host=a"}},
		{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{Held: true, Token: 3, Remaining: time.Second, Delayed: true}},
		{Code: CodeOK, Kind: KindWaitAcquire, Answer: &WaitAnswer{Status: fsm.StatusNoSession}},
		{Code: CodeOK, Kind: KindSessionRead, Answer: &SessionResult{Live: true, TTL: 15 * time.Second, Remaining: time.Second, LockDelay: time.Second, Keys: 3}},
		{Code: CodeOK, Kind: KindSessionRead, Answer: &SessionResult{}},
		{Code: CodeOK, Kind: KindWaitAcquire, Answer: &WaitAnswer{Status: fsm.StatusGranted, Token: 7, Remaining: time.Second}},
		{Code: CodeOK, Kind: KindWaitAcquire, Answer: &WaitAnswer{Status: fsm.StatusHeld, Token: 3, Remaining: time.Minute, Waiters: 2}},
		{Code: CodeOK, Kind: KindJoin, Answer: &NoAnswer{}},
		{Code: CodeOK, Kind: KindJoinEmpty, Answer: &NoAnswer{}},
		{Code: CodeOK, Kind: KindRemove, Answer: &NoAnswer{}},
		{Code: CodeOK, Kind: KindList, Answer: &ListPage{}},
		{Code: CodeOK, Kind: KindList, Answer: &ListPage{More: true, Locks: []lock.LockInfo{
			{Key: "jobs/a", KeyInfo: lock.KeyInfo{Locked: true, Token: 3, Remaining: time.Second, Waiters: 2, Holders: 1}},
			{Key: "jobs/b", KeyInfo: lock.KeyInfo{Locked: true, Token: 9, Remaining: time.Millisecond, Holders: 1}},
		}}},
		{Code: CodeOK, Kind: KindList, Answer: &ListPage{Locks: []lock.LockInfo{
			{Key: "jobs/a", KeyInfo: lock.KeyInfo{Locked: true, Token: 3, Remaining: time.Second, Metadata: "pid=7", Holders: 1}},
			{Key: "jobs/b", KeyInfo: lock.KeyInfo{Locked: true, Token: 9, Remaining: time.Millisecond, Delayed: true}},
		}}},
		{Code: CodeOK, Kind: KindList, Answer: &ListPage{Locks: []lock.LockInfo{
			{Key: "jobs/a", KeyInfo: lock.KeyInfo{Locked: true, Token: 3, Remaining: time.Second, Holders: 1}},
			{Key: "pool", KeyInfo: lock.KeyInfo{Locked: true, Token: 9, Remaining: time.Second, Waiters: 4, Kind: lock.KindSemaphore, Limit: 8, Holders: 8}},
			{Key: "doc", KeyInfo: lock.KeyInfo{Locked: true, Token: 10, Remaining: time.Second, Kind: lock.KindRWLock, Holders: 3, Shared: true}},
		}}},
		{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{Held: true, Token: 3, Remaining: time.Second, Kind: fsm.KindSemaphore, Limit: 8, Holders: 2}},
		{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{Held: true, Token: 3, Remaining: time.Second, Kind: fsm.KindRW, Holders: 2, Shared: true}},
		{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{Held: true, Token: 4, Remaining: time.Second, Kind: fsm.KindSemaphore, Limit: 3, Holders: 2,
			Holds: []lock.HoldInfo{{Token: 3, Remaining: time.Millisecond, Metadata: "pid=1"}, {Token: 4, Remaining: time.Second}}}},
		{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{Held: true, Token: 4, Remaining: time.Second, Kind: fsm.KindRW, Holders: 1,
			Holds: []lock.HoldInfo{{Token: 4, Remaining: time.Second, Metadata: "r", Shared: true}}}},
		{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{Held: true, Token: 5, Remaining: time.Second, SetKeys: []string{"a", "b"}}},
		{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{Waiters: 1, Reserved: true}},
		{Code: CodeOK, Kind: KindList, Answer: &ListPage{Locks: []lock.LockInfo{
			{Key: "a", KeyInfo: lock.KeyInfo{Locked: true, Token: 5, Remaining: time.Second, Holders: 1, SetKeys: []string{"a", "b"}}},
			{Key: "c", KeyInfo: lock.KeyInfo{Locked: true, Token: 6, Remaining: time.Second, Holders: 1}},
			{Key: "pool", KeyInfo: lock.KeyInfo{Locked: true, Token: 8, Remaining: time.Second, Kind: lock.KindSemaphore, Limit: 3, Holders: 2,
				Holds: []lock.HoldInfo{{Token: 7, Remaining: time.Millisecond, Metadata: "pid=1"}, {Token: 8, Remaining: time.Second, Metadata: "pid=2"}}}},
		}}},
		// A slot a lock-delay keeps, in a read and in a list.
		{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{Held: true, Token: 4, Remaining: time.Second, Kind: fsm.KindSemaphore, Limit: 3, Holders: 2,
			Holds: []lock.HoldInfo{{Token: 3, Remaining: time.Millisecond, Delayed: true}, {Token: 4, Remaining: time.Second, Metadata: "pid=1"}}}},
		{Code: CodeOK, Kind: KindList, Answer: &ListPage{Locks: []lock.LockInfo{
			{Key: "doc", KeyInfo: lock.KeyInfo{Locked: true, Token: 8, Remaining: time.Second, Kind: lock.KindRWLock, Holders: 2, Shared: true,
				Holds: []lock.HoldInfo{{Token: 7, Remaining: time.Millisecond, Shared: true, Delayed: true}, {Token: 8, Remaining: time.Second, Shared: true}}}},
		}}},
		{Code: CodeOK, Kind: KindCommand, Answer: &CommandAnswer{fsm.Result{Status: fsm.StatusKindMismatch, Now: time.Second, Kind: fsm.KindSemaphore, Limit: 8}}},
		{Code: CodeOK, Kind: KindWaitAcquire, Answer: &WaitAnswer{Status: fsm.StatusKindMismatch, Kind: fsm.KindRW}},
		{Code: CodeOK, Kind: KindWaitAcquire, Answer: &WaitAnswer{Status: fsm.StatusKindMismatch, Kind: fsm.KindSemaphore, Limit: 2, Waiters: 3}},
		{Code: CodeOK, Kind: KindInfo, Answer: &Info{ID: "n1", APIAddr: "https://10.0.0.1:7070"}},
		{Code: CodeOK, Kind: KindInfo, Answer: &Info{ID: "n2"}},
		{Code: CodeOK, Kind: KindIdentity, Answer: &Identity{ID: "n1", ClusterID: "5f0c9a3b8e7d6c5b4a39281706f5e4d3"}},
		{Code: CodeOK, Kind: KindIdentity, Answer: &Identity{ID: "n1"}},
		{Code: CodeOK, Kind: KindServerStats, Answer: &ServerStats{LastContact: 42 * time.Millisecond, LastTerm: 3, LastIndex: 1 << 40}},
		{Code: CodeOK, Kind: KindServerStats, Answer: &ServerStats{LastContact: -1}},
		{Code: CodeOK, Kind: KindGroup, Answer: &GroupAnswer{Replies: []Reply{
			{Code: CodeOK, Kind: KindCommand, Answer: &CommandAnswer{fsm.Result{Status: fsm.StatusGranted, Token: 7, ExpiresAt: 9 * time.Second, Now: 4 * time.Second}}},
			{Code: CodeOK, Kind: KindCommand, Answer: &CommandAnswer{fsm.Result{Status: fsm.StatusNotHeld, Now: 4 * time.Second}}},
			{Code: CodeQuotaExceeded, Kind: KindCommand, Msg: "lock: quota exceeded: 10 locks"},
			{Code: CodeNotLeader, Kind: KindCommand, Leader: "10.0.0.1:7000"},
		}}},
		{Code: CodeNotLeader, Kind: KindGroup, Leader: "10.0.0.1:7000"},
		{Code: CodeNotLeader, Kind: KindCommand, Leader: "10.0.0.1:7000"},
		{Code: CodeNotLeader, Kind: KindRead},
		{Code: CodeLostLeadership, Kind: KindCommand, Msg: "lost"},
		{Code: CodeBadRequest, Kind: KindRead, Msg: "bad"},
		{Code: CodeShuttingDown, Kind: KindList, Msg: "closing"},
		{Code: CodeUnavailable, Kind: KindJoin, Msg: "config change failed"},
	}
}

func TestWireRoundTrip(t *testing.T) {
	for _, req := range sampleRequests() {
		got, err := DecodeRequest(EncodeRequest(req))
		require.NoError(t, err)
		assert.Equal(t, req, got)
	}
	for _, rep := range sampleReplies() {
		got, err := DecodeReply(rep.AppendBinary(nil))
		require.NoError(t, err)
		assert.Equal(t, rep, got)
	}
}

// Decoders are used again for later messages: a message read after one
// that failed partway (its decoder stopped with an error, mid-message)
// reads as itself.
func TestReusedDecoderReadsOnlyItsMessage(t *testing.T) {
	acquire := EncodeRequest(sampleRequests()[0])
	release := sampleRequests()[1]
	granted := sampleReplies()[0]
	// Many times: a decoder handed back may be dropped rather than handed
	// out again (the race detector drops some on purpose).
	for range 100 {
		_, err := DecodeRequest(acquire[:len(acquire)-4])
		require.ErrorIs(t, err, ErrBadRequest)
		got, err := DecodeRequest(EncodeRequest(release))
		require.NoError(t, err)
		require.Equal(t, release, got)

		_, err = DecodeReply(acquire)
		require.ErrorIs(t, err, ErrBadRequest)
		rep, err := DecodeReply(granted.AppendBinary(nil))
		require.NoError(t, err)
		require.Equal(t, granted, rep)
	}
}

// A reply read into an answer its caller keeps reads as itself, whatever
// that answer held before; an answer of another kind is left alone (the
// reply gets a fresh one).
func TestDecodeReplyIntoEmptiesTheAnswer(t *testing.T) {
	into := &CommandAnswer{fsm.Result{Status: fsm.StatusKindMismatch, Token: 9, Waiters: 3, Kind: fsm.KindSemaphore, Limit: 8}}
	granted := Reply{Code: CodeOK, Kind: KindCommand, Answer: &CommandAnswer{fsm.Result{Status: fsm.StatusGranted, Token: 7, Now: time.Second}}}
	rep, err := DecodeReplyInto(granted.AppendBinary(nil), into)
	require.NoError(t, err)
	assert.Equal(t, granted, rep)
	assert.Same(t, into, rep.Answer, "read into the caller's answer")

	page := &ListPage{Locks: []lock.LockInfo{{Key: "from-before"}}, More: true}
	listed := Reply{Code: CodeOK, Kind: KindList, Answer: &ListPage{Locks: []lock.LockInfo{
		{Key: "a", KeyInfo: lock.KeyInfo{Locked: true, Token: 3, Remaining: time.Second, Holders: 1}},
	}}}
	rep, err = DecodeReplyInto(listed.AppendBinary(nil), page)
	require.NoError(t, err)
	assert.Equal(t, listed, rep)
	assert.Same(t, page, rep.Answer)

	before := *into
	read := sampleReplies()[1]
	rep, err = DecodeReplyInto(read.AppendBinary(nil), into)
	require.NoError(t, err)
	assert.Equal(t, read, rep)
	assert.Equal(t, before, *into, "an answer of another kind is not touched")
}

// A command's answer encodes from where it is as it does in a Reply.
func TestCommandAnswerAppendsItsReply(t *testing.T) {
	for _, rep := range sampleReplies() {
		if a, ok := rep.Answer.(*CommandAnswer); ok {
			assert.Equal(t, rep.AppendBinary([]byte("x")), a.AppendReply([]byte("x")))
		}
	}
}

// Every kind of the table is sampled both ways, so a kind added to the
// table without samples here fails.
func TestWireSamplesCoverEveryKind(t *testing.T) {
	asked, answered := map[Kind]bool{}, map[Kind]bool{}
	for _, req := range sampleRequests() {
		asked[req.Kind()] = true
	}
	for _, rep := range sampleReplies() {
		if rep.Code == CodeOK {
			answered[rep.Kind] = true
		}
	}
	for k, spec := range kinds {
		assert.True(t, asked[k], "no sample request of kind %v", k)
		assert.True(t, answered[k], "no sample answer of kind %v", k)
		assert.Equal(t, k, spec.request().Kind(), "the table's request type of %v says another kind", k)
	}
}

// The bytes of every message stay as the first release wrote them: nodes of
// mixed versions talk during a rolling upgrade.
func TestWireBytesAreStable(t *testing.T) {
	owner := testOwner[:]
	cmd := append([]byte{1, 1, 0, 1, 'k'}, owner...)
	cmd = append(cmd, 0x80, 0xa8, 0xd6, 0xb9, 0x07, 0)
	for _, tc := range []struct {
		msg  []byte
		want []byte
	}{
		{EncodeRequest(&Command{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: 2 * time.Second}}),
			append([]byte{Version, 1}, cmd...)},
		{EncodeRequest(&Read{Key: "k", Owner: testOwner, WithOwner: true}), append([]byte{Version, 2, 1, 'k', 1}, owner...)},
		{EncodeRequest(&Join{ID: "n", Addr: "a:1", Empty: true}), []byte{Version, 10, 1, 'n', 3, 'a', ':', '1'}},
		{EncodeRequest(&List{Prefix: "p", Limit: 300}), []byte{Version, 5, 1, 'p', 0, 0xac, 0x02}},
		{Reply{Code: CodeOK, Kind: KindCommand, Answer: &CommandAnswer{fsm.Result{Status: fsm.StatusGranted, Token: 5, ExpiresAt: -1, Now: 1, Waiters: 2}}}.AppendBinary(nil),
			[]byte{Version, 1, 1, byte(fsm.StatusGranted), 5, 1, 2, 2}},
		{Reply{Code: CodeOK, Kind: KindRead, Answer: &ReadResult{Held: true, Token: 9, Remaining: 3, Waiters: 1}}.AppendBinary(nil),
			[]byte{Version, 1, 2, 1, 9, 6, 1}},
		{Reply{Code: CodeNotLeader, Kind: KindRead, Leader: "l:1"}.AppendBinary(nil), []byte{Version, 2, 2, 3, 'l', ':', '1'}},
		{Reply{Code: CodeUnavailable, Kind: KindJoin, Msg: "m"}.AppendBinary(nil), []byte{Version, 6, 3, 1, 'm'}},
	} {
		assert.Equal(t, tc.want, tc.msg)
	}
}

// A serve's error is answered with its code, and the asking node's attempt
// fails with the error the code stands for.
func TestReplyErrorsRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		served error
		code   Code
		got    error
	}{
		{fmt.Errorf("x: %w", ErrNotLeader), CodeNotLeader, ErrNotLeader},
		{ErrLostLeadership, CodeLostLeadership, ErrLostLeadership},
		{ErrShuttingDown, CodeShuttingDown, ErrLeaderClosing},
		{fmt.Errorf("%w: no id", ErrBadRequest), CodeBadRequest, ErrBadRequest},
		{context.Canceled, CodeLostLeadership, ErrLostLeadership},
		{errors.New("config change failed"), CodeUnavailable, ErrLeaderUnavailable},
	} {
		code := CodeFor(tc.served)
		assert.Equal(t, tc.code, code, "%v", tc.served)
		rep, err := DecodeReply(Reply{Code: code, Kind: KindJoin, Msg: tc.served.Error()}.AppendBinary(nil))
		require.NoError(t, err)
		assert.ErrorIs(t, rep.Err(), tc.got, "%v", tc.served)
	}
	assert.NoError(t, Reply{Code: CodeOK}.Err())
	_, err := DecodeReply([]byte{Version, 99, byte(KindRead), 0})
	assert.ErrorIs(t, err, ErrBadRequest, "unknown reply code")
}

// Every proper prefix of a valid message is rejected, never misread.
func TestWireRejectsTruncation(t *testing.T) {
	for _, req := range sampleRequests() {
		b := EncodeRequest(req)
		for i := range len(b) {
			_, err := DecodeRequest(b[:i])
			assert.ErrorIs(t, err, ErrBadRequest, "%v cut at %d", req.Kind(), i)
		}
		_, err := DecodeRequest(append(b, 0))
		assert.ErrorIs(t, err, ErrBadRequest, "trailing byte")
	}
	for _, rep := range sampleReplies() {
		b := rep.AppendBinary(nil)
		for i := range len(b) {
			_, err := DecodeReply(b[:i])
			assert.ErrorIs(t, err, ErrBadRequest, "cut at %d", i)
		}
	}
}

// A full page of the longest keys and largest figures stays well under the
// transport's frame limit, and within the bound the page size was chosen by.
func TestFullListPageFitsAFrame(t *testing.T) {
	page := ListPage{More: true}
	for i := range MaxListPage {
		page.Locks = append(page.Locks, lock.LockInfo{
			Key: fmt.Sprintf("%0*d", fsm.MaxKeyLen, i),
			KeyInfo: lock.KeyInfo{Locked: true, Token: math.MaxUint64, Remaining: math.MinInt64, Waiters: fsm.MaxWaiters, Metadata: strings.Repeat("m", fsm.MaxMetaLen), Delayed: true,
				Kind: lock.KindSemaphore, Limit: fsm.MaxHolders, Holders: fsm.MaxHolders},
		})
	}
	b := Reply{Code: CodeOK, Kind: KindList, Answer: &page}.AppendBinary(nil)
	assert.LessOrEqual(t, len(b), 8+MaxListPage*MaxListEntryLen)
	assert.Less(t, len(b), transport.MaxFrameSize/2)
	got, err := DecodeReply(b)
	require.NoError(t, err)
	assert.Equal(t, &page, got.Answer)
}

// A full group of the largest commands a group carries (acquire-alls of
// MaxKeys of the longest keys, with the longest metadata and lease) stays well under the transport's frame limit.
func TestFullGroupFitsAFrame(t *testing.T) {
	req := Group{}
	for i := range MaxGroupCommands {
		keys := make([]string, fsm.MaxKeys)
		for k := range keys {
			keys[k] = fmt.Sprintf("%0*d", fsm.MaxKeyLen, i*fsm.MaxKeys+k)
		}
		req.Cmds = append(req.Cmds, fsm.Command{Op: fsm.OpAcquireAll, Keys: keys, Owner: testOwner, TTL: fsm.MaxTTL,
			Meta: strings.Repeat("m", fsm.MaxMetaLen)})
	}
	b := EncodeRequest(&req)
	assert.Less(t, len(b), transport.MaxFrameSize*3/4)
	got, err := DecodeRequest(b)
	require.NoError(t, err, "the largest commands are valid ones")
	assert.Len(t, got.(*Group).Cmds, MaxGroupCommands)
}

// The largest read reply (maxReadHolds holds with the longest metadata, a
// set of MaxKeys of the longest keys) and the largest list page the leader
// builds within listPageBudget fit a frame; a read carries at most
// maxReadHolds holds and a listed key maxListHolds.
func TestHoldsAndSetKeysFitAFrame(t *testing.T) {
	hold := lock.HoldInfo{Token: math.MaxUint64, Remaining: math.MinInt64, Metadata: strings.Repeat("m", fsm.MaxMetaLen), Shared: true}
	var setKeys []string
	for i := range fsm.MaxKeys {
		setKeys = append(setKeys, fmt.Sprintf("%0*d", fsm.MaxKeyLen, i))
	}
	read := ReadResult{Held: true, Token: 1, Remaining: time.Second, Kind: fsm.KindRW, Holders: fsm.MaxHolders, Shared: true,
		Holds: slices.Repeat([]lock.HoldInfo{hold}, fsm.MaxHolders), SetKeys: setKeys}
	b := Reply{Code: CodeOK, Kind: KindRead, Answer: &read}.AppendBinary(nil)
	assert.Less(t, len(b), transport.MaxFrameSize/2)
	got, err := DecodeReply(b)
	require.NoError(t, err)
	assert.Len(t, got.Answer.(*ReadResult).Holds, MaxReadHolds, "a read carries at most maxReadHolds holds")

	entry := lock.LockInfo{Key: setKeys[0], KeyInfo: lock.KeyInfo{Locked: true, Token: math.MaxUint64, Remaining: math.MinInt64, Waiters: fsm.MaxWaiters,
		Metadata: hold.Metadata, Delayed: true, Kind: lock.KindRWLock, Holders: fsm.MaxHolders,
		Holds: slices.Repeat([]lock.HoldInfo{hold}, MaxListHolds+1), SetKeys: setKeys}}
	entryLen := MaxListEntryLen + MaxListHolds*MaxHoldLen + fsm.MaxKeys*(binary.MaxVarintLen64+fsm.MaxKeyLen) + 1
	page := ListPage{Locks: slices.Repeat([]lock.LockInfo{entry}, ListPageBudget/entryLen+1)}
	b = Reply{Code: CodeOK, Kind: KindList, Answer: &page}.AppendBinary(nil)
	assert.LessOrEqual(t, len(b), 8+len(page.Locks)*entryLen, "the leader's estimate bounds an entry")
	assert.Less(t, len(b), transport.MaxFrameSize)
	got, err = DecodeReply(b)
	require.NoError(t, err)
	for _, l := range got.Answer.(*ListPage).Locks {
		assert.Len(t, l.Holds, MaxListHolds)
		assert.Equal(t, setKeys, l.SetKeys)
	}
}

// sampleStatsWithMembers is a leader's stats request that carries its view
// of the members: one judged healthy, one failed and judged unhealthy, one
// it has not judged yet and whose status it does not know.
func sampleStatsWithMembers() *ServerStatsRequest {
	return &ServerStatsRequest{ID: "n0", Health: HealthReport{Known: true, Tolerance: 0, Voters: 3, HealthyVoters: 2, Members: []MemberReport{
		{ID: "n0", Status: "alive", Judged: true, Healthy: true},
		{ID: "n1", Status: "failed", Judged: true},
		{ID: "n2"},
	}}}
}

// The leader's view of its members travels at the end of a stats request,
// and only with a known health: a request of the builds before it (no view)
// still decodes, with no members, and one with the view round-trips; a
// build before it refuses the view as trailing bytes, which is why the
// leader asks such a member again without it (package cluster).
func TestStatsRequestCarriesTheMembersOptionally(t *testing.T) {
	withView := sampleStatsWithMembers()
	without := *withView
	without.Health.Members = nil
	before := EncodeRequest(&without)
	// The bytes of the builds before the view (requests.golden holds them too).
	assert.Equal(t, []byte{Version, byte(KindServerStats), 2, 'n', '0', 1, 0, 3, 2}, before)
	got, err := DecodeRequest(before)
	require.NoError(t, err)
	assert.Empty(t, got.(*ServerStatsRequest).Health.Members, "an older leader's request: no view")
	assert.Equal(t, &without, got)

	b := EncodeRequest(withView)
	assert.Equal(t, before, b[:len(before)], "the view only follows the fields every build reads")
	got, err = DecodeRequest(b)
	require.NoError(t, err)
	assert.Equal(t, withView, got)

	unknown := *withView
	unknown.Health = HealthReport{Members: withView.Health.Members}
	got, err = DecodeRequest(EncodeRequest(&unknown))
	require.NoError(t, err)
	assert.Equal(t, &ServerStatsRequest{ID: "n0"}, got, "no view sent without a known health")

	for name, body := range map[string][]byte{
		"no members":             append(slices.Clone(before), 0),
		"view of an unknown":     append(EncodeRequest(&ServerStatsRequest{ID: "n0"}), 1, 2, 'n', '1', 0, 0),
		"healthy but not judged": append(slices.Clone(before), 1, 2, 'n', '1', 0, 2),
		"empty member ID":        append(slices.Clone(before), 1, 0, 0, 0),
		"more than announced":    append(slices.Clone(before), 2, 2, 'n', '1', 0, 0),
		"unknown flags":          append(slices.Clone(before), 1, 2, 'n', '1', 0, 4),
	} {
		_, err := DecodeRequest(body)
		assert.ErrorIs(t, err, ErrBadRequest, name)
	}
}

// A report of MaxReportMembers of the longest IDs and statuses stays well
// under the transport's frame limit; a longer one is cut to it.
func TestFullHealthReportFitsAFrame(t *testing.T) {
	req := ServerStatsRequest{ID: strings.Repeat("l", MaxIDLen), Health: HealthReport{Known: true}}
	for i := range MaxReportMembers + 1 {
		req.Health.Members = append(req.Health.Members, MemberReport{ID: fmt.Sprintf("%0*d", MaxIDLen, i), Status: strings.Repeat("s", maxStatusLen), Judged: true})
	}
	b := EncodeRequest(&req)
	assert.Less(t, len(b), transport.MaxFrameSize/8)
	got, err := DecodeRequest(b)
	require.NoError(t, err)
	assert.Len(t, got.(*ServerStatsRequest).Health.Members, MaxReportMembers)
}

// A reply that announces more entries than it carries is refused without
// allocating for the count.
func TestListReplyCountMustMatch(t *testing.T) {
	b := []byte{Version, byte(CodeOK), byte(KindList), 0}
	b = binary.AppendUvarint(b, math.MaxUint64)
	_, err := DecodeReply(b)
	assert.ErrorIs(t, err, ErrBadRequest)
	_, err = DecodeReply([]byte{Version, byte(CodeOK), byte(KindList), 16, 0})
	assert.ErrorIs(t, err, ErrBadRequest, "unknown flags")
}

func FuzzDecodeRequest(f *testing.F) {
	for _, req := range sampleRequests() {
		f.Add(EncodeRequest(req))
	}
	f.Add(EncodeRequest(&Info{ID: "n2", APIAddr: "http://10.0.0.2:7070", Level: 2}))                    // the optional last field
	f.Add(EncodeRequest(&Info{ID: "n2", APIAddr: "http://10.0.0.2:7070", Level: 1, Version: "v1.4.0"})) // and the one after it
	f.Add(EncodeRequest(sampleStatsWithMembers()))                                                      // the leader's view of its members
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeRequest(b)
		if err != nil {
			return
		}
		assert.Equal(t, b, EncodeRequest(req), "one encoding per request")
		got, err := DecodeRequest(EncodeRequest(req))
		require.NoError(t, err)
		assert.Equal(t, req, got)
	})
}

func FuzzDecodeReply(f *testing.F) {
	for _, rep := range sampleReplies() {
		f.Add(rep.AppendBinary(nil))
	}
	f.Add(Reply{Code: CodeMemberTooOld, Kind: KindCommand, Msg: "member n2 reads level 1"}.AppendBinary(nil))
	f.Add(Reply{Code: CodeOK, Kind: KindInfo, Answer: &Info{ID: "n2", Level: 3}}.AppendBinary(nil))
	f.Add(Reply{Code: CodeOK, Kind: KindInfo, Answer: &Info{ID: "n2", Level: 1, Version: "v1.4.0"}}.AppendBinary(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := DecodeReply(b)
		if err != nil {
			return
		}
		got, err := DecodeReply(rep.AppendBinary(nil))
		require.NoError(t, err)
		assert.Equal(t, rep, got)
	})
}
