package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
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

func sampleRequests() []request {
	return []request{
		{kind: kindCommand, cmd: fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second, Wait: time.Minute}},
		{kind: kindCommand, cmd: fsm.Command{Op: fsm.OpRelease, Key: "k", Owner: testOwner}},
		{kind: kindRead, key: "some/key"},
		{kind: kindRead, key: "k", owner: testOwner, withOwner: true},
		{kind: kindWaitAcquire, cmd: fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second, Wait: time.Minute}},
		{kind: kindJoin, id: "n3", addr: "10.0.0.3:7000"},
		{kind: kindJoinEmpty, id: "n3", addr: "10.0.0.3:7000"},
		{kind: kindRemove, id: "n3"},
		{kind: kindList},
		{kind: kindList, prefix: "jobs/", after: "jobs/a", limit: 100},
		{kind: kindInfo, id: "n2", apiAddr: "http://10.0.0.2:7070"},
		{kind: kindInfo, id: "n2"},
		{kind: kindIdentity, id: "n3", clusterID: "5f0c9a3b8e7d6c5b4a39281706f5e4d3"},
		{kind: kindIdentity, id: "n3"},
		{kind: kindServerStats, id: "n0"},
		{kind: kindServerStats, id: "n0", health: healthReport{known: true, healthy: true, tolerance: 1, voters: 3, healthyVoters: 3}},
		{kind: kindServerStats, id: "n0", health: healthReport{known: true, voters: 5, healthyVoters: 3}},
	}
}

func sampleReplies() []reply {
	return []reply{
		{code: codeOK, kind: kindCommand, result: fsm.Result{Status: fsm.StatusGranted, Token: 7, ExpiresAt: 9 * time.Second, Now: 4 * time.Second, Waiters: 2}},
		{code: codeOK, kind: kindRead, read: readResult{held: true, mine: true, token: 3, remaining: time.Second, waiters: 1}},
		{code: codeOK, kind: kindRead},
		{code: codeOK, kind: kindWaitAcquire, wait: waitAnswer{status: fsm.StatusGranted, token: 7, remaining: time.Second}},
		{code: codeOK, kind: kindWaitAcquire, wait: waitAnswer{status: fsm.StatusHeld, token: 3, remaining: time.Minute, waiters: 2}},
		{code: codeOK, kind: kindJoin},
		{code: codeOK, kind: kindJoinEmpty},
		{code: codeOK, kind: kindList},
		{code: codeOK, kind: kindList, list: listPage{more: true, locks: []lock.LockInfo{
			{Key: "jobs/a", KeyInfo: lock.KeyInfo{Locked: true, Token: 3, Remaining: time.Second, Waiters: 2}},
			{Key: "jobs/b", KeyInfo: lock.KeyInfo{Locked: true, Token: 9, Remaining: time.Millisecond}},
		}}},
		{code: codeOK, kind: kindInfo, info: nodeInfo{id: "n1", apiAddr: "https://10.0.0.1:7070"}},
		{code: codeOK, kind: kindInfo, info: nodeInfo{id: "n2"}},
		{code: codeOK, kind: kindIdentity, info: nodeInfo{id: "n1", clusterID: "5f0c9a3b8e7d6c5b4a39281706f5e4d3"}},
		{code: codeOK, kind: kindIdentity, info: nodeInfo{id: "n1"}},
		{code: codeOK, kind: kindServerStats, stats: serverStats{lastContact: 42 * time.Millisecond, lastTerm: 3, lastIndex: 1 << 40}},
		{code: codeOK, kind: kindServerStats, stats: serverStats{lastContact: -1}},
		{code: codeNotLeader, kind: kindCommand, leader: "10.0.0.1:7000"},
		{code: codeNotLeader, kind: kindRead},
		{code: codeLostLeadership, kind: kindCommand, msg: "lost"},
		{code: codeBadRequest, kind: kindRead, msg: "bad"},
	}
}

func TestWireRoundTrip(t *testing.T) {
	for _, req := range sampleRequests() {
		b, err := req.appendBinary(nil)
		require.NoError(t, err)
		got, err := decodeRequest(b)
		require.NoError(t, err)
		assert.Equal(t, req, got)
	}
	for _, rep := range sampleReplies() {
		got, err := decodeReply(rep.appendBinary(nil))
		require.NoError(t, err)
		assert.Equal(t, rep, got)
	}
}

