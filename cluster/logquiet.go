package cluster

import (
	"errors"
	"net"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/internal/quietlog"
)

// newQuieter returns the quieter of a node's raft and transport loggers
// (quietlog: repeated warnings and errors become one line per window with
// repeated=N), with raft's lines adjusted by adjustRaftLine.
func newQuieter() *quietlog.Quieter {
	return quietlog.New(quietlog.DefaultWindow, adjustRaftLine)
}

// Hints added to raft's lines about members it cannot reach.
const (
	hintPeerDown = "that member is down or unreachable: start it again, or check the network to it"
	hintNoQuorum = "if this repeats, no majority of the voters answers: start the members that are down, or check the network to them"
)

// adjustRaftLine sets the level of raft's lines that report normal events,
// and adds what to do (what_to_do=…) to those that report an unreachable
// member:
//
//   - "failed to decode incoming command" and "failed to flush response" with
//     a closed connection are what a stop of a node writes (raft reads from
//     and writes to connections the node is closing): debug, not errors;
//   - "heartbeat timeout reached, starting election" is how every new cluster
//     and every leader change begins, "failed to get previous log" (on the
//     follower) and "appendEntries rejected, sending older logs" (on the
//     leader) how a new or restarted member catches up, and a vote refused
//     "since we have a leader" how a member that lost the leader a moment
//     before the others starts an election: info, not warnings;
//   - "failed to pipeline appendEntries" with errPipelineRefused is raft
//     leaving the pipeline after a follower refused an append (pipeline.go):
//     debug; the fallback's own lines report the refusal if it persists.
func adjustRaftLine(level hclog.Level, msg string, args []interface{}) (hclog.Level, []interface{}) {
	if msg == "failed to pipeline appendEntries" && pipelineRefusedError(args) {
		return hclog.Debug, args
	}
	switch msg {
	case "failed to decode incoming command", "failed to flush response":
		if closedConnError(args) {
			return hclog.Debug, args
		}
	case "heartbeat timeout reached, starting election", "appendEntries rejected, sending older logs",
		"failed to get previous log", "rejecting pre-vote request since we have a leader",
		"rejecting vote request since we have a leader":
		if level == hclog.Warn {
			return hclog.Info, args
		}
	case "failed to heartbeat to", "failed to appendEntries to", "failed to contact",
		"failed to pipeline appendEntries", "failed to start pipeline replication to",
		"failed to make requestVote RPC", "failed to make requestPreVote RPC":
		return level, withHint(args, hintPeerDown)
	case "Election timeout reached, restarting election", "failed to contact quorum of nodes, stepping down":
		return level, withHint(args, hintNoQuorum)
	}
	return level, args
}

func withHint(args []interface{}, hint string) []interface{} {
	return append(append(make([]interface{}, 0, len(args)+2), args...), "what_to_do", hint)
}

// closedConnError reports whether the line's error is a read from a
// connection this node closed.
func closedConnError(args []interface{}) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k != "error" {
			continue
		}
		switch e := args[i+1].(type) {
		case error:
			return errors.Is(e, net.ErrClosed) || strings.Contains(e.Error(), "use of closed network connection")
		case string:
			return strings.Contains(e, "use of closed network connection")
		}
	}
	return false
}

// pipelineRefusedError reports whether the line's error is errPipelineRefused.
func pipelineRefusedError(args []interface{}) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "error" {
			e, ok := args[i+1].(error)
			return ok && errors.Is(e, errPipelineRefused)
		}
	}
	return false
}
