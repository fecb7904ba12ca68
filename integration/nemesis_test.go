package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// fault is one kind of trouble a nemesis can cause.
type fault struct {
	name     string
	min, max time.Duration // how long the fault lasts before it is healed
	// inject causes the fault and returns what ends it (nil: nothing to
	// end). errSkip means the fault does not apply right now (no leader
	// known, say); another is chosen.
	inject func(ctx context.Context, rng *rand.Rand) (heal func() error, err error)
}

var errSkip = errors.New("fault does not apply now")

// nemesis causes faults one at a time, at random, while the clients work:
// a quiet gap, a fault, its hold, its heal, and a wait until the cluster
// serves again (a cluster that does not recover within recoverIn is a
// problem of the run, reported as such).
type nemesis struct {
	rep       *report
	rng       *rand.Rand
	faults    []fault
	gapMin    time.Duration
	gapMax    time.Duration
	recoverIn time.Duration
	ready     func(context.Context) error
	events    *eventLog
}

const defaultRecoverIn = 60 * time.Second

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// run causes faults until ctx ends; it returns once the last fault is
// healed and the cluster serves again.
func (n *nemesis) run(ctx context.Context) {
	if len(n.faults) == 0 {
		<-ctx.Done()
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(between(n.rng, n.gapMin, n.gapMax)):
		}
		f := n.faults[n.rng.IntN(len(n.faults))]
		heal, err := f.inject(ctx, n.rng)
		if errors.Is(err, errSkip) {
			n.events.add("nemesis", "%s does not apply now", f.name)
			continue
		}
		if err != nil {
			n.rep.problem("injecting %s: %v", f.name, err)
			n.events.add("nemesis", "%s failed: %v", f.name, err)
		} else {
			n.rep.fault(f.name)
			n.events.add("nemesis", "%s", f.name)
		}
		select {
		case <-ctx.Done():
		case <-time.After(between(n.rng, f.min, f.max)):
		}
		if heal != nil {
			if err := heal(); err != nil {
				n.rep.problem("healing %s: %v", f.name, err)
			}
			n.events.add("nemesis", "healed %s", f.name)
		}
		healed := time.Now()
		rctx, cancel := context.WithTimeout(context.Background(), n.recoverIn)
		err = n.ready(rctx)
		cancel()
		if err != nil {
			n.rep.problem("the cluster did not serve again within %v of healing %s: %v", n.recoverIn, f.name, err)
			return
		}
		n.rep.recovered(f.name, time.Since(healed))
		n.events.add("nemesis", "cluster serves again")
	}
}

// failoverProbe measures a failover: the time from the leader's death to
// the first acquire that a surviving node commits.
type failoverProbe struct {
	done chan struct{}
}

