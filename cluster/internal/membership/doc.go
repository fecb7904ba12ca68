// Package membership is a raftlock node's membership: who the members are
// and whether they are alive (the leader's raft heartbeats, and gossip:
// hashicorp/serf when the node runs it), how a node gets into the raft
// configuration (a join request to the leader, a restart's rejoin,
// retry-join, BootstrapExpect) and out of it, the one admission check that
// every way in passes (admission.go), and, on the leader, the reconciler
// (hashicorp/raft-autopilot with this package's promoter) that keeps the
// configuration's voters healthy and removes the members that are gone.
//
// Package cluster runs it for each Node: New makes a Manager once raft
// runs, with the node's settings (Config, which cluster fills from its own
// Config) and what only the node has (Node: its node RPC client, its
// leader-change signal and leader term). Membership decides; raft carries
// out its changes, and the node serves the requests other members send
// (cluster's rpcserve.go calls AddMember, RemoveServer, HeardFrom,
// IdentityReply and HeardFromLeader). Why each rule holds is a comment
// next to the code that keeps it: admission.go, members.go, reconcile.go,
// promoter.go, gossip.go, gossip_join.go, bootstrap_expect.go, join.go,
// peers.go.
package membership
