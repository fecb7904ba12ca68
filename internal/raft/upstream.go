package raft

// The fork's data types, interfaces and errors are hashicorp/raft's own
// (aliases, not copies): a log store, stable store, snapshot store, FSM or
// transport written for hashicorp/raft (raft-wal, raft-boltdb, raftlock's
// transport) is one for this package, a Log or Configuration passes between
// the two without conversion, and errors.Is matches either package's name
// for an error. Only the engine is copied (see doc.go): Raft, Config,
// Observer and Observation are the fork's own, since they hold the engine
// or have unexported fields the engine sets.

import (
	upstream "github.com/hashicorp/raft"
)

// Data on the wire and on disk.
type (
	Log                         = upstream.Log
	LogType                     = upstream.LogType
	Configuration               = upstream.Configuration
	ConfigurationChangeCommand  = upstream.ConfigurationChangeCommand
	Server                      = upstream.Server
	ServerID                    = upstream.ServerID
	ServerAddress               = upstream.ServerAddress
	ServerSuffrage              = upstream.ServerSuffrage
	ProtocolVersion             = upstream.ProtocolVersion
	SnapshotVersion             = upstream.SnapshotVersion
	SnapshotMeta                = upstream.SnapshotMeta
	RaftState                   = upstream.RaftState
	RPC                         = upstream.RPC
	RPCResponse                 = upstream.RPCResponse
	RPCHeader                   = upstream.RPCHeader
	WithRPCHeader               = upstream.WithRPCHeader
	AppendEntriesRequest        = upstream.AppendEntriesRequest
	AppendEntriesResponse       = upstream.AppendEntriesResponse
	RequestVoteRequest          = upstream.RequestVoteRequest
	RequestVoteResponse         = upstream.RequestVoteResponse
	RequestPreVoteRequest       = upstream.RequestPreVoteRequest
	RequestPreVoteResponse      = upstream.RequestPreVoteResponse
	InstallSnapshotRequest      = upstream.InstallSnapshotRequest
	InstallSnapshotResponse     = upstream.InstallSnapshotResponse
	TimeoutNowRequest           = upstream.TimeoutNowRequest
	TimeoutNowResponse          = upstream.TimeoutNowResponse
	LeaderObservation           = upstream.LeaderObservation
	PeerObservation             = upstream.PeerObservation
	FailedHeartbeatObservation  = upstream.FailedHeartbeatObservation
	ResumedHeartbeatObservation = upstream.ResumedHeartbeatObservation
)

// What the engine is given: stores, state machine, transport.
type (
	LogStore              = upstream.LogStore
	MonotonicLogStore     = upstream.MonotonicLogStore
	StableStore           = upstream.StableStore
	SnapshotStore         = upstream.SnapshotStore
	SnapshotSink          = upstream.SnapshotSink
	FSM                   = upstream.FSM
	BatchingFSM           = upstream.BatchingFSM
	FSMSnapshot           = upstream.FSMSnapshot
	ConfigurationStore    = upstream.ConfigurationStore
	Transport             = upstream.Transport
	WithPreVote           = upstream.WithPreVote
	WithClose             = upstream.WithClose
	WithPeers             = upstream.WithPeers
	LoopbackTransport     = upstream.LoopbackTransport
	AppendPipeline        = upstream.AppendPipeline
	AppendFuture          = upstream.AppendFuture
	StreamLayer           = upstream.StreamLayer
	ServerAddressProvider = upstream.ServerAddressProvider
)

// What the engine hands back (raft-autopilot names these).
type (
	Future                   = upstream.Future
	IndexFuture              = upstream.IndexFuture
	ApplyFuture              = upstream.ApplyFuture
	ConfigurationFuture      = upstream.ConfigurationFuture
	SnapshotFuture           = upstream.SnapshotFuture
	LeadershipTransferFuture = upstream.LeadershipTransferFuture
)

