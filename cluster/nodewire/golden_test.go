package nodewire

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
// change. A new message goes at the end of goldenRequests or goldenReplies,
// and its line at the end of the file.

func TestWireRequestsMatchGolden(t *testing.T) {
	golden := readGolden(t, "testdata/requests.golden")
	samples := goldenRequests()
	require.Len(t, golden, len(samples), "a line per sample request")
	for i, req := range samples {
		want := golden[i]
		assert.Equal(t, want, fmt.Sprintf("%v %x", req.Kind(), EncodeRequest(req)), "sample request %d", i)
		b, err := hex.DecodeString(strings.Fields(want)[1])
		require.NoError(t, err)
		got, err := DecodeRequest(b)
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
		assert.Equal(t, want, fmt.Sprintf("%v %x", rep.Kind, rep.AppendBinary(nil)), "sample reply %d", i)
		b, err := hex.DecodeString(strings.Fields(want)[1])
		require.NoError(t, err)
		got, err := DecodeReply(b)
		require.NoError(t, err, "sample reply %d", i)
		assert.Equal(t, rep, got, "sample reply %d", i)
	}
}

// goldenRequests are the sample requests and those with the optional
// trailing fields (which a truncation of them would not be refused for).
func goldenRequests() []Request {
	return append(sampleRequests(),
		&Join{ID: "n3", Addr: "10.0.0.3:7000", ClusterID: "5f0c9a3b8e7d6c5b4a39281706f5e4d3"},
		&Info{ID: "n2", APIAddr: "http://10.0.0.2:7070", Level: 2},
		&Info{ID: "n2", APIAddr: "http://10.0.0.2:7070", Level: 1, Version: "v1.4.0"},
		sampleStatsWithMembers(),
	)
}

// goldenReplies are the sample replies, the error codes they lack, and
// those with the optional trailing fields.
func goldenReplies() []Reply {
	return append(sampleReplies(),
		Reply{Code: CodeMemberTooOld, Kind: KindCommand, Msg: "member n2 reads level 1"},
		Reply{Code: CodeQuotaExceeded, Kind: KindCommand, Msg: "lock: quota exceeded: 10 locks"},
		Reply{Code: CodeWrongCluster, Kind: KindJoin, Msg: "cluster: data dir belongs to another cluster"},
		Reply{Code: CodeOK, Kind: KindInfo, Answer: &Info{ID: "n2", Level: 3}},
		Reply{Code: CodeOK, Kind: KindInfo, Answer: &Info{ID: "n2", Level: 1, Version: "v1.4.0"}},
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
