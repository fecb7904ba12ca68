package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/apiserver"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/lock"
)

// raftlock's own workloads (issue 15): how fast a release reaches 1,000
// watchers of the key, and what keeping 10,000 sessions alive costs. The
// peers' columns read n/a: they are not compared here.

// runWatchFanout: p.watchers watchers of one key (each a loop of blocking queries, lock.Watcher.WatchKey, from the
// index of its last answer). A round takes the key, waits until every
// watcher has seen it held, then releases it; each watcher notes when it
// sees the key free. The figure per round is the time from the start of
// the release call to the last watcher told; reported as p50 and max over
// the rounds: embedded on the leader, embedded over the three nodes, and
// over HTTP (one api.Client to an API server on the leader, one long-poll
// connection per watcher).
func runWatchFanout(ctx context.Context, sys system, p params) (map[string]float64, error) {
	rs, ok := sys.(*raftlockSystem)
	if !ok {
		return nil, &notApplicable{"a raftlock workload (watches)"}
	}
	figs := map[string]float64{"watch_watchers": float64(p.watchers)}
	leader, err := rs.leader(ctx)
	if err != nil {
		return nil, err
	}
	c := lock.New(rs.nodes[leader])
	// All on the leader: it applies an entry as soon as it commits it.
	last, err := fanout(ctx, c, []lock.Watcher{rs.nodes[leader]}, "bench-watch/leader", p)
	if err != nil {
		return nil, fmt.Errorf("embedded on the leader: %w", err)
	}
	figs["watch_leader_last_p50_ms"], figs["watch_leader_last_max_ms"] = ms(percentile(last, 0.5)), ms(last[len(last)-1])
	// Spread over the three nodes: followers learn of the commit with the
	// leader's next message (raft sends one every CommitTimeout to twice
	// it), then apply it.
	watchers := make([]lock.Watcher, 3)
	for i, n := range rs.nodes {
		watchers[i] = n
	}
	last, err = fanout(ctx, c, watchers, "bench-watch/spread", p)
	if err != nil {
		return nil, fmt.Errorf("embedded on all nodes: %w", err)
	}
	figs["watch_last_p50_ms"], figs["watch_last_max_ms"] = ms(percentile(last, 0.5)), ms(last[len(last)-1])

	// Over HTTP: an API server on the leader on loopback, one client whose
	// pool holds one connection per waiting watcher.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := apiserver.NewServer("", apiserver.NewHandler(rs.nodes[leader], apiserver.Config{}))
	go srv.Serve(ln)
	defer srv.Close()
	client, err := api.NewClient("http://"+ln.Addr().String(), api.ClientConfig{})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	last, err = fanout(ctx, c, []lock.Watcher{client}, "bench-watch/http", p)
	if err != nil {
		return nil, fmt.Errorf("over HTTP: %w", err)
	}
	figs["watch_http_last_p50_ms"], figs["watch_http_last_max_ms"] = ms(percentile(last, 0.5)), ms(last[len(last)-1])
	rs.note = append(rs.note, fmt.Sprintf("watch: %d watchers of one key, %d rounds each: embedded on the leader; embedded spread over the 3 nodes (a follower applies a commit when the leader's next message tells it: CommitTimeout to twice it later, 50-100 ms with DefaultConfig); HTTP: one api.Client (HTTP/1.1, a connection per waiting watcher) to an apiserver on the leader",
		p.watchers, p.watchRounds))
	return figs, nil
}