func startFailoverProbe(rep *report, events *eventLog, survivors []lock.Store) *failoverProbe {
	p := &failoverProbe{done: make(chan struct{})}
	killed := time.Now()
	go func() {
		defer close(p.done)
		deadline := killed.Add(30 * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			s := survivors[i%len(survivors)]
			// One long attempt, not many short ones: a node retries on its
			// own and answers as soon as a new leader commits (an abandoned
			// api.Client acquire would also spend time cleaning up).
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			_, err := s.Acquire(ctx, lock.AcquireRequest{Key: fmt.Sprintf("failover/%d", killed.UnixNano()), Owner: lock.NewOwner(), TTL: time.Second})
			cancel()
			if err == nil || errors.Is(err, lock.ErrLocked) {
				// Held by another probe's owner counts too: that is a
				// committed answer from the new leader.
				d := time.Since(killed)
				rep.failover(d)
				events.add("nemesis", "failover: a survivor committed after %v", d)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		rep.problem("no surviving node committed an acquire within 30s of the leader's death")
	}()
	return p
}

func (p *failoverProbe) wait() { <-p.done }

// procFaults are the nemeses of a process cluster.
func procFaults(c *procCluster, rep *report, events *eventLog) []fault {
	restart := func(n *procNode) func() error { return n.restart }
	return []fault{
		{name: "kill-leader", min: time.Second, max: 4 * time.Second,
			inject: func(ctx context.Context, _ *rand.Rand) (func() error, error) {
				l := c.leader(ctx)
				if l == nil || !c.survivorsElect(ctx, l) {
					// A failover needs a quorum of voters among the others.
					return nil, errSkip
				}
				var survivors []lock.Store
				for _, n := range c.up() {
					if n != l {
						survivors = append(survivors, n.client)
					}
				}
				l.kill()
				probe := startFailoverProbe(rep, events, survivors)
				return func() error { probe.wait(); return l.restart() }, nil
			}},
		{name: "kill-node", min: time.Second, max: 4 * time.Second,
			inject: func(ctx context.Context, rng *rand.Rand) (func() error, error) {
				up := c.up()
				if len(up) < len(c.nodes) {
					return nil, errSkip
				}
				n := up[rng.IntN(len(up))]
				n.kill()
				return restart(n), nil
			}},
		{name: "pause-leader", min: 2500 * time.Millisecond, max: 5 * time.Second, // several election timeouts
			inject: func(ctx context.Context, _ *rand.Rand) (func() error, error) {
				l := c.leader(ctx)
				if l == nil || !l.pause() {
					return nil, errSkip
				}
				return func() error { l.resume(); return nil }, nil
			}},
		{name: "leave-rejoin", min: time.Second, max: 3 * time.Second,
			inject: func(ctx context.Context, rng *rand.Rand) (func() error, error) {
				up := c.up()
				if len(up) < len(c.nodes) {
					return nil, errSkip
				}
				n := up[rng.IntN(len(up))]
				if err := n.leave(20 * time.Second); err != nil {
					return restart(n), err
				}
				return restart(n), nil
			}},
		{name: "crash-all", min: 300 * time.Millisecond, max: 2 * time.Second,
			inject: func(ctx context.Context, _ *rand.Rand) (func() error, error) {
				c.killAll()
				return c.restartAll, nil
			}},
	}
}

// killAll kills every agent at once.
func (c *procCluster) killAll() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.kill() }()
	}
	wg.Wait()
}

