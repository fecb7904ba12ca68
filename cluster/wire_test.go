package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
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

func sampleRequests() []rpcRequest {
	return []rpcRequest{
		&commandRequest{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second, Wait: time.Minute}},
		&commandRequest{fsm.Command{Op: fsm.OpRelease, Key: "k", Owner: testOwner}},
		&readRequest{key: "some/key"},
		&readRequest{key: "k", owner: testOwner, withOwner: true},
		&waitRequest{commandRequest{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second, Wait: time.Minute}}},
		&joinRequest{id: "n3", addr: "10.0.0.3:7000"},
		&joinRequest{id: "n3", addr: "10.0.0.3:7000", empty: true},
		&removeRequest{id: "n3"},
		&listRequest{},
		&listRequest{prefix: "jobs/", after: "jobs/a", limit: 100},
		&nodeInfo{id: "n2", apiAddr: "http://10.0.0.2:7070"},
		&nodeInfo{id: "n2"},
		&nodeIdentity{id: "n3", clusterID: "5f0c9a3b8e7d6c5b4a39281706f5e4d3"},
		&nodeIdentity{id: "n3"},
		&waitRequest{commandRequest{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, Session: testOwner, Wait: time.Minute, Meta: "m"}}},
		&waitRequest{commandRequest{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second, Wait: time.Minute, Kind: fsm.KindSemaphore, Limit: 8}}},
		&commandRequest{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second, Kind: fsm.KindRW, Shared: true}},
		&commandRequest{fsm.Command{Op: fsm.OpSessionCreate, Session: testOwner, TTL: time.Second, LockDelay: time.Second}},
		&commandRequest{fsm.Command{Op: fsm.OpSessionRenew, Session: testOwner}},
		&commandRequest{fsm.Command{Op: fsm.OpSessionDestroy, Session: testOwner}},
		&sessionRequest{session: testOwner},
		&serverStatsRequest{id: "n0"},
		&serverStatsRequest{id: "n0", health: healthReport{known: true, healthy: true, tolerance: 1, voters: 3, healthyVoters: 3}},
		&serverStatsRequest{id: "n0", health: healthReport{known: true, voters: 5, healthyVoters: 3}},
		&commandRequest{fsm.Command{Op: fsm.OpAcquireAll, Keys: []string{"a", "b"}, Owner: testOwner, TTL: time.Second}},
		&waitRequest{commandRequest{fsm.Command{Op: fsm.OpAcquireAll, Keys: []string{"a", "b", "c"}, Owner: testOwner, TTL: time.Second, Wait: time.Minute, Meta: "m"}}},
		&groupRequest{cmds: []fsm.Command{
			{Op: fsm.OpAcquire, Key: "a", Owner: testOwner, TTL: time.Second, Meta: "m"},
			{Op: fsm.OpRelease, Key: "b", Owner: testOwner},
			{Op: fsm.OpExtend, Key: "c", Owner: testOwner, TTL: time.Minute},
			{Op: fsm.OpAcquireAll, Keys: []string{"d", "e"}, Owner: testOwner, TTL: time.Second},
		}},
		&groupRequest{cmds: []fsm.Command{{Op: fsm.OpRelease, Key: "k", Owner: testOwner}}},
	}
}