// fanout runs the rounds and returns, sorted, each round's time from the
// release to the last watcher told.
func fanout(ctx context.Context, c *lock.Client, watchers []lock.Watcher, key string, p params) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		heldSeen = make([]uint64, p.watchers) // per watcher: the token of the holder it last saw (0: saw it free)
		freeAt   = map[int]time.Time{}        // watcher -> when it saw the round's holder gone
		round    uint64                       // the holder's token this round
		changed  = make(chan struct{}, 1)
		failures = make(chan error, 1)
	)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	for i := range p.watchers {
		w := watchers[i%len(watchers)]
		wg.Go(func() {
			var index uint64
			for ctx.Err() == nil {
				info, next, err := w.WatchKey(ctx, key, lock.WatchQuery{Index: index, Wait: time.Minute})
				at := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						select {
						case failures <- err:
						default:
						}
						cancel()
					}
					return
				}
				index = next
				mu.Lock()
				switch {
				case info.Locked:
					heldSeen[i] = info.Token
				case heldSeen[i] != 0:
					if heldSeen[i] == round {
						freeAt[i] = at
					}
					heldSeen[i] = 0
				}
				mu.Unlock()
				poke()
			}
		})
	}
	defer wg.Wait()
	defer cancel()

	await := func(done func() bool, what string) error {
		deadline := time.After(time.Minute)
		for {
			mu.Lock()
			ok := done()
			mu.Unlock()
			if ok {
				return nil
			}
			select {
			case <-changed:
			case err := <-failures:
				return err
			case <-deadline:
				return fmt.Errorf("timed out waiting for %s", what)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	var last []time.Duration
	for r := range p.watchRounds {
		l := c.Lock(key, lock.TTL(time.Minute))
		mu.Lock()
		freeAt = map[int]time.Time{}
		mu.Unlock()
		if err := l.Acquire(ctx); err != nil {
			return nil, err
		}
		mu.Lock()
		round = l.Token()
		mu.Unlock()
		sawHeld := func() bool {
			for _, t := range heldSeen {
				if t != round {
					return false
				}
			}
			return true
		}
		if err := await(sawHeld, fmt.Sprintf("round %d: every watcher to see the holder", r)); err != nil {
			return nil, err
		}
		start := time.Now()
		if _, err := l.Release(ctx); err != nil {
			return nil, err
		}
		if err := await(func() bool { return len(freeAt) == p.watchers }, fmt.Sprintf("round %d: every watcher to see the release", r)); err != nil {
			return nil, err
		}
		mu.Lock()
		var latest time.Time
		for _, at := range freeAt {
			if at.After(latest) {
				latest = at
			}
		}
		mu.Unlock()
		last = append(last, latest.Sub(start))
	}
	slices.Sort(last)
	return last, nil
}

// runKeepalive: p.sessions sessions (lock.Client.NewSession, spread over
// the three nodes, TTL p.sessionTTL, each kept alive by its own loop every
// TTL/3 as the Session API does) are created; then, for p.duration, the
// raft entries committed per second and the process's CPU seconds per
// second (user+system: the three nodes and every session's keep-alive
// loop) are measured while nothing else runs.
func runKeepalive(ctx context.Context, sys system, p params) (map[string]float64, error) {
	rs, ok := sys.(*raftlockSystem)
	if !ok {
		return nil, &notApplicable{"a raftlock workload (sessions)"}
	}
	renewals := make([]*countingRenewals, 3)
	for i, n := range rs.nodes {
		renewals[i] = &countingRenewals{Node: n}
	}
	sessions := make([]*lock.Session, p.sessions)
	t0 := time.Now()
	err := parallel(ctx, 64, func(ctx context.Context, w int) error {
		for i := w; i < p.sessions; i += 64 {
			s, err := lock.New(renewals[i%3]).NewSession(ctx, lock.SessionTTL(p.sessionTTL))
			if err != nil {
				return fmt.Errorf("session %d: %w", i, err)
			}
			sessions[i] = s
		}
		return nil
	})
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = parallel(cctx, 64, func(ctx context.Context, w int) error {
			for i := w; i < len(sessions); i += 64 {
				if sessions[i] != nil {
					_ = sessions[i].Close(ctx)
				}
			}
			return nil
		})
	}()
	if err != nil {
		return nil, err
	}
	created := time.Since(t0)
	// Let the renewals spread out past one TTL/3 before measuring.
	select {
	case <-time.After(p.sessionTTL / 3):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	index0, cpu0, renew0, start := rs.commitIndex(), cpuSeconds(), totalRenewals(renewals), time.Now()
	select {
	case <-time.After(p.duration):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	elapsed := time.Since(start).Seconds()
	entries := float64(rs.commitIndex()-index0) / elapsed
	figs := map[string]float64{
		"keepalive_sessions":           float64(p.sessions),
		"keepalive_create_per_s":       float64(p.sessions) / created.Seconds(),
		"keepalive_renewals_per_s":     float64(totalRenewals(renewals)-renew0) / elapsed,
		"keepalive_entries_per_s":      entries,
		"keepalive_cpu_s_per_s":        (cpuSeconds() - cpu0) / elapsed,
		"keepalive_renewals_per_entry": float64(totalRenewals(renewals)-renew0) / elapsed / max(entries, 1e-9),
	}
	for _, s := range sessions {
		if err := s.Err(); err != nil {
			return nil, fmt.Errorf("a session ended while kept alive: %w", err)
		}
	}
	rs.note = append(rs.note, fmt.Sprintf("keepalive: %d sessions of TTL %v (renewed every TTL/3 by lock.Session's own loop, a third through each node: two in three forwarded), measured for %v; CPU is the whole process's (3 nodes and every keep-alive loop)",
		p.sessions, p.sessionTTL, p.duration))
	return figs, nil
}

// countingRenewals counts the RenewSession calls that reach a node.
type countingRenewals struct {
	*cluster.Node
	n atomic.Int64
}

func (c *countingRenewals) RenewSession(ctx context.Context, id lock.SessionID) (lock.SessionLease, error) {
	c.n.Add(1)
	return c.Node.RenewSession(ctx, id)
}

func totalRenewals(cs []*countingRenewals) int64 {
	var n int64
	for _, c := range cs {
		n += c.n.Load()
	}
	return n
}

// cpuSeconds is the process's user and system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
