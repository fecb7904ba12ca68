package datadir

import (
	"io"

	"github.com/hashicorp/raft"
)

// RaftState is what the store reads of the raft that uses it, once raft
// runs (*raft.Raft has these methods).
type RaftState interface {
	AppliedIndex() uint64
	CurrentTerm() uint64
	LastIndex() uint64
}

// SetRaft gives the store the raft that uses it, which DeleteRange
// (keptPastSnapshot) and CatchUp read; raft's goroutines may already be
// running.
func (g *Store) SetRaft(r RaftState) {
	g.raft.Store(&r)
}

func (g *Store) raftState() RaftState {
	if r := g.raft.Load(); r != nil {
		return *r
	}
	return nil
}

// ServeCatchUp hands to out, for raft, the RPCs that arrive on in (a
// transport's Consumer), passed through CatchUp, until stop is closed. An
// RPC it holds when stop closes is answered with raft.ErrRaftShutdown.
func (g *Store) ServeCatchUp(in <-chan raft.RPC, out chan<- raft.RPC, stop <-chan struct{}) {
	for {
		select {
		case rpc := <-in:
			rpc, toRaft := g.CatchUp(rpc)
			if !toRaft {
				continue
			}
			select {
			case out <- rpc:
			case <-stop:
				rpc.Respond(nil, raft.ErrRaftShutdown)
				return
			}
		case <-stop:
			return
		}
	}
}

// CatchUp looks at an RPC from the leader before raft does, and answers in
// raft's place the ones that would make raft (v1.7.3) lose the state it has
// applied, or crash, or never catch up. It returns the RPC to hand to raft
// (perhaps with its entries trimmed) and whether to hand it on at all.
//
// What it guards against: a leader that lost track of how far this member
// got (its answers were lost in a partition, or the leader is new) can send
// a snapshot OLDER than the state this member has already applied. raft
// installs it anyway: the state machine goes back to the snapshot, raft
// empties a log that refuses gaps (raft-wal) and keeps believing the log
// ends where it did. If this member had taken a newer snapshot of its own,
// the entries between the leader's snapshot and its own are gone from the
// log, so when the next commit comes raft reads them to apply them, finds
// none and panics ("log not found"), then or at the next start. So such a
// snapshot is answered as installed without touching anything: the state
// it carries is a prefix of what this member applied (applied entries are
// committed, and every leader holds the committed entries), which is what
// "installed" tells the leader.
//
// The leader then sends the entries after its snapshot, starting before
// this member's log does (its own snapshot compacted them away). raft
// checks the entry before them against its log, cannot find it, refuses,
// and the leader, stepping back, ends at its snapshot again: forever. Such
// an append is answered or trimmed here by the same argument: entries up to
// the applied index are committed, identical on the leader and here, so an
// append that holds nothing past them is answered as done, and one that
// goes further is handed to raft starting from the first entry this log
// holds (checked by raft against that entry, as always).
//
// Only requests of raft's current term are touched (what raft would answer
// then does not depend on its role); any other goes to raft as it came.
//
// A snapshot newer than the applied state goes to raft, which installs it;
// DeleteRange keeps the log past it when the log agrees with it there
// (keptPastSnapshot). One case is left to raft: a log that held entries of
// a lost leader past the snapshot (they disagree with it) is emptied while
// raft still believes it ends where they ended, so raft refuses the
// leader's appends from the snapshot on, and the leader sends snapshots
// again, until one ends past that point (the leader snapshots as its log
// grows); raft then goes on from it. That stalls this member for a while;
// it loses and applies nothing wrong, and nothing here could mend it
// sooner without writing entries raft never sent.
func (g *Store) CatchUp(rpc raft.RPC) (raft.RPC, bool) {
	r := g.raftState()
	if r == nil {
		return rpc, true
	}
	switch req := rpc.Command.(type) {
	case *raft.InstallSnapshotRequest:
		term := r.CurrentTerm()
		if req.Term != term || req.LastLogIndex > r.AppliedIndex() {
			return rpc, true
		}
		// raft must read a snapshot it answers to the end (the connection
		// carries the next request after it); so must this.
		_, err := io.Copy(io.Discard, rpc.Reader)
		g.logger.Info("answered a snapshot older than the state applied here without installing it",
			"snapshot_index", req.LastLogIndex, "applied_index", r.AppliedIndex(), "error", err)
		rpc.Respond(&raft.InstallSnapshotResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: req.ProtocolVersion},
			Term: term, Success: err == nil}, err)
		return rpc, false

	case *raft.AppendEntriesRequest:
		if req.PrevLogEntry == 0 {
			return rpc, true // from the log's start: nothing to look up
		}
		term := r.CurrentTerm()
		applied := r.AppliedIndex()
		if req.Term != term || req.PrevLogEntry > applied {
			return rpc, true
		}
		first, err := g.FirstIndex()
		if err != nil || first == 0 || req.PrevLogEntry >= first {
			return rpc, true // raft finds the entry before them, or not
		}
		last := req.PrevLogEntry + uint64(len(req.Entries))
		if last <= applied {
			rpc.Respond(&raft.AppendEntriesResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: req.ProtocolVersion},
				Term: term, LastLog: r.LastIndex(), Success: true}, nil)
			return rpc, false
		}
		if first > applied {
			return rpc, true // no entry of this log is known to be the leader's
		}
		// Entries are consecutive from PrevLogEntry+1 (raft sends them so).
		at := first - req.PrevLogEntry - 1
		trimmed := *req
		trimmed.PrevLogEntry, trimmed.PrevLogTerm = first, req.Entries[at].Term
		trimmed.Entries = req.Entries[at+1:]
		rpc.Command = &trimmed
		return rpc, true
	}
	return rpc, true
}
