package cluster

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/cluster/datadir"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/internal/broadcast"
	raft "github.com/raftlock/raftlock/internal/raft"
	"github.com/raftlock/raftlock/transport"
)

// The steps of New, in order. Each one that opens or starts something
// registers how to undo it; if a later step fails, New undoes them all, the
// latest first.

// newNode makes the node's data dir and its parts that start nothing.
func newNode(cfg Config) (*Node, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Name: "raftlock", Level: hclog.Warn})
	}
	logger = logger.With("node", cfg.NodeID)
	clock := cfg.Clock
	if clock == nil {
		clock = processClock
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: data dir: %w", err)
	}

	n := &Node{
		cfg:           cfg,
		log:           logger,
		clock:         clock,
		leaderChanged: broadcast.New(),
		closing:       make(chan struct{}),
		quiet:         newQuieter(),
	}
	n.levels = buildLevels
	if cfg.levels != nil {
		n.levels = *cfg.levels
	}
	n.version = raftlockVersion
	if cfg.version != nil {
		n.version = *cfg.version
	}
	n.waiters = n.newWaiters()
	n.sm = newStateMachine(logger.Named("fsm"), n.waiters.Deliver)
	n.sm.levels = n.levels
	n.sm.afterApply = n.pokeExpiryTimer
	n.sm.startWatches(n.cfg.MaxWatchers)
	n.sm.monotonic = clock.Monotonic
	n.quotas = newQuotas(cfg)
	return n, nil
}

// startup is what New's steps share.
type startup struct {
	n       *Node
	cleanup []func() // undoes what the steps did, in reverse order
	started bool     // New succeeded: nothing is undone

	hasIdentity bool               // the data dir had an identity file
	existing    bool               // the data dir holds raft state
	snaps       raft.SnapshotStore // the node's snapshots, checked by the log mark
}

func (s *startup) undoUnlessStarted() {
	if s.started {
		return
	}
	defer s.n.quiet.Close()
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
}

// listen starts the node's listener (its RPCs, raft's among them).
func (s *startup) listen() error {
	n, cfg := s.n, s.n.cfg
	tr, err := transport.Listen(transport.Config{
		BindAddr:      cfg.BindAddr,
		AdvertiseAddr: cfg.AdvertiseAddr,
		Logger:        n.quiet.Wrap(n.log.Named("transport")),
		ServerTLS:     cfg.ServerTLS,
		ClientTLS:     cfg.ClientTLS,
		Dial:          cfg.TransportDial,
		Listen:        cfg.TransportListen,
	})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	n.tr = tr
	s.cleanup = append(s.cleanup, func() { tr.Close() })
	return nil
}

// openDataDir locks the data dir, checks whose it is, and opens its raft
// log and snapshots, refusing a log that lost entries it had stored.
func (s *startup) openDataDir() error {
	n, cfg := s.n, s.n.cfg
	unlockDir, err := datadir.Lock(cfg.DataDir)
	if err != nil {
		return dataDirError(err)
	}
	n.unlockDir = unlockDir
	s.cleanup = append(s.cleanup, func() { unlockDir() })
	ident, hasIdentity, err := datadir.OpenIdentity(cfg.DataDir, cfg.NodeID)
	if err != nil {
		return dataDirError(err)
	}
	n.ident, s.hasIdentity = ident, hasIdentity
	store, logKind, err := datadir.OpenLogStore(cfg.DataDir, cfg.LogStore, cfg.WALSegmentSize, n.log, walTestFiles)
	if err != nil {
		return dataDirError(err)
	}
	n.logKind = logKind
	n.store = store
	s.cleanup = append(s.cleanup, func() { store.Close() })
	fileSnaps, err := datadir.OpenSnapshotStore(cfg.DataDir, cfg.SnapshotsRetained, n.log.Named("snapshots"))
	if err != nil {
		return err
	}
	s.snaps, err = store.TrackDurability(cfg.DataDir, fileSnaps)
	return err
}

// checkClusterState refuses a data dir without raft state that the Config
// does not say how to fill, records whose the data dir is, and makes it
// private.
func (s *startup) checkClusterState() error {
	n, cfg := s.n, s.n.cfg
	existing, err := raft.HasExistingState(n.store, n.store, s.snaps)
	if err != nil {
		return fmt.Errorf("cluster: reading raft state: %w", err)
	}
	s.existing = existing
	if !existing && !cfg.Bootstrap && len(cfg.Join) == 0 && cfg.BootstrapExpect == 0 && len(cfg.RetryJoin) == 0 {
		return configError("Bootstrap", "{DataDir} %s holds no cluster state: set {Bootstrap} or {BootstrapExpect} to start a new cluster, or {Join} or {RetryJoin} to join one", cfg.DataDir)
	}
	if !existing && cfg.BootstrapExpect > 0 && n.ident.ClusterID() != "" {
		return configError("BootstrapExpect", "{DataDir} %s names cluster %s but holds no raft state: it will not bootstrap another; empty it to start afresh, or use {RetryJoin} to join that cluster", cfg.DataDir, n.ident.ClusterID())
	}
	if err := n.recordIdentity(s.hasIdentity, existing, &s.cleanup); err != nil {
		return err
	}
	return datadir.MakePrivate(cfg.DataDir, n.log)
}