func sampleReplies() []reply {
	return []reply{
		{code: codeOK, kind: kindCommand, answer: &commandAnswer{fsm.Result{Status: fsm.StatusGranted, Token: 7, ExpiresAt: 9 * time.Second, Now: 4 * time.Second, Waiters: 2}}},
		{code: codeOK, kind: kindRead, answer: &readResult{held: true, mine: true, token: 3, remaining: time.Second, waiters: 1}},
		{code: codeOK, kind: kindRead, answer: &readResult{}},
		{code: codeOK, kind: kindRead, answer: &readResult{held: true, token: 3, remaining: time.Second, meta: "host=a"}},
		{code: codeOK, kind: kindRead, answer: &readResult{held: true, token: 3, remaining: time.Second, delayed: true}},
		{code: codeOK, kind: kindWaitAcquire, answer: &waitAnswer{status: fsm.StatusNoSession}},
		{code: codeOK, kind: kindSessionRead, answer: &sessionResult{live: true, ttl: 15 * time.Second, remaining: time.Second, lockDelay: time.Second, keys: 3}},
		{code: codeOK, kind: kindSessionRead, answer: &sessionResult{}},
		{code: codeOK, kind: kindWaitAcquire, answer: &waitAnswer{status: fsm.StatusGranted, token: 7, remaining: time.Second}},
		{code: codeOK, kind: kindWaitAcquire, answer: &waitAnswer{status: fsm.StatusHeld, token: 3, remaining: time.Minute, waiters: 2}},
		{code: codeOK, kind: kindJoin, answer: &noAnswer{}},
		{code: codeOK, kind: kindJoinEmpty, answer: &noAnswer{}},
		{code: codeOK, kind: kindRemove, answer: &noAnswer{}},
		{code: codeOK, kind: kindList, answer: &listPage{}},
		{code: codeOK, kind: kindList, answer: &listPage{more: true, locks: []lock.LockInfo{
			{Key: "jobs/a", KeyInfo: lock.KeyInfo{Locked: true, Token: 3, Remaining: time.Second, Waiters: 2, Holders: 1}},
			{Key: "jobs/b", KeyInfo: lock.KeyInfo{Locked: true, Token: 9, Remaining: time.Millisecond, Holders: 1}},
		}}},
		{code: codeOK, kind: kindList, answer: &listPage{locks: []lock.LockInfo{
			{Key: "jobs/a", KeyInfo: lock.KeyInfo{Locked: true, Token: 3, Remaining: time.Second, Metadata: "pid=7", Holders: 1}},
			{Key: "jobs/b", KeyInfo: lock.KeyInfo{Locked: true, Token: 9, Remaining: time.Millisecond, Delayed: true}},
		}}},
		{code: codeOK, kind: kindList, answer: &listPage{locks: []lock.LockInfo{
			{Key: "jobs/a", KeyInfo: lock.KeyInfo{Locked: true, Token: 3, Remaining: time.Second, Holders: 1}},
			{Key: "pool", KeyInfo: lock.KeyInfo{Locked: true, Token: 9, Remaining: time.Second, Waiters: 4, Kind: lock.KindSemaphore, Limit: 8, Holders: 8}},
			{Key: "doc", KeyInfo: lock.KeyInfo{Locked: true, Token: 10, Remaining: time.Second, Kind: lock.KindRWLock, Holders: 3, Shared: true}},
		}}},
		{code: codeOK, kind: kindRead, answer: &readResult{held: true, token: 3, remaining: time.Second, kind: fsm.KindSemaphore, limit: 8, holders: 2}},
		{code: codeOK, kind: kindRead, answer: &readResult{held: true, token: 3, remaining: time.Second, kind: fsm.KindRW, holders: 2, shared: true}},
		{code: codeOK, kind: kindRead, answer: &readResult{held: true, token: 4, remaining: time.Second, kind: fsm.KindSemaphore, limit: 3, holders: 2,
			holds: []lock.HoldInfo{{Token: 3, Remaining: time.Millisecond, Metadata: "pid=1"}, {Token: 4, Remaining: time.Second}}}},
		{code: codeOK, kind: kindRead, answer: &readResult{held: true, token: 4, remaining: time.Second, kind: fsm.KindRW, holders: 1,
			holds: []lock.HoldInfo{{Token: 4, Remaining: time.Second, Metadata: "r", Shared: true}}}},
		{code: codeOK, kind: kindRead, answer: &readResult{held: true, token: 5, remaining: time.Second, setKeys: []string{"a", "b"}}},
		{code: codeOK, kind: kindRead, answer: &readResult{waiters: 1, reserved: true}},
		{code: codeOK, kind: kindList, answer: &listPage{locks: []lock.LockInfo{
			{Key: "a", KeyInfo: lock.KeyInfo{Locked: true, Token: 5, Remaining: time.Second, Holders: 1, SetKeys: []string{"a", "b"}}},
			{Key: "c", KeyInfo: lock.KeyInfo{Locked: true, Token: 6, Remaining: time.Second, Holders: 1}},
			{Key: "pool", KeyInfo: lock.KeyInfo{Locked: true, Token: 8, Remaining: time.Second, Kind: lock.KindSemaphore, Limit: 3, Holders: 2,
				Holds: []lock.HoldInfo{{Token: 7, Remaining: time.Millisecond, Metadata: "pid=1"}, {Token: 8, Remaining: time.Second, Metadata: "pid=2"}}}},
		}}},
		// A slot a lock-delay keeps, in a read and in a list.
		{code: codeOK, kind: kindRead, answer: &readResult{held: true, token: 4, remaining: time.Second, kind: fsm.KindSemaphore, limit: 3, holders: 2,
			holds: []lock.HoldInfo{{Token: 3, Remaining: time.Millisecond, Delayed: true}, {Token: 4, Remaining: time.Second, Metadata: "pid=1"}}}},
		{code: codeOK, kind: kindList, answer: &listPage{locks: []lock.LockInfo{
			{Key: "doc", KeyInfo: lock.KeyInfo{Locked: true, Token: 8, Remaining: time.Second, Kind: lock.KindRWLock, Holders: 2, Shared: true,
				Holds: []lock.HoldInfo{{Token: 7, Remaining: time.Millisecond, Shared: true, Delayed: true}, {Token: 8, Remaining: time.Second, Shared: true}}}},
		}}},
		{code: codeOK, kind: kindCommand, answer: &commandAnswer{fsm.Result{Status: fsm.StatusKindMismatch, Now: time.Second, Kind: fsm.KindSemaphore, Limit: 8}}},
		{code: codeOK, kind: kindWaitAcquire, answer: &waitAnswer{status: fsm.StatusKindMismatch, kind: fsm.KindRW}},
		{code: codeOK, kind: kindWaitAcquire, answer: &waitAnswer{status: fsm.StatusKindMismatch, kind: fsm.KindSemaphore, limit: 2, waiters: 3}},
		{code: codeOK, kind: kindInfo, answer: &nodeInfo{id: "n1", apiAddr: "https://10.0.0.1:7070"}},
		{code: codeOK, kind: kindInfo, answer: &nodeInfo{id: "n2"}},
		{code: codeOK, kind: kindIdentity, answer: &nodeIdentity{id: "n1", clusterID: "5f0c9a3b8e7d6c5b4a39281706f5e4d3"}},
		{code: codeOK, kind: kindIdentity, answer: &nodeIdentity{id: "n1"}},
		{code: codeOK, kind: kindServerStats, answer: &serverStats{lastContact: 42 * time.Millisecond, lastTerm: 3, lastIndex: 1 << 40}},
		{code: codeOK, kind: kindServerStats, answer: &serverStats{lastContact: -1}},
		{code: codeOK, kind: kindGroup, answer: &groupAnswer{replies: []reply{
			{code: codeOK, kind: kindCommand, answer: &commandAnswer{fsm.Result{Status: fsm.StatusGranted, Token: 7, ExpiresAt: 9 * time.Second, Now: 4 * time.Second}}},
			{code: codeOK, kind: kindCommand, answer: &commandAnswer{fsm.Result{Status: fsm.StatusNotHeld, Now: 4 * time.Second}}},
			{code: codeQuotaExceeded, kind: kindCommand, msg: "lock: quota exceeded: 10 locks"},
			{code: codeNotLeader, kind: kindCommand, leader: "10.0.0.1:7000"},
		}}},
		{code: codeNotLeader, kind: kindGroup, leader: "10.0.0.1:7000"},
		{code: codeNotLeader, kind: kindCommand, leader: "10.0.0.1:7000"},
		{code: codeNotLeader, kind: kindRead},
		{code: codeLostLeadership, kind: kindCommand, msg: "lost"},
		{code: codeBadRequest, kind: kindRead, msg: "bad"},
		{code: codeShuttingDown, kind: kindList, msg: "closing"},
		{code: codeUnavailable, kind: kindJoin, msg: "config change failed"},
	}
}

