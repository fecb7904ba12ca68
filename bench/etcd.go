package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdSystem is a 3-member etcd cluster embedded in this process
// (go.etcd.io/etcd/server/v3/embed), on loopback, each member with its own
// data dir, default settings (fsync on, 100ms heartbeat, 1s election
// timeout). Locks are client/v3/concurrency Mutexes over Sessions.
type etcdSystem struct {
	p       params
	dir     string
	cfgs    []*embed.Config
	etcds   []*embed.Etcd      // nil once killed
	killed  []*embed.Etcd      // hard-stopped, their listeners still to close
	clients []*clientv3.Client // one per member, talking to that member only
	note    []string
}

func newEtcd(p params) *etcdSystem { return &etcdSystem{p: p} }

func (s *etcdSystem) name() string { return sysEtcd }
func (s *etcdSystem) members() int { return 3 }
func (s *etcdSystem) notes() []string {
	return append([]string{
		"etcd v3.7.3 embedded, 3 members in one process, default config (fsync on, 100ms heartbeat, 1s election); " +
			"each client is a concurrency.Session (one lease) on a clientv3.Client bound to one member; TryLock for try-acquire, Lock for blocking",
	}, s.note...)
}

func (s *etcdSystem) commitIndex() uint64 {
	for _, e := range s.etcds {
		if e != nil {
			return e.Server.CommittedIndex()
		}
	}
	return 0
}