// startRaft starts raft on the data dir's stores, over the node's
// listener, bootstrapping a new cluster first when the Config says so.
func (s *startup) startRaft() error {
	n, cfg := s.n, s.n.cfg
	logs, err := raft.NewLogCache(512, n.store)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	inbound := newInboundStream(n.tr.StreamLayer())
	netTrans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  inbound,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		// Pipelined replication, through raftTransport: raft v1.7.3's
		// own pipeline hangs for good after a follower refuses an append
		// (a full disk); refusalSafePipeline says how and why it cannot.
		MaxRPCsInFlight: pipelineInFlight,
		Logger:          n.quiet.Wrap(n.log.Named("raft-net")),
	})
	trans := newRaftTransport(netTrans, inbound, n.store.ServeCatchUp)
	s.cleanup = append(s.cleanup, func() { trans.Close() })
	rc, err := n.raftConfig()
	if err != nil {
		return err
	}
	if !s.existing && cfg.Bootstrap {
		// Written to the stores before raft starts, not through a running
		// raft: peers started earlier from the same Peers may already have
		// elected a leader, whose first append would otherwise reach this
		// node before its bootstrap and make it fail ("only works on new
		// clusters").
		servers := []raft.Server{{ID: rc.LocalID, Address: netTrans.LocalAddr()}}
		for _, p := range cfg.Peers {
			if p.ID != cfg.NodeID {
				servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
			}
		}
		if err := raft.BootstrapCluster(rc, logs, n.store, s.snaps, trans, raft.Configuration{Servers: servers}); err != nil {
			return fmt.Errorf("cluster: bootstrap: %w", err)
		}
	}

	r, err := raft.NewRaft(rc, n.sm, logs, n.store, sizedSnapshots{SnapshotStore: s.snaps, sm: n.sm}, trans)
	if err != nil {
		if herr := n.sm.haltError(); herr != nil {
			// Its snapshot is of a newer build: raft says only that it
			// could load none.
			return herr
		}
		return fmt.Errorf("cluster: starting raft: %w", err)
	}
	n.raft = r
	n.store.SetSoleVoter(n.soleVoter)
	n.store.SetRaft(r)
	s.cleanup = append(s.cleanup, func() { r.Shutdown().Error() })
	if s.existing && cfg.Bootstrap {
		if future := r.GetConfiguration(); future.Error() == nil {
			n.noteIgnoredBootstrap(future.Configuration())
		}
	}
	return nil
}

// raftConfig is raft's configuration from the node's Config.
func (n *Node) raftConfig() (*raft.Config, error) {
	cfg := n.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.LeaderWritesInParallel = cfg.LeaderWritesInParallel
	rc.Logger = n.quiet.Wrap(n.log.Named("raft"))
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return rc, nil
}

// startServices starts what runs beside raft: the leadership watch, the
// RPC handler, the reconciler, peer discovery or gossip.
func (s *startup) startServices() error {
	n, cfg := s.n, s.n.cfg
	observations := make(chan raft.Observation, 16)
	n.leaderObserver = raft.NewObserver(observations, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(n.leaderObserver)
	// Before the handler: a leader's stats request (nodewire.KindServerStats)
	// may arrive as soon as it is installed, and is answered by the
	// reconciler.
	n.membership = n.newMembership()
	handler := transport.Handler(n.handleRPC)
	if cfg.wrapRPC != nil {
		handler = cfg.wrapRPC(handler)
	}
	n.tr.Handle(handler)
	n.wg.Go(func() { n.watchLeadership(observations) })
	if err := n.membership.Start(!s.existing); err != nil {
		close(n.closing)
		n.wg.Wait()
		return dataDirError(err) // a gossip setting at fault is a *ConfigError
	}
	s.cleanup = append(s.cleanup, func() { n.membership.StopGossip(false) })
	// From here the node knows how to learn its members' levels (raft and
	// gossip are set), so its snapshots are written for what they read.
	writeVersion := n.machineSnapshotVersion
	n.sm.writeVersion.Store(&writeVersion)
	n.membership.Run(!s.existing)
	s.cleanup = append(s.cleanup, func() { close(n.closing); n.wg.Wait() })
	return nil
}

// joinOrRejoin has a fresh node with Join added by a member before New
// returns; a node with raft state asks to be added again in the background
// (a no-op for a member).
func (s *startup) joinOrRejoin() error {
	n, cfg := s.n, s.n.cfg
	if !s.existing && len(cfg.Join) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout)
		defer cancel()
		via, err := n.membership.Join(ctx, nodewire.KindJoinEmpty, cfg.Join, nil)
		if err != nil {
			return err
		}
		n.log.Info("joined cluster", "via", via)
	}
	if s.existing {
		n.membership.StartRejoin()
	}
	return nil
}