// restartAll starts every agent that is not running.
func (c *procCluster) restartAll() error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		if s := n.currentState(); s == nodeUp || s == nodePaused {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = n.restart() }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// memFaults are the nemeses of an in-process cluster: partitions of every
// shape, slow links, crashes and a graceful leave.
func memFaults(c *memCluster, rep *report, events *eventLog) []fault {
	healNet := func() error { c.heal(); return nil }
	withLeader := func(f func(l *memNode, rng *rand.Rand) (func() error, error)) func(context.Context, *rand.Rand) (func() error, error) {
		return func(_ context.Context, rng *rand.Rand) (func() error, error) {
			l := c.leader()
			if l == nil {
				return nil, errSkip
			}
			return f(l, rng)
		}
	}
	faults := []fault{
		{name: "isolate-leader", min: time.Second, max: 4 * time.Second,
			inject: withLeader(func(l *memNode, _ *rand.Rand) (func() error, error) {
				c.partition([]*memNode{l}, c.others(l))
				return healNet, nil
			})},
		{name: "majority-minority", min: time.Second, max: 4 * time.Second,
			inject: func(_ context.Context, rng *rand.Rand) (func() error, error) {
				nodes := append([]*memNode(nil), c.nodes...)
				rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
				minority := len(nodes) / 2
				c.partition(nodes[:minority], nodes[minority:])
				return healNet, nil
			}},
		{name: "blackhole-leader", min: time.Second, max: 4 * time.Second, // the leader's traffic vanishes silently, both ways
			inject: withLeader(func(l *memNode, _ *rand.Rand) (func() error, error) {
				c.blackhole([]*memNode{l}, c.others(l))
				return healNet, nil
			})},
		{name: "blackhole-minority", min: time.Second, max: 4 * time.Second,
			inject: func(_ context.Context, rng *rand.Rand) (func() error, error) {
				nodes := append([]*memNode(nil), c.nodes...)
				rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
				minority := len(nodes) / 2
				c.blackhole(nodes[:minority], nodes[minority:])
				return healNet, nil
			}},
		{name: "one-way-drop-from-leader", min: time.Second, max: 4 * time.Second,
			inject: withLeader(func(l *memNode, _ *rand.Rand) (func() error, error) {
				c.drop([]*memNode{l}, c.others(l))
				return healNet, nil
			})},
		{name: "one-way-from-leader", min: time.Second, max: 4 * time.Second, // the others stop hearing the leader; it hears them
			inject: withLeader(func(l *memNode, _ *rand.Rand) (func() error, error) {
				c.cut([]*memNode{l}, c.others(l))
				return healNet, nil
			})},
		{name: "one-way-to-leader", min: time.Second, max: 4 * time.Second, // the leader's messages arrive; no answer does
			inject: withLeader(func(l *memNode, _ *rand.Rand) (func() error, error) {
				c.cut(c.others(l), []*memNode{l})
				return healNet, nil
			})},
		{name: "slow-links", min: time.Second, max: 4 * time.Second,
			inject: func(_ context.Context, rng *rand.Rand) (func() error, error) {
				for _, a := range c.nodes {
					for _, b := range c.nodes {
						if a != b && rng.IntN(2) == 0 {
							c.faults.Delay(a.addr(), b.addr(), between(rng, 20*time.Millisecond, 200*time.Millisecond))
						}
					}
				}
				return healNet, nil
			}},
		{name: "crash-leader", min: time.Second, max: 3 * time.Second,
			inject: withLeader(func(l *memNode, _ *rand.Rand) (func() error, error) {
				var survivors []lock.Store
				for _, n := range c.others(l) {
					if s := n.current(); s != nil {
						survivors = append(survivors, s)
					}
				}
				l.stop()
				probe := startFailoverProbe(rep, events, survivors)
				return func() error { probe.wait(); return l.start() }, nil
			})},
		{name: "crash-node", min: time.Second, max: 3 * time.Second,
			inject: func(_ context.Context, rng *rand.Rand) (func() error, error) {
				n := c.nodes[rng.IntN(len(c.nodes))]
				n.stop()
				return n.start, nil
			}},
		{name: "leave-rejoin", min: time.Second, max: 3 * time.Second,
			inject: func(ctx context.Context, rng *rand.Rand) (func() error, error) {
				n := c.nodes[rng.IntN(len(c.nodes))]
				if n.current() == nil {
					return nil, errSkip
				}
				lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				if err := n.leave(lctx); err != nil {
					return n.start, fmt.Errorf("%s: %w", n.cfg.NodeID, err) // a no-op while it runs
				}
				return n.start, nil
			}},
		{name: "crash-all", min: 300 * time.Millisecond, max: 2 * time.Second,
			inject: func(context.Context, *rand.Rand) (func() error, error) {
				var wg sync.WaitGroup
				for _, n := range c.nodes {
					wg.Add(1)
					go func() { defer wg.Done(); n.stop() }()
				}
				wg.Wait()
				return c.startAll, nil
			}},
	}
	if c.setup.powerLoss {
		faults = append(faults, powerLossAllFault(c))
	}
	if len(c.nodes) == 5 {
		// A bridge: two pairs that cannot see each other, and one node
		// that sees everyone (Jepsen's "bridge"): both sides' majorities
		// overlap in it.
		faults = append(faults, fault{name: "bridge", min: time.Second, max: 4 * time.Second,
			inject: func(_ context.Context, rng *rand.Rand) (func() error, error) {
				nodes := append([]*memNode(nil), c.nodes...)
				rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
				c.partition(nodes[:2], nodes[3:])
				return healNet, nil
			}})
	}
	return faults
}

// powerLossAllFault: every node of c loses power at once
// (memCluster.powerLossAll), under load: what a leader wrote and had not
// synced yet is gone from its disk. c must have been started with
// memSetup.powerLoss.
func powerLossAllFault(c *memCluster) fault {
	return fault{name: "power-loss-all", min: 300 * time.Millisecond, max: 2 * time.Second,
		inject: func(context.Context, *rand.Rand) (func() error, error) {
			return c.startAll, c.powerLossAll()
		}}
}

// eventLog is a timeline of what the nemesis and the checkers saw, kept
// with a violation's history.
type eventLog struct {
	start time.Time
	mu    sync.Mutex // protects lines
	lines []string
}

func newEventLog(start time.Time) *eventLog { return &eventLog{start: start} }

func (l *eventLog) add(who, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("%12.3fs %-8s %s", time.Since(l.start).Seconds(), who, fmt.Sprintf(format, args...)))
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := ""
	for _, line := range l.lines {
		s += line + "\n"
	}
	return s
}
