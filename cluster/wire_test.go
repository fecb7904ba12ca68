package cluster

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/transport"
)

var testOwner = fsm.Owner{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

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
	encode := nodewire.EncodeRequest
	acquire := fsm.Command{Op: fsm.OpAcquire, Key: "k", Owner: testOwner, TTL: time.Second}
	valid := encode(&nodewire.Command{Cmd: acquire})
	stamped := acquire
	stamped.Stamp = time.Hour
	for name, body := range map[string][]byte{
		"empty":                 {},
		"other version":         {99, byte(nodewire.KindCommand)},
		"unknown kind":          {nodewire.Version, 99},
		"truncated":             valid[:len(valid)-2],
		"trailing bytes":        append(append([]byte{}, valid...), 1),
		"noise":                 noise,
		"stamped command":       encode(&nodewire.Command{Cmd: stamped}),
		"tick":                  encode(&nodewire.Command{Cmd: fsm.Command{Op: fsm.OpTick}}),
		"read of no key":        encode(&nodewire.Read{}),
		"read, zero owner":      encode(&nodewire.Read{Key: "k", WithOwner: true}),
		"join without id":       encode(&nodewire.Join{Addr: "127.0.0.1:1"}),
		"remove nobody":         encode(&nodewire.Remove{}),
		"list, long after":      encode(&nodewire.List{After: strings.Repeat("a", fsm.MaxKeyLen+1)}),
		"retired await":         append([]byte{nodewire.Version, 6, 1, 'k', 1}, testOwner[:]...),
		"new-term":              encode(&nodewire.Command{Cmd: fsm.Command{Op: fsm.OpNewTerm}}),
		"drop-unclaimed":        encode(&nodewire.Command{Cmd: fsm.Command{Op: fsm.OpDropUnclaimed}}),
		"wait-acquire, no wait": encode(&nodewire.WaitAcquire{Command: nodewire.Command{Cmd: acquire}}),
		"wait-acquire, release": encode(&nodewire.WaitAcquire{Command: nodewire.Command{Cmd: fsm.Command{Op: fsm.OpRelease, Key: "k", Owner: testOwner}}}),
		"long cluster ID":       encode(&nodewire.Identity{ID: "n9", ClusterID: strings.Repeat("a", nodewire.MaxIDLen+1)}),
		"group of none":         {nodewire.Version, byte(nodewire.KindGroup), 0},
		"group, waiting":        encode(&nodewire.Group{Cmds: []fsm.Command{acquire, {Op: fsm.OpAcquire, Key: "w", Owner: testOwner, TTL: time.Second, Wait: time.Second}}}),
		"group, stamped":        encode(&nodewire.Group{Cmds: []fsm.Command{acquire, stamped}}),
		"group, session":        encode(&nodewire.Group{Cmds: []fsm.Command{{Op: fsm.OpSessionCreate, Session: testOwner, TTL: time.Second}}}),
		"group, cancel-wait":    encode(&nodewire.Group{Cmds: []fsm.Command{{Op: fsm.OpCancelWait, Key: "k", Owner: testOwner}}}),
		"group, too many":       encode(&nodewire.Group{Cmds: slices.Repeat([]fsm.Command{acquire}, nodewire.MaxGroupCommands+1)}),
		"group, short command":  {nodewire.Version, byte(nodewire.KindGroup), 1, 3, 1, 1, 0},
		"group, long length":    {nodewire.Version, byte(nodewire.KindGroup), 1, 200, 1, 1},
	} {
		resp, err := client.Call(ctx, n.Addr(), body)
		require.NoError(t, err, name)
		rep, err := nodewire.DecodeReply(resp)
		require.NoError(t, err, name)
		assert.Equal(t, nodewire.CodeBadRequest, rep.Code, "%s: %s", name, rep.Msg)
	}

	_, err = n.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Second})
	assert.NoError(t, err, "the node still serves")
}

// A node ID another node sends (join, member info, identity) is checked
// as this node's own is: a bad one is refused before it is served.
func TestRequestsRefuseBadNodeIDs(t *testing.T) {
	for _, id := range []string{"a b/../x", "..", "n/1", "n\x00"} {
		for _, r := range []nodewire.Request{&nodewire.Join{ID: id, Addr: "127.0.0.1:1"}, &nodewire.Info{ID: id}, &nodewire.Identity{ID: id}} {
			err := admit(r)
			assert.ErrorIs(t, err, ErrBadRequest, "%T %q", r, id)
			assert.ErrorContains(t, err, fmt.Sprintf("node ID %q", id))
		}
	}
	for _, r := range []nodewire.Request{&nodewire.Join{ID: "n-1.a_b", Addr: "127.0.0.1:1"}, &nodewire.Info{ID: "n-1.a_b"}, &nodewire.Identity{ID: "n-1.a_b"}} {
		assert.NoError(t, admit(r), "%T", r)
	}
}

// Every request kind of the format is served, each by its own line of the
// table (so a kind added to nodewire and not served here fails).
func TestEveryWireKindIsServed(t *testing.T) {
	for _, k := range nodewire.Kinds() {
		s, ok := servers[k]
		if assert.True(t, ok, "kind %v is not served", k) {
			assert.NotNil(t, s.admit, "%v", k)
			assert.NotNil(t, s.serve, "%v", k)
		}
	}
	assert.Len(t, servers, len(nodewire.Kinds()), "a served kind the format does not know")
}
