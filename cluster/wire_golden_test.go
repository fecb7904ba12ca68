package cluster

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The golden files hold, line by line, the kind and the hex bytes of each
// sample request and reply, in the samples' order. The bytes are what nodes
// of other builds read and write during a rolling upgrade: they must never
// change. A new sample is appended to the samples and its line to the file.

func TestWireRequestsMatchGolden(t *testing.T) {
	golden := readGolden(t, "testdata/requests.golden")
	samples := goldenRequests()
	require.Len(t, golden, len(samples), "a line per sample request")
	for i, req := range samples {
		want := golden[i]
		assert.Equal(t, want, fmt.Sprintf("%v %x", req.kind(), encodeRequest(req)), "sample request %d", i)
		b, err := hex.DecodeString(strings.Fields(want)[1])
		require.NoError(t, err)
		got, err := decodeRequest(b)
		require.NoError(t, err, "sample request %d", i)
		assert.Equal(t, req, got, "sample request %d", i)
	}
}

func TestWireRepliesMatchGolden(t *testing.T) {
	golden := readGolden(t, "testdata/replies.golden")
	samples := goldenReplies()
	require.Len(t, golden, len(samples), "a line per sample reply")
	for i, rep := range samples {
		want := golden[i]
		assert.Equal(t, want, fmt.Sprintf("%v %x", rep.kind, rep.appendBinary(nil)), "sample reply %d", i)
		b, err := hex.DecodeString(strings.Fields(want)[1])
		require.NoError(t, err)
		got, err := decodeReply(b)
		require.NoError(t, err, "sample reply %d", i)
		assert.Equal(t, rep, got, "sample reply %d", i)
	}
}

// goldenRequests are the sample requests and those with the optional
// trailing fields (which a truncation of them would not be refused for).
func goldenRequests() []rpcRequest {
	return append(sampleRequests(),
		&joinRequest{id: "n3", addr: "10.0.0.3:7000", clusterID: "5f0c9a3b8e7d6c5b4a39281706f5e4d3"},
		&nodeInfo{id: "n2", apiAddr: "http://10.0.0.2:7070", level: 2},
		&nodeInfo{id: "n2", apiAddr: "http://10.0.0.2:7070", level: 1, version: "v1.4.0"},
	)
}

// goldenReplies are the sample replies, the error codes they lack, and
// those with the optional trailing fields.
func goldenReplies() []reply {
	return append(sampleReplies(),
		reply{code: codeMemberTooOld, kind: kindCommand, msg: "member n2 reads level 1"},
		reply{code: codeQuotaExceeded, kind: kindCommand, msg: "lock: quota exceeded: 10 locks"},
		reply{code: codeWrongCluster, kind: kindJoin, msg: "cluster: data dir belongs to another cluster"},
		reply{code: codeOK, kind: kindInfo, answer: &nodeInfo{id: "n2", level: 3}},
		reply{code: codeOK, kind: kindInfo, answer: &nodeInfo{id: "n2", level: 1, version: "v1.4.0"}},
	)
}

func readGolden(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var lines []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		lines = append(lines, sc.Text())
	}
	return lines
}