func TestWireRoundTrip(t *testing.T) {
	for _, req := range sampleRequests() {
		got, err := decodeRequest(encodeRequest(req))
		require.NoError(t, err)
		assert.Equal(t, req, got)
	}
	for _, rep := range sampleReplies() {
		got, err := decodeReply(rep.appendBinary(nil))
		require.NoError(t, err)
		assert.Equal(t, rep, got)
	}
}

// Every kind of the table is sampled both ways, so a kind added to the
// table without samples here fails.
func TestWireSamplesCoverEveryKind(t *testing.T) {
	asked, answered := map[requestKind]bool{}, map[requestKind]bool{}
	for _, req := range sampleRequests() {
		asked[req.kind()] = true
	}
	for _, rep := range sampleReplies() {
		if rep.code == codeOK {
			answered[rep.kind] = true
		}
	}
	for k, spec := range kinds {
		assert.True(t, asked[k], "no sample request of kind %v", k)
		assert.True(t, answered[k], "no sample answer of kind %v", k)
		assert.Equal(t, k, spec.request().kind(), "the table's request type of %v says another kind", k)
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
		{encodeRequest(&commandRequest{fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: 2 * time.Second}}),
			append([]byte{wireVersion, 1}, cmd...)},
		{encodeRequest(&readRequest{key: "k", owner: testOwner, withOwner: true}), append([]byte{wireVersion, 2, 1, 'k', 1}, owner...)},
		{encodeRequest(&joinRequest{id: "n", addr: "a:1", empty: true}), []byte{wireVersion, 10, 1, 'n', 3, 'a', ':', '1'}},
		{encodeRequest(&listRequest{prefix: "p", limit: 300}), []byte{wireVersion, 5, 1, 'p', 0, 0xac, 0x02}},
		{reply{code: codeOK, kind: kindCommand, answer: &commandAnswer{fsm.Result{Status: fsm.StatusGranted, Token: 5, ExpiresAt: -1, Now: 1, Waiters: 2}}}.appendBinary(nil),
			[]byte{wireVersion, 1, 1, byte(fsm.StatusGranted), 5, 1, 2, 2}},
		{reply{code: codeOK, kind: kindRead, answer: &readResult{held: true, token: 9, remaining: 3, waiters: 1}}.appendBinary(nil),
			[]byte{wireVersion, 1, 2, 1, 9, 6, 1}},
		{reply{code: codeNotLeader, kind: kindRead, leader: "l:1"}.appendBinary(nil), []byte{wireVersion, 2, 2, 3, 'l', ':', '1'}},
		{reply{code: codeUnavailable, kind: kindJoin, msg: "m"}.appendBinary(nil), []byte{wireVersion, 6, 3, 1, 'm'}},
	} {
		assert.Equal(t, tc.want, tc.msg)
	}
}

