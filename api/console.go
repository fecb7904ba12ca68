package api

// Wire types of the web console's routes (GET /v1/events, GET /v1/waiters)
// and of the agent's debugging routes (GET /v1/agent/config, GET
// /v1/agent/logs).

// ConsoleEvent is one "data:" line of the server-sent event stream GET
// /v1/events: what the console shows, sent once a second.
type ConsoleEvent struct {
	TimeMS int64 `json:"time_ms"` // when the node took it, Unix milliseconds
	// Cluster is the node's view of its cluster; nil when its store is not a cluster.
	Cluster *ClusterStatus `json:"cluster,omitempty"`
	// Locks is the first page of held locks under the stream's prefix.
	Locks ListResponse `json:"locks"`
	// LocksError says why Locks is empty when they could not be read.
	LocksError *ErrorDetail `json:"locks_error,omitempty"`
	// LocksStale: Locks were read from the answering node's own state
	// without asking the leader (as a cluster node does, so that the
	// console works while there is no leader): a moment behind, and a
	// follower's remaining times may overstate.
	LocksStale bool `json:"locks_stale"`
	// History holds one sample per second over the last minutes, oldest first.
	History []ConsoleSample `json:"history"`
	// Watches counts the blocking queries (watches) waiting on this node's
	// HTTP API.
	Watches int `json:"watches"`
	// StoreWatchers counts the watches waiting on the node's store, the
	// HTTP API's and embedded ones (election observers) alike; Sessions
	// the live sessions in its state. Absent when the store does not
	// count them (only a cluster node does).
	StoreWatchers *int `json:"store_watchers,omitempty"`
	Sessions      *int `json:"sessions,omitempty"`
}

// ConsoleSample is one second of the node's activity.
type ConsoleSample struct {
	TimeMS int64 `json:"time_ms"` // end of the second, Unix milliseconds
	// Applied is the raft entries this node applied during the second:
	// the cluster's write throughput, seen from any member.
	Applied uint64 `json:"applied"`
	// Commits is the raft entries this node committed as leader during the
	// second (0 on a follower: only the leader times commits).
	Commits uint64 `json:"commits"`
	// CommitMeanUS is their mean time from proposal to commit, microseconds; 0 without commits.
	CommitMeanUS int64 `json:"commit_mean_us"`
	// Ops is the lock operations this node answered over HTTP during the second.
	Ops uint64 `json:"ops"`
}

// AgentLogsResponse answers GET /v1/agent/logs: the agent's most recent log lines, oldest first.
type AgentLogsResponse struct {
	Lines []string `json:"lines"`
	// Dropped counts older lines no longer kept.
	Dropped uint64 `json:"dropped"`
}

// WaitersResponse answers GET /v1/waiters: the callers queued for a key, in
// the order they will be granted it. It never carries their owners.
type WaitersResponse struct {
	KeyOut
	Waiters []Waiter `json:"waiters"`
	// Stale: read from the answering node's own state, without asking the
	// leader, so it may be a little behind (a status page's read).
	Stale bool `json:"stale"`
}

// Waiter is one queued caller.
type Waiter struct {
	Position   int   `json:"position"`     // 1 is the next to be granted
	TTLMS      int64 `json:"ttl_ms"`       // the lease it asked for
	WaitLeftMS int64 `json:"wait_left_ms"` // how long it will still wait at most
}
