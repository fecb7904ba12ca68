package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// The durability workload: every acknowledged acquire, extend and release
// must survive the whole cluster being killed with -9 and restarted.
//
// Each client owns a few keys nobody else touches, so it knows exactly what
// state every acknowledged operation left behind: held with a token, or
// free. Clients work in rounds while a nemesis kills the leader, any node,
// or all of them (their operations then retry, with the same owner, until
// the outcome is known). At the end of each round the clients stop, the
// whole cluster is killed with -9 while nothing is in flight, restarted,
// and every key is inspected: locked or not and the token must be what the
// last acknowledged operation left. During the rounds, an acknowledged lock
// must never be found lost (extend answering not held, release answering
// false, another owner holding the key), and every grant's token must
// exceed every token acknowledged before it was asked for, across restarts.

type durState struct {
	locked bool
	token  uint64
	doubt  bool // an operation's outcome stayed unknown: the key is no longer checked
}

type durClient struct {
	*workClient
	keys  []string
	state map[string]*durState
}

type durWorkload struct {
	rep      *report
	maxToken atomic.Uint64 // the highest token any grant acknowledged
	grants   atomic.Int64  // acquires acknowledged with a grant
}

func (w *durWorkload) noteToken(t uint64) {
	for {
		cur := w.maxToken.Load()
		if t <= cur || w.maxToken.CompareAndSwap(cur, t) {
			return
		}
	}
}

func (w *durWorkload) step(c *durClient, budget context.Context) {
	key := c.keys[c.rng.IntN(len(c.keys))]
	st := c.state[key]
	if st.doubt {
		return
	}
	switch {
	case !st.locked:
		before := w.maxToken.Load()
		var lease lock.Lease
		res := c.call(budget, func(ctx context.Context, s lock.Store) error {
			var err error
			lease, err = s.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: c.owner, TTL: linTTL})
			return err
		})
		switch {
		case !res.known:
			st.doubt = res.unsure
		case res.err == nil:
			if lease.Token <= before {
				w.rep.violation("%s granted with token %d, not above the %d acknowledged before it was asked for", key, lease.Token, before)
			}
			w.noteToken(lease.Token)
			w.grants.Add(1)
			*st = durState{locked: true, token: lease.Token}
		case errors.Is(res.err, lock.ErrLocked):
			w.rep.violation("%s is held by another owner, but only client %d ever takes it: %v", key, c.id, res.err)
			st.doubt = true
		}
	case c.rng.IntN(2) == 0:
		var lease lock.Lease
		res := c.call(budget, func(ctx context.Context, s lock.Store) error {
			var err error
			lease, err = s.Extend(ctx, key, c.owner, linTTL)
			return err
		})
		switch {
		case !res.known:
			st.doubt = res.unsure
		case res.err == nil && lease.Token != st.token:
			w.rep.violation("%s extended with token %d, but was granted token %d", key, lease.Token, st.token)
		case res.err != nil:
			w.rep.violation("the acknowledged lock on %s (token %d) was lost: extend says %v", key, st.token, res.err)
			st.doubt = true
		}
	default:
		var released bool
		res := c.call(budget, func(ctx context.Context, s lock.Store) error {
			var err error
			released, err = s.Release(ctx, key, c.owner)
			return err
		})
		switch {
		case !res.known:
			st.doubt = res.unsure
		case !released && !res.unsure:
			w.rep.violation("the acknowledged lock on %s (token %d) was lost: release says it was not held", key, st.token)
			*st = durState{}
		default:
			*st = durState{}
		}
	}
}

// verify inspects every key and compares it with what the acknowledged
// operations left.
func (w *durWorkload) verify(clients []*durClient, stores storeSet, budget context.Context) (checked int) {
	for _, c := range clients {
		for _, key := range c.keys {
			st := c.state[key]
			if st.doubt {
				continue
			}
			var info lock.KeyInfo
			res := c.call(budget, func(ctx context.Context, s lock.Store) error {
				var err error
				info, err = s.Inspect(ctx, key)
				return err
			})
			if !res.known {
				w.rep.problem("could not inspect %s after the restart: %v", key, res.err)
				continue
			}
			checked++
			switch {
			case st.locked && !info.Locked:
				w.rep.violation("after the restart %s is free, but its acquire (token %d) was acknowledged", key, st.token)
			case st.locked && info.Token != st.token:
				w.rep.violation("after the restart %s is held with token %d, but token %d was acknowledged", key, info.Token, st.token)
			case !st.locked && info.Locked:
				w.rep.violation("after the restart %s is held (token %d), but its release was acknowledged", key, info.Token)
			}
		}
	}
	return checked
}