// A serve's error is answered with its code, and the asking node's attempt
// fails with the error the code stands for.
func TestReplyErrorsRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		served error
		code   replyCode
		got    error
	}{
		{fmt.Errorf("x: %w", errNotLeader), codeNotLeader, errNotLeader},
		{errLostLeadership, codeLostLeadership, errLostLeadership},
		{errShuttingDown, codeShuttingDown, errLeaderClosing},
		{fmt.Errorf("%w: no id", ErrBadRequest), codeBadRequest, ErrBadRequest},
		{context.Canceled, codeLostLeadership, errLostLeadership},
		{errors.New("config change failed"), codeUnavailable, errLeaderUnavailable},
	} {
		code := replyCodeFor(tc.served)
		assert.Equal(t, tc.code, code, "%v", tc.served)
		rep, err := decodeReply(reply{code: code, kind: kindJoin, msg: tc.served.Error()}.appendBinary(nil))
		require.NoError(t, err)
		assert.ErrorIs(t, rep.err(), tc.got, "%v", tc.served)
	}
	assert.NoError(t, reply{code: codeOK}.err())
	_, err := decodeReply([]byte{wireVersion, 99, byte(kindRead), 0})
	assert.ErrorIs(t, err, ErrBadRequest, "unknown reply code")
}

