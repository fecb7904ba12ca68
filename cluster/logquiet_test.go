package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What raft writes at every start of a cluster, every stop of a node and
// every catch-up of a member is no warning or error; what it writes about an
// unreachable member says what to do, and repeats are collapsed.
func TestRaftLinesOfNormalEventsAreNotWarnings(t *testing.T) {
	var buf bytes.Buffer
	q := newQuieter()
	t.Cleanup(q.Close)
	log := q.Wrap(hclog.New(&hclog.LoggerOptions{Name: "raftlock", Level: hclog.Info, JSONFormat: true, Output: &buf})).Named("raft")

	log.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "", "last-leader-id", "")
	log.Warn("failed to get previous log", "previous-index", 5, "last-index", 0, "error", "log not found")
	log.Warn("appendEntries rejected, sending older logs", "peer", "{Voter b 10.0.0.2:7071}", "next", 1)
	log.Warn("rejecting pre-vote request since we have a leader", "from", "10.0.0.2:7071", "leader", "10.0.0.1:7071")
	closedRead := &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
	log.Error("failed to decode incoming command", "error", closedRead) // debug: not shown at info
	log.Error("failed to flush response", "error", &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed})
	// A decode failure of another kind stays an error.
	log.Error("failed to decode incoming command", "error", errors.New("msgpack decode error"))
	for range 5 {
		log.Error("failed to heartbeat to", "peer", "10.0.0.3:7071", "backoff time", "10ms", "error", "EOF")
		log.Error("failed to make requestVote RPC", "target", "{Voter c 10.0.0.3:7071}", "error", "EOF", "term", 3)
	}

	log.Warn("Election timeout reached, restarting election")

	var got []map[string]any
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		got = append(got, m)
	}
	require.Len(t, got, 8)
	assert.Equal(t, hintNoQuorum, got[7]["what_to_do"])
	for _, l := range got[:4] {
		assert.Equal(t, "info", l["@level"], l["@message"])
	}
	assert.Equal(t, "msgpack decode error", got[4]["error"])
	assert.Equal(t, "error", got[4]["@level"])
	assert.Equal(t, "failed to heartbeat to", got[5]["@message"])
	assert.Equal(t, hintPeerDown, got[5]["what_to_do"])
	assert.Equal(t, "failed to make requestVote RPC", got[6]["@message"])
	assert.Equal(t, hintPeerDown, got[6]["what_to_do"])
}
