package apiserver

import "github.com/raftlock/raftlock/api"

// Cluster is what the API learns about the node's cluster, beyond the locks
// themselves: who leads, who the members are, and the raft figures /metrics
// exports. NodeStatus is the Cluster of a *cluster.Node (NewHandler uses it
// for such a store by itself); another store may implement Cluster, or a
// program may pass its own in Config.Cluster.
//
// Status is called once per /v1/cluster, /healthz or /metrics request, from
// any goroutine, possibly concurrently; it must be cheap (no raft round trip)
// and must not block on the leader: it reports what this node knows now.
type Cluster interface {
	Status() api.ClusterStatus
}