// Every proper prefix of a valid message is rejected, never misread.
func TestWireRejectsTruncation(t *testing.T) {
	for _, req := range sampleRequests() {
		b := encodeRequest(req)
		for i := range len(b) {
			_, err := decodeRequest(b[:i])
			assert.ErrorIs(t, err, ErrBadRequest, "%v cut at %d", req.kind(), i)
		}
		_, err := decodeRequest(append(b, 0))
		assert.ErrorIs(t, err, ErrBadRequest, "trailing byte")
	}
	for _, rep := range sampleReplies() {
		b := rep.appendBinary(nil)
		for i := range len(b) {
			_, err := decodeReply(b[:i])
			assert.ErrorIs(t, err, ErrBadRequest, "cut at %d", i)
		}
	}
}

// A full page of the longest keys and largest figures stays well under the
// transport's frame limit, and within the bound the page size was chosen by.
func TestFullListPageFitsAFrame(t *testing.T) {
	page := listPage{more: true}
	for i := range maxListPage {
		page.locks = append(page.locks, lock.LockInfo{
			Key: fmt.Sprintf("%0*d", fsm.MaxKeyLen, i),
			KeyInfo: lock.KeyInfo{Locked: true, Token: math.MaxUint64, Remaining: math.MinInt64, Waiters: fsm.MaxWaiters, Metadata: strings.Repeat("m", fsm.MaxMetaLen), Delayed: true,
				Kind: lock.KindSemaphore, Limit: fsm.MaxHolders, Holders: fsm.MaxHolders},
		})
	}
	b := reply{code: codeOK, kind: kindList, answer: &page}.appendBinary(nil)
	assert.LessOrEqual(t, len(b), 8+maxListPage*maxListEntryLen)
	assert.Less(t, len(b), transport.MaxFrameSize/2)
	got, err := decodeReply(b)
	require.NoError(t, err)
	assert.Equal(t, &page, got.answer)
}

// A full group of the largest commands a group carries (acquire-alls of
// MaxKeys of the longest keys, with the longest metadata and lease) stays well under the transport's frame limit.
func TestFullGroupFitsAFrame(t *testing.T) {
	req := groupRequest{}
	for i := range maxGroupCommands {
		keys := make([]string, fsm.MaxKeys)
		for k := range keys {
			keys[k] = fmt.Sprintf("%0*d", fsm.MaxKeyLen, i*fsm.MaxKeys+k)
		}
		req.cmds = append(req.cmds, fsm.Command{Op: fsm.OpAcquireAll, Keys: keys, Owner: testOwner, TTL: fsm.MaxTTL,
			Meta: strings.Repeat("m", fsm.MaxMetaLen)})
	}
	b := encodeRequest(&req)
	assert.Less(t, len(b), transport.MaxFrameSize*3/4)
	got, err := decodeRequest(b)
	require.NoError(t, err, "the largest commands are valid ones")
	assert.Len(t, got.(*groupRequest).cmds, maxGroupCommands)
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
	read := readResult{held: true, token: 1, remaining: time.Second, kind: fsm.KindRW, holders: fsm.MaxHolders, shared: true,
		holds: slices.Repeat([]lock.HoldInfo{hold}, fsm.MaxHolders), setKeys: setKeys}
	b := reply{code: codeOK, kind: kindRead, answer: &read}.appendBinary(nil)
	assert.Less(t, len(b), transport.MaxFrameSize/2)
	got, err := decodeReply(b)
	require.NoError(t, err)
	assert.Len(t, got.answer.(*readResult).holds, maxReadHolds, "a read carries at most maxReadHolds holds")

	entry := lock.LockInfo{Key: setKeys[0], KeyInfo: lock.KeyInfo{Locked: true, Token: math.MaxUint64, Remaining: math.MinInt64, Waiters: fsm.MaxWaiters,
		Metadata: hold.Metadata, Delayed: true, Kind: lock.KindRWLock, Holders: fsm.MaxHolders,
		Holds: slices.Repeat([]lock.HoldInfo{hold}, maxListHolds+1), SetKeys: setKeys}}
	entryLen := maxListEntryLen + maxListHolds*maxHoldLen + fsm.MaxKeys*(binary.MaxVarintLen64+fsm.MaxKeyLen) + 1
	page := listPage{locks: slices.Repeat([]lock.LockInfo{entry}, listPageBudget/entryLen+1)}
	b = reply{code: codeOK, kind: kindList, answer: &page}.appendBinary(nil)
	assert.LessOrEqual(t, len(b), 8+len(page.locks)*entryLen, "the leader's estimate bounds an entry")
	assert.Less(t, len(b), transport.MaxFrameSize)
	got, err = decodeReply(b)
	require.NoError(t, err)
	for _, l := range got.answer.(*listPage).locks {
		assert.Len(t, l.Holds, maxListHolds)
		assert.Equal(t, setKeys, l.SetKeys)
	}
}