func (s *etcdSystem) start(ctx context.Context) error {
	dir, err := os.MkdirTemp(s.p.dataDir, "bench-etcd-")
	if err != nil {
		return err
	}
	s.dir, s.cfgs, s.etcds, s.clients = dir, nil, nil, nil
	var peers []string
	for i := range 3 {
		pp, err := freePort()
		if err != nil {
			return err
		}
		cp, err := freePort()
		if err != nil {
			return err
		}
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pp)}
		clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", cp)}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
		cfg.InitialClusterToken = "bench"
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.Logger = "zap"
		cfg.LogLevel = "fatal" // a member closing logs errors about its own listeners
		if s.p.verbose {
			cfg.LogLevel = "warn"
		}
		cfg.LogOutputs = []string{"stderr"}
		s.cfgs = append(s.cfgs, cfg)
		peers = append(peers, fmt.Sprintf("%s=%s", cfg.Name, peerURL.String()))
	}
	for _, cfg := range s.cfgs {
		cfg.InitialCluster = strings.Join(peers, ",")
	}
	// The members wait for each other to form the cluster: start them together.
	s.etcds = make([]*embed.Etcd, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, cfg := range s.cfgs {
		wg.Go(func() {
			e, err := startMember(ctx, cfg)
			s.etcds[i], errs[i] = e, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, cfg := range s.cfgs {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{cfg.AdvertiseClientUrls[0].String()},
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			return err
		}
		s.clients = append(s.clients, c)
	}
	_, err = s.leader(ctx)
	return err
}

// startMember starts one member and waits until it serves.
func startMember(ctx context.Context, cfg *embed.Config) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", cfg.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("member %s: %w", cfg.Name, err)
	case <-time.After(time.Minute):
		e.Close()
		return nil, fmt.Errorf("member %s: not ready within a minute", cfg.Name)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
}

func (s *etcdSystem) stop() {
	for _, c := range s.clients {
		c.Close()
	}
	s.clients = nil
	var wg sync.WaitGroup
	for _, e := range append(s.etcds, s.killed...) {
		if e != nil {
			// Tearing the whole cluster down: a hard stop first spares
			// Close the leadership transfer and its timeouts (seconds).
			wg.Go(func() { e.Server.HardStop(); e.Close() })
		}
	}
	wg.Wait()
	s.etcds, s.killed = nil, nil
	if s.dir != "" {
		os.RemoveAll(s.dir)
		s.dir = ""
	}
}

// leader waits until the running members agree on a leader among them.
func (s *etcdSystem) leader(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		index := map[types.ID]int{}
		for i, e := range s.etcds {
			if e != nil {
				index[e.Server.MemberID()] = i
			}
		}
		lead, agreed := -1, true
		for _, e := range s.etcds {
			if e == nil {
				continue
			}
			j, ok := index[e.Server.Leader()]
			if !ok || (lead >= 0 && lead != j) {
				agreed = false
				break
			}
			lead = j
		}
		if lead >= 0 && agreed {
			return lead, nil
		}
		select {
		case <-ctx.Done():
			return 0, errors.New("no leader")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// kill hard-stops member i: its raft node and peer transport stop at once,
// without the leadership transfer a graceful Close does, like a crash. The
// rest of its teardown (listeners) waits for stop.
func (s *etcdSystem) kill(i int) error {
	s.etcds[i].Server.HardStop()
	e := s.etcds[i]
	s.etcds[i] = nil
	s.killed = append(s.killed, e)
	return nil
}

func (s *etcdSystem) client(ctx context.Context, member int) (client, error) {
	sess, err := concurrency.NewSession(s.clients[member], concurrency.WithTTL(60), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	return etcdClient{sess}, nil
}

type etcdClient struct{ s *concurrency.Session }

func (c etcdClient) locker(key string) locker { return etcdLocker{concurrency.NewMutex(c.s, key)} }
func (c etcdClient) close()                   { c.s.Close() }

type etcdLocker struct{ m *concurrency.Mutex }

func (l etcdLocker) tryAcquire(ctx context.Context) (bool, error) {
	err := l.m.TryLock(ctx)
	if errors.Is(err, concurrency.ErrLocked) {
		return false, nil
	}
	return err == nil, err
}

func (l etcdLocker) acquire(ctx context.Context) error { return l.m.Lock(ctx) }
func (l etcdLocker) release(ctx context.Context) error { return l.m.Unlock(ctx) }

// held fills a fresh cluster with n mutexes (over p.fillClients sessions)
// and measures memory, a full snapshot (Maintenance.Snapshot, what etcd
// backups use) and the restart of a follower.
func (s *etcdSystem) held(ctx context.Context, n int, atPeak func()) (map[string]float64, error) {
	if err := s.start(ctx); err != nil {
		s.stop()
		return nil, fmt.Errorf("start: %w", err)
	}
	defer s.stop()
	var base uint64 // with the fill's sessions open: they are client memory
	took, err := fill(ctx, s, s.p, n, func() { base = heapInUse() })
	if err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	figs := map[string]float64{"held_locks": float64(n), "held_fill_per_s": float64(n) / took.Seconds()}
	figs["held_bytes_per_lock"] = perLock(base, heapInUse(), 3, n)
	atPeak()

	leader, err := s.leader(ctx)
	if err != nil {
		return nil, err
	}
	f := (leader + 1) % 3
	progress("%s: held: %.0f bytes per lock per member; snapshot of a follower", s.name(), figs["held_bytes_per_lock"])
	snapMs, snapBytes, err := s.snapshot(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	figs["held_snapshot_ms"] = snapMs
	figs["held_snapshot_bytes_per_lock"] = float64(snapBytes) / float64(n)

	progress("%s: held: restarting a follower", s.name())
	read, caught, err := s.restart(ctx, f, n)
	if err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	figs["held_restart_read_ms"], figs["held_restart_caughtup_ms"] = read, caught
	s.note = append(s.note,
		"held: bytes per lock = heap in use after GC over the empty cluster, divided by 3 members (one heap); the bbolt file is mmapped, not heap",
		"held: snapshot = clientv3 Maintenance.Snapshot of a follower streamed to a file and fsynced (etcd's own raft snapshots do not copy the data: it lives in bbolt); "+
			"restore n/a: a restart opens bbolt and rebuilds the index, counted in the restart figures",
		"held: restart = graceful Close of a follower, StartEtcd on the same dir; a linearizable read on a member waits until it has applied up to the leader's commit, so 'read' and 'caught up' coincide")
	return figs, nil
}

// snapshot streams member i's backend to a file and fsyncs it.
func (s *etcdSystem) snapshot(ctx context.Context, i int) (float64, int64, error) {
	f, err := os.Create(filepath.Join(s.dir, "backup.db"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	t0 := time.Now()
	rc, err := s.clients[i].Snapshot(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer rc.Close()
	size, err := io.Copy(f, rc)
	if err != nil {
		return 0, 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, 0, err
	}
	return ms(time.Since(t0)), size, nil
}

// restart closes member i, starts it again on its data dir, and times the
// first linearizable read through it and the moment it serves all n locks
// from its own state (a serializable count).
func (s *etcdSystem) restart(ctx context.Context, i, n int) (read, caught float64, err error) {
	s.etcds[i].Close()
	s.etcds[i] = nil
	cfg := s.cfgs[i]
	cfg.ClusterState = embed.ClusterStateFlagExisting
	t0 := time.Now()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return 0, 0, err
	}
	s.etcds[i] = e
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// A fresh client: the old one's connection to the member is in gRPC's
	// reconnect backoff (1s and more), which would be timed instead of etcd.
	// The member's listeners are up once StartEtcd returns.
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{cfg.AdvertiseClientUrls[0].String()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.Get(rctx, heldKey(0)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		rcancel()
		if err == nil && resp.Count == 1 {
			read = ms(time.Since(t0))
			break
		}
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("no linearizable read: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	for {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		resp, err := c.Get(rctx, "held/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
		rcancel()
		if err == nil && resp.Count >= int64(n) {
			caught = ms(time.Since(t0))
			break
		}
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("never caught up: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	return read, caught, nil
}
