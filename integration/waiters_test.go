package integration

import (
	"context"
	"errors"
	"fmt"
	"time"

	"testing"

	"github.com/raftlock/raftlock/lock"
)

// TestWaiterNodeKilledProcesses: three agents as processes. A client waits
// for a held lock through one agent (wait 1m, TTL 5m), and that agent is
// killed with -9 while it waits: a follower in some rounds, the leader in
// the others. When the holder then releases, the lock must not go to the
// vanished waiter: a fresh acquire through a live agent gets it at once.
// A lock handed to the dead waiter would be held by nobody for five
// minutes, and the fresh acquire would fail: a violation.
func TestWaiterNodeKilledProcesses(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("waiter-node-killed/3-processes", s)
	c := startProcCluster(t, 3)
	rounds := 4
	if s.long {
		rounds = 20
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rounds)*time.Minute)
	defer cancel()
	for round := range rounds {
		if err := c.waitReady(ctx); err != nil {
			rep.problem("round %d: %v", round, err)
			break
		}
		waiterOnLeader := round%2 == 1
		if err := waiterNodeKilledRound(ctx, c, rep, round, waiterOnLeader); err != nil {
			rep.problem("round %d: %v", round, err)
			break
		}
	}
	if races := c.racesReported(); len(races) > 0 {
		rep.problem("data races reported by agents %v (their logs follow)", races)
	}
	rep.finish(t)
}

// waiterNodeKilledRound plays one round: hold, wait through the victim,
// kill it, release, acquire afresh, restart the victim.
func waiterNodeKilledRound(ctx context.Context, c *procCluster, rep *report, round int, waiterOnLeader bool) error {
	leader := c.leader(ctx)
	if leader == nil {
		return errors.New("no leader")
	}
	var victim, holderNode, other *procNode
	for _, n := range c.nodes {
		switch {
		case waiterOnLeader == (n == leader) && victim == nil:
			victim = n
		case holderNode == nil:
			holderNode = n
		default:
			other = n
		}
	}
	key := fmt.Sprintf("waiter-killed/%d", round)
	holder := lock.NewOwner()
	held, err := acquireWithin(ctx, holderNode, lock.AcquireRequest{Key: key, Owner: holder, TTL: 5 * time.Minute})
	if err != nil {
		return fmt.Errorf("holder's acquire: %w", err)
	}
	rep.ops++

	waiterDone := make(chan error, 1)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		_, err := victim.client.Acquire(wctx, lock.AcquireRequest{Key: key, Owner: lock.NewOwner(), TTL: 5 * time.Minute, Wait: time.Minute})
		waiterDone <- err
	}()
	if err := waitersOn(ctx, holderNode, key, 1); err != nil {
		return fmt.Errorf("the waiter never queued: %w", err)
	}
	role := "follower"
	if waiterOnLeader {
		role = "leader"
	}
	rep.fault("kill -9 of the waiter's node (" + role + ")")
	victim.kill()
	if err := <-waiterDone; err == nil {
		return errors.New("the waiter of a killed agent was told it holds the lock")
	}
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	if !waiterOnLeader {
		// The leader withdraws the vanished waiter at once.
		if err := waitersOn(ctx, holderNode, key, 0); err != nil {
			rep.violation("round %d: the waiter of the killed %s stays queued: %v", round, role, err)
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	released, err := holderNode.client.Release(rctx, key, holder)
	rcancel()
	if err != nil || !released {
		return fmt.Errorf("holder's release: %v, %w", released, err)
	}
	rep.ops++
	fresh, err := acquireWithin(ctx, other, lock.AcquireRequest{Key: key, Owner: lock.NewOwner(), TTL: time.Minute, Wait: 5 * time.Second})
	var heldErr *lock.HeldError
	switch {
	case errors.As(err, &heldErr):
		rep.violation("round %d: after the holder released, %q is held by nobody (the killed %s's waiter): token %d, %v left",
			round, key, role, heldErr.Token, heldErr.Remaining)
	case err != nil:
		return fmt.Errorf("fresh acquire: %w", err)
	case fresh.Token <= held.Token:
		rep.violation("round %d: fresh grant token %d not above the holder's %d", round, fresh.Token, held.Token)
	default:
		rep.ops++
	}
	return victim.restart()
}

func acquireWithin(ctx context.Context, n *procNode, req lock.AcquireRequest) (lock.Lease, error) {
	actx, cancel := context.WithTimeout(ctx, req.Wait+10*time.Second)
	defer cancel()
	return n.client.Acquire(actx, req)
}

// waitersOn waits until n's linearizable read of key shows want waiters.
func waitersOn(ctx context.Context, n *procNode, key string, want int) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pollUntil(pctx, 20*time.Millisecond, fmt.Sprintf("%d waiters on %q", want, key), func(ctx context.Context) error {
		info, err := n.client.Inspect(ctx, key)
		if err != nil {
			return err
		}
		if info.Waiters != want {
			return fmt.Errorf("%d waiters", info.Waiters)
		}
		return nil
	})
}