// A reply that announces more entries than it carries is refused without
// allocating for the count.
func TestListReplyCountMustMatch(t *testing.T) {
	b := []byte{wireVersion, byte(codeOK), byte(kindList), 0}
	b = binary.AppendUvarint(b, math.MaxUint64)
	_, err := decodeReply(b)
	assert.ErrorIs(t, err, ErrBadRequest)
	_, err = decodeReply([]byte{wireVersion, byte(codeOK), byte(kindList), 16, 0})
	assert.ErrorIs(t, err, ErrBadRequest, "unknown flags")
}

func FuzzDecodeRequest(f *testing.F) {
	for _, req := range sampleRequests() {
		f.Add(encodeRequest(req))
	}
	f.Add(encodeRequest(&nodeInfo{id: "n2", apiAddr: "http://10.0.0.2:7070", level: 2}))                    // the optional last field
	f.Add(encodeRequest(&nodeInfo{id: "n2", apiAddr: "http://10.0.0.2:7070", level: 1, version: "v1.4.0"})) // and the one after it
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeRequest(b)
		if err != nil {
			return
		}
		assert.Equal(t, b, encodeRequest(req), "one encoding per request")
		got, err := decodeRequest(encodeRequest(req))
		require.NoError(t, err)
		assert.Equal(t, req, got)
	})
}

func FuzzDecodeReply(f *testing.F) {
	for _, rep := range sampleReplies() {
		f.Add(rep.appendBinary(nil))
	}
	f.Add(reply{code: codeMemberTooOld, kind: kindCommand, msg: "member n2 reads level 1"}.appendBinary(nil))
	f.Add(reply{code: codeOK, kind: kindInfo, answer: &nodeInfo{id: "n2", level: 3}}.appendBinary(nil))
	f.Add(reply{code: codeOK, kind: kindInfo, answer: &nodeInfo{id: "n2", level: 1, version: "v1.4.0"}}.appendBinary(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := decodeReply(b)
		if err != nil {
			return
		}
		got, err := decodeReply(rep.appendBinary(nil))
		require.NoError(t, err)
		assert.Equal(t, rep, got)
	})
}