// wholeRestart takes every node of a process cluster down between rounds,
// while nothing is in flight, and starts them again.
type wholeRestart struct {
	name string // the fault's name in the report
	run  func(c *procCluster) error
}

// quietCrash kills every node with -9 and restarts them.
var quietCrash = wholeRestart{name: "quiet-crash-all", run: func(c *procCluster) error {
	c.killAll()
	return c.restartAll()
}}

// runDurability runs the rounds (see the workload's comment); between
// rounds, whole takes the cluster down and up.
func runDurability(t *testing.T, s settings, rep *report, c *procCluster, nem *nemesis, clients, keysEach int, round time.Duration, whole wholeRestart) {
	t.Helper()
	w := &durWorkload{rep: rep}
	unexpected := &errorLog{}
	all := make([]*durClient, clients)
	for i := range all {
		dc := &durClient{workClient: &workClient{id: i, owner: lock.NewOwner(), stores: c, node: i % c.size(), rng: s.rng(uint64(3000 + i)), unexpected: unexpected},
			state: map[string]*durState{}}
		for k := range keysEach {
			key := fmt.Sprintf("durable/%d/%d", i, k)
			dc.keys = append(dc.keys, key)
			dc.state[key] = &durState{}
		}
		all[i] = dc
	}
	end := time.Now().Add(s.workload)
	rounds, checked := 0, 0
	for rounds == 0 || time.Now().Before(end) {
		rounds++
		run, stop := context.WithTimeout(context.Background(), round)
		budget, cancel := context.WithTimeout(context.Background(), round+defaultRecoverIn+30*time.Second)
		var wg sync.WaitGroup
		for _, dc := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for run.Err() == nil {
					w.step(dc, budget)
				}
			}()
		}
		nem.run(run)
		wg.Wait()
		stop()

		// Nothing in flight now: take everything down, start it again, look.
		nem.events.add("harness", "round %d: %s", rounds, whole.name)
		rep.fault(whole.name)
		if err := whole.run(c); err != nil {
			rep.problem("%s: %v", whole.name, err)
			cancel()
			break
		}
		rctx, rcancel := context.WithTimeout(context.Background(), defaultRecoverIn)
		err := c.waitReady(rctx)
		rcancel()
		if err != nil {
			rep.problem("the cluster did not serve again after %s: %v", whole.name, err)
			cancel()
			break
		}
		checked += w.verify(all, c, budget)
		cancel()
	}
	rep.note("%d rounds", rounds)
	w.summarize(all, checked, "after each "+whole.name, unexpected)
}

// summarize fills the report with what the clients did and the keys
// checked, and makes a run with nothing acknowledged to check a problem.
// The keys were checked when (for the report).
func (w *durWorkload) summarize(clients []*durClient, checked int, when string, unexpected *errorLog) {
	var sum tally
	doubts := 0
	for _, dc := range clients {
		sum.add(dc.tally)
		for _, st := range dc.state {
			if st.doubt {
				doubts++
			}
		}
	}
	rep := w.rep
	rep.ops, rep.unsure, rep.unknown, rep.dropped = sum.ops, sum.unsure, sum.unknown, sum.dropped
	rep.note("%d keys checked %s (%d keys in doubt), %d grants, highest token %d", checked, when, doubts, w.grants.Load(), w.maxToken.Load())
	rep.atLeast(1, int(w.grants.Load()), "acquires granted")
	rep.atLeast(1, checked, "keys checked")
	if n := unexpected.count.Load(); n > 0 {
		rep.problem("clients saw errors no store should give: %s", unexpected)
	}
}