// Implementations that need nothing of the engine.
type (
	InmemStore             = upstream.InmemStore
	InmemTransport         = upstream.InmemTransport
	InmemSnapshotStore     = upstream.InmemSnapshotStore
	InmemSnapshotSink      = upstream.InmemSnapshotSink
	FileSnapshotStore      = upstream.FileSnapshotStore
	FileSnapshotSink       = upstream.FileSnapshotSink
	DiscardSnapshotStore   = upstream.DiscardSnapshotStore
	DiscardSnapshotSink    = upstream.DiscardSnapshotSink
	NetworkTransport       = upstream.NetworkTransport
	NetworkTransportConfig = upstream.NetworkTransportConfig
	TCPStreamLayer         = upstream.TCPStreamLayer
)

var (
	NewInmemStore                  = upstream.NewInmemStore
	NewInmemAddr                   = upstream.NewInmemAddr
	NewInmemTransport              = upstream.NewInmemTransport
	NewInmemTransportWithTimeout   = upstream.NewInmemTransportWithTimeout
	NewInmemSnapshotStore          = upstream.NewInmemSnapshotStore
	NewFileSnapshotStore           = upstream.NewFileSnapshotStore
	NewFileSnapshotStoreWithLogger = upstream.NewFileSnapshotStoreWithLogger
	NewDiscardSnapshotStore        = upstream.NewDiscardSnapshotStore
	NewNetworkTransport            = upstream.NewNetworkTransport
	NewNetworkTransportWithConfig  = upstream.NewNetworkTransportWithConfig
	NewNetworkTransportWithLogger  = upstream.NewNetworkTransportWithLogger
	NewTCPTransport                = upstream.NewTCPTransport
	NewTCPTransportWithConfig      = upstream.NewTCPTransportWithConfig
	NewTCPTransportWithLogger      = upstream.NewTCPTransportWithLogger
	ReadPeersJSON                  = upstream.ReadPeersJSON
	ReadConfigJSON                 = upstream.ReadConfigJSON
)

const (
	LogCommand              = upstream.LogCommand
	LogNoop                 = upstream.LogNoop
	LogAddPeerDeprecated    = upstream.LogAddPeerDeprecated
	LogRemovePeerDeprecated = upstream.LogRemovePeerDeprecated
	LogBarrier              = upstream.LogBarrier
	LogConfiguration        = upstream.LogConfiguration

	Voter    = upstream.Voter
	Nonvoter = upstream.Nonvoter
	Staging  = upstream.Staging

	AddVoter     = upstream.AddVoter
	AddNonvoter  = upstream.AddNonvoter
	DemoteVoter  = upstream.DemoteVoter
	RemoveServer = upstream.RemoveServer
	Promote      = upstream.Promote
	AddStaging   = upstream.AddStaging

	Follower  = upstream.Follower
	Candidate = upstream.Candidate
	Leader    = upstream.Leader
	Shutdown  = upstream.Shutdown

	ProtocolVersionMin = upstream.ProtocolVersionMin
	ProtocolVersionMax = upstream.ProtocolVersionMax
	SnapshotVersionMin = upstream.SnapshotVersionMin
	SnapshotVersionMax = upstream.SnapshotVersionMax

	DefaultTimeoutScale = upstream.DefaultTimeoutScale
)

var (
	ErrLeader                          = upstream.ErrLeader
	ErrNotLeader                       = upstream.ErrNotLeader
	ErrNotVoter                        = upstream.ErrNotVoter
	ErrLeadershipLost                  = upstream.ErrLeadershipLost
	ErrAbortedByRestore                = upstream.ErrAbortedByRestore
	ErrRaftShutdown                    = upstream.ErrRaftShutdown
	ErrEnqueueTimeout                  = upstream.ErrEnqueueTimeout
	ErrNothingNewToSnapshot            = upstream.ErrNothingNewToSnapshot
	ErrUnsupportedProtocol             = upstream.ErrUnsupportedProtocol
	ErrCantBootstrap                   = upstream.ErrCantBootstrap
	ErrLeadershipTransferInProgress    = upstream.ErrLeadershipTransferInProgress
	ErrLogNotFound                     = upstream.ErrLogNotFound
	ErrPipelineReplicationNotSupported = upstream.ErrPipelineReplicationNotSupported
	ErrTransportShutdown               = upstream.ErrTransportShutdown
	ErrPipelineShutdown                = upstream.ErrPipelineShutdown
)

// DefaultMaxRPCsInFlight is NetworkTransportConfig's default.
const DefaultMaxRPCsInFlight = upstream.DefaultMaxRPCsInFlight