// Every proper prefix of a valid message is rejected, never misread.
func TestWireRejectsTruncation(t *testing.T) {
	for _, req := range sampleRequests() {
		b, err := req.appendBinary(nil)
		require.NoError(t, err)
		for i := range len(b) {
			_, err := decodeRequest(b[:i])
			assert.ErrorIs(t, err, ErrBadRequest, "%v cut at %d", req.kind, i)
		}
		_, err = decodeRequest(append(b, 0))
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
			Key:     fmt.Sprintf("%0*d", fsm.MaxKeyLen, i),
			KeyInfo: lock.KeyInfo{Locked: true, Token: math.MaxUint64, Remaining: math.MinInt64, Waiters: fsm.MaxWaiters},
		})
	}
	b := reply{code: codeOK, kind: kindList, list: page}.appendBinary(nil)
	assert.LessOrEqual(t, len(b), 8+maxListPage*maxListEntryLen)
	assert.Less(t, len(b), transport.MaxFrameSize/4)
	got, err := decodeReply(b)
	require.NoError(t, err)
	assert.Equal(t, page, got.list)
}

// A reply that announces more entries than it carries is refused without
// allocating for the count.
func TestListReplyCountMustMatch(t *testing.T) {
	b := []byte{wireVersion, byte(codeOK), byte(kindList), 0}
	b = binary.AppendUvarint(b, math.MaxUint64)
	_, err := decodeReply(b)
	assert.ErrorIs(t, err, ErrBadRequest)
	_, err = decodeReply([]byte{wireVersion, byte(codeOK), byte(kindList), 2, 0})
	assert.ErrorIs(t, err, ErrBadRequest, "unknown flags")
}

func FuzzDecodeRequest(f *testing.F) {
	for _, req := range sampleRequests() {
		b, _ := req.appendBinary(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeRequest(b)
		if err != nil {
			return
		}
		again, err := req.appendBinary(nil)
		require.NoError(t, err)
		got, err := decodeRequest(again)
		require.NoError(t, err)
		assert.Equal(t, req, got)
	})
}

func FuzzDecodeReply(f *testing.F) {
	for _, rep := range sampleReplies() {
		f.Add(rep.appendBinary(nil))
	}
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
	encode := func(r request) []byte {
		b, err := r.appendBinary(nil)
		require.NoError(t, err)
		return b
	}
	acquireReq := request{kind: kindCommand, cmd: fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second}}
	valid := encode(acquireReq)
	stamped := acquireReq
	stamped.cmd.Stamp = time.Hour
	for name, body := range map[string][]byte{
		"empty":                 {},
		"other version":         {99, byte(kindCommand)},
		"unknown kind":          {wireVersion, 99},
		"truncated":             valid[:len(valid)-2],
		"trailing bytes":        append(append([]byte{}, valid...), 1),
		"noise":                 noise,
		"stamped command":       encode(stamped),
		"tick":                  encode(request{kind: kindCommand, cmd: fsm.Command{Op: fsm.OpTick}}),
		"read of no key":        encode(request{kind: kindRead}),
		"read, zero owner":      encode(request{kind: kindRead, key: "k", withOwner: true}),
		"join without id":       encode(request{kind: kindJoin, addr: "127.0.0.1:1"}),
		"remove nobody":         encode(request{kind: kindRemove}),
		"list, long after":      encode(request{kind: kindList, after: strings.Repeat("a", fsm.MaxKeyLen+1)}),
		"retired await":         append([]byte{wireVersion, 6, 1, 'k', 1}, testOwner[:]...),
		"new-term":              encode(request{kind: kindCommand, cmd: fsm.Command{Op: fsm.OpNewTerm}}),
		"drop-unclaimed":        encode(request{kind: kindCommand, cmd: fsm.Command{Op: fsm.OpDropUnclaimed}}),
		"wait-acquire, no wait": encode(request{kind: kindWaitAcquire, cmd: acquireReq.cmd}),
		"wait-acquire, release": encode(request{kind: kindWaitAcquire, cmd: fsm.Command{Op: fsm.OpRelease, Key: "k", Owner: testOwner}}),
		"long cluster ID":       encode(request{kind: kindIdentity, id: "n9", clusterID: strings.Repeat("a", maxIDLen+1)}),
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