// Garbage on the node's port is dropped by the transport; malformed or
// forbidden forwarded requests get a bad-request answer; the node serves on.
func TestGarbageAndMalformedRequests(t *testing.T) {
	n := newCluster(t, 1, nil).nodes[0]
	ctx := testCtx(t)

	noise := make([]byte, 4096)
	_, err := rand.Read(noise)
	require.NoError(t, err)
	for _, junk := range [][]byte{
		{0},
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		append([]byte{'F'}, bytes.Repeat([]byte{0xff}, 64)...),
		noise,
	} {
		conn, err := net.Dial("tcp", n.Addr())
		require.NoError(t, err)
		require.NoError(t, conn.SetDeadline(time.Now().Add(patience)))
		conn.Write(junk) // the node may hang up before all is written
		_, err = io.Copy(io.Discard, conn)
		if ne, ok := err.(net.Error); ok {
			assert.False(t, ne.Timeout(), "the node must hang up on garbage, not wait")
		}
		conn.Close()
	}

	client, err := transport.Listen(transport.Config{BindAddr: "127.0.0.1:0", Logger: testLogger("client")})
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	encode := encodeRequest
	acquire := fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second}
	valid := encode(&commandRequest{acquire})
	stamped := acquire
	stamped.Stamp = time.Hour
	for name, body := range map[string][]byte{
		"empty":                 {},
		"other version":         {99, byte(kindCommand)},
		"unknown kind":          {wireVersion, 99},
		"truncated":             valid[:len(valid)-2],
		"trailing bytes":        append(append([]byte{}, valid...), 1),
		"noise":                 noise,
		"stamped command":       encode(&commandRequest{stamped}),
		"tick":                  encode(&commandRequest{fsm.Command{Op: fsm.OpTick}}),
		"read of no key":        encode(&readRequest{}),
		"read, zero owner":      encode(&readRequest{key: "k", withOwner: true}),
		"join without id":       encode(&joinRequest{addr: "127.0.0.1:1"}),
		"remove nobody":         encode(&removeRequest{}),
		"list, long after":      encode(&listRequest{after: strings.Repeat("a", fsm.MaxKeyLen+1)}),
		"retired await":         append([]byte{wireVersion, 6, 1, 'k', 1}, testOwner[:]...),
		"new-term":              encode(&commandRequest{fsm.Command{Op: fsm.OpNewTerm}}),
		"drop-unclaimed":        encode(&commandRequest{fsm.Command{Op: fsm.OpDropUnclaimed}}),
		"wait-acquire, no wait": encode(&waitRequest{commandRequest{acquire}}),
		"wait-acquire, release": encode(&waitRequest{commandRequest{fsm.Command{Op: fsm.OpRelease, Key: "k", Owner: testOwner}}}),
		"long cluster ID":       encode(&nodeIdentity{id: "n9", clusterID: strings.Repeat("a", maxIDLen+1)}),
		"group of none":         {wireVersion, byte(kindGroup), 0},
		"group, waiting":        encode(&groupRequest{cmds: []fsm.Command{acquire, {Op: fsm.OpAcquire, Key: "w", Owner: testOwner, TTL: time.Second, Wait: time.Second}}}),
		"group, stamped":        encode(&groupRequest{cmds: []fsm.Command{acquire, stamped}}),
		"group, session":        encode(&groupRequest{cmds: []fsm.Command{{Op: fsm.OpSessionCreate, Session: testOwner, TTL: time.Second}}}),
		"group, cancel-wait":    encode(&groupRequest{cmds: []fsm.Command{{Op: fsm.OpCancelWait, Key: "k", Owner: testOwner}}}),
		"group, too many":       encode(&groupRequest{cmds: slices.Repeat([]fsm.Command{acquire}, maxGroupCommands+1)}),
		"group, short command":  {wireVersion, byte(kindGroup), 1, 3, 1, 1, 0},
		"group, long length":    {wireVersion, byte(kindGroup), 1, 200, 1, 1},
	} {
		resp, err := client.Call(ctx, n.Addr(), body)
		require.NoError(t, err, name)
		rep, err := decodeReply(resp)
		require.NoError(t, err, name)
		assert.Equal(t, codeBadRequest, rep.code, "%s: %s", name, rep.msg)
	}

	_, err = n.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Second})
	assert.NoError(t, err, "the node still serves")
}

// A node ID another node sends (join, member info, identity) is checked
// as this node's own is: a bad one is refused before it is served.
func TestRequestsRefuseBadNodeIDs(t *testing.T) {
	for _, id := range []string{"a b/../x", "..", "n/1", "n\x00"} {
		for _, r := range []rpcRequest{&joinRequest{id: id, addr: "127.0.0.1:1"}, &nodeInfo{id: id}, &nodeIdentity{id: id}} {
			err := r.admit()
			assert.ErrorIs(t, err, ErrBadRequest, "%T %q", r, id)
			assert.ErrorContains(t, err, fmt.Sprintf("node ID %q", id))
		}
	}
	for _, r := range []rpcRequest{&joinRequest{id: "n-1.a_b", addr: "127.0.0.1:1"}, &nodeInfo{id: "n-1.a_b"}, &nodeIdentity{id: "n-1.a_b"}} {
		assert.NoError(t, r.admit(), "%T", r)
	}
}
