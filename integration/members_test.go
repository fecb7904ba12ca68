package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
)

// Kills and whole restarts of a service of agent processes started from
// the rollout template (rollout_test.go): the membership the leader keeps
// must heal by itself, under the durability workload.

// TestTwoVotersKilledInTurnProcesses: five agents from the template (3
// voters, 2 non-voters) under continuous lock traffic. A voter that does
// not lead is killed with SIGKILL; once a non-voter has taken its vote (3
// live voters again) and every running agent's /readyz answers 200, as an
// orchestrator would wait, the leader is killed too. After each kill locks
// are granted again and the configuration gets back to 3 live voters (the
// dead ones are removed later, after -dead-member-timeout: the rollout test
// checks that). Nothing acknowledged is lost and tokens keep increasing.
// Reported per kill: the longest time without a grant and the time until
// 3 live voters.
func TestTwoVotersKilledInTurnProcesses(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("two-voters-killed-in-turn/5-processes", s)
	r := newRollout(t)
	startService(t, r, 5)
	tr := startTraffic(s, rep, r, 6, 4)
	defer tr.stop()
	defer tr.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	require.NoError(t, r.waitGrants(ctx), "locks are granted before the kills")
	cancel()

	var steps []string
	for k, leader := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		victim, err := r.pickVoter(ctx, leader)
		require.NoError(t, err)
		before := r.describe(victim.id)
		r.clock.lap()
		began := time.Now()
		victim.kill()
		rep.fault("sigkill-voter")
		err = r.waitLiveVoters(ctx, rolloutVoters)
		healed := time.Since(began)
		if err == nil {
			err = r.waitGrants(ctx)
		}
		ready := "-"
		if k == 0 {
			// The gate an orchestrator waits for before the next kill.
			for _, n := range r.running() {
				if err == nil {
					err = waitReadyz(ctx, n)
				}
			}
			ready = time.Since(began).Round(time.Millisecond).String()
		}
		cancel()
		require.NoError(t, err, "after killing %s", victim.id)
		gap := r.clock.lap()
		rep.failover(gap)
		steps = append(steps, fmt.Sprintf("killed %s (%s): gap %v, %d live voters after %v, all ready after %s, then leader %s",
			victim.id, before, gap.Round(time.Millisecond), rolloutVoters, healed.Round(time.Millisecond), ready, r.leaderID()))
	}
	tr.finish(rep, r)
	rep.note("steps: %s", strings.Join(steps, "; "))
	rep.finish(t)
}

// TestFiveVotersTwoKilledAtOnceProcesses: five agents from the template
// with -voters 5 (and -bootstrap-expect 5), all voting, under continuous
// lock traffic; the leader and another voter are killed with SIGKILL at
// the same moment. The three left are a quorum of five: locks are granted
// again after one election, and nothing acknowledged is lost. The two are
// then started again with the same command lines, and the configuration
// comes back to the five, all voting and ready.
func TestFiveVotersTwoKilledAtOnceProcesses(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("five-voters-two-killed-at-once/5-processes", s)
	const voters = 5
	r := newRolloutVoters(t, voters)
	startService(t, r, 5)
	tr := startTraffic(s, rep, r, 6, 4)
	defer tr.stop()
	defer tr.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	require.NoError(t, r.waitGrants(ctx), "locks are granted before the kills")

	leader, err := r.pickVoter(ctx, true)
	require.NoError(t, err)
	other, err := r.pickVoter(ctx, false)
	require.NoError(t, err)
	r.clock.lap()
	began := time.Now()
	var wg sync.WaitGroup
	for _, n := range []*procNode{leader, other} {
		wg.Go(n.kill)
	}
	wg.Wait()
	rep.fault("sigkill-two-voters")
	require.NoError(t, r.waitGrants(ctx), "granting with 3 of 5 voters")
	granting := time.Since(began)
	gap := r.clock.lap()
	rep.failover(gap)
	_, members, err := r.pc.leaderMembers(ctx)
	require.NoError(t, err)
	votersLeft := 0
	for _, m := range members {
		if m.Suffrage == api.SuffrageVoter {
			votersLeft++
		}
	}
	// No non-voter can take the dead ones' votes; none of the five may be
	// demoted or removed on their account (only more voters than -voters
	// would allow a demotion without a replacement).
	if votersLeft != voters {
		rep.problem("after the kills the leader's configuration has %d voters, want %d: %v", votersLeft, voters, describeMembers(members))
	}

	for _, n := range []*procNode{leader, other} {
		require.NoError(t, n.restart())
	}
	require.NoError(t, r.waitMembers(ctx, r.ids(), voters), "the two are back as voters")
	for _, n := range r.running() {
		require.NoError(t, waitReadyz(ctx, n))
	}
	healed := time.Since(began)
	require.NoError(t, r.waitGrants(ctx))
	tr.finish(rep, r)
	rep.note("killed %s (leader) and %s: gap %v, granting again after %v; restarted, all five voting and ready after %v",
		leader.id, other.id, gap.Round(time.Millisecond), granting.Round(time.Millisecond), healed.Round(time.Millisecond))
	rep.finish(t)
}

// TestStopAllStartAllServiceProcesses: five agents from the template (3
// voters, 2 non-voters: gossip, -bootstrap-expect 3, -retry-join the five)
// under continuous lock traffic, all stopped at once, with SIGTERM, then
// all killed at once with SIGKILL, and after each all started again with
// the same command lines. Each time the same five come back (3 voting),
// every one ready, and locks are granted again; nothing acknowledged is
// lost and tokens keep increasing across the restarts. Reported per round:
// the time without a grant and until every agent is ready.
//
// The short run (every CI run, about 15 s under -race) has three agents,
// all voting, stopped with SIGTERM only: the whole cluster killed and
// started again with gossip is TestDurableProcesses. The five agents and
// the SIGKILL round run with RAFTLOCK_LONG=1 (about 30 s under -race):
//
//	RAFTLOCK_LONG=1 go test -race -run TestStopAllStartAllServiceProcesses ./integration/
func TestStopAllStartAllServiceProcesses(t *testing.T) {
	s := loadSettings(t)
	agents, signals := 5, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	if !s.long {
		agents, signals = 3, []syscall.Signal{syscall.SIGTERM}
	}
	rep := newReport(fmt.Sprintf("stop-all-start-all/%d-processes-gossip", agents), s)
	r := newRollout(t)
	startService(t, r, agents)
	ids := r.ids()
	tr := startTraffic(s, rep, r, 6, 4)
	defer tr.stop()
	defer tr.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	require.NoError(t, r.waitGrants(ctx), "locks are granted before the stops")
	cancel()

	var steps []string
	for _, sig := range signals {
		r.clock.lap()
		began := time.Now()
		nodes := r.running()
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		for i, n := range nodes {
			wg.Go(func() {
				if sig == syscall.SIGKILL {
					n.kill()
				} else {
					errs[i] = n.stop(sig, stopGrace)
				}
			})
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		rep.fault("all-" + strings.ToLower(unixSignalName(sig)))
		for _, n := range nodes {
			require.NoError(t, n.restart())
		}
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		err := r.waitGrants(ctx)
		granting := time.Since(began)
		if err == nil {
			err = r.waitMembers(ctx, ids, rolloutVoters)
		}
		for _, n := range r.running() {
			if err == nil {
				err = waitReadyz(ctx, n)
			}
		}
		cancel()
		require.NoError(t, err, "after %v to all and a restart", sig)
		gap := r.clock.lap()
		rep.failover(gap)
		steps = append(steps, fmt.Sprintf("%v: granting again after %v, all ready after %v", unixSignalName(sig),
			granting.Round(time.Millisecond), time.Since(began).Round(time.Millisecond)))
	}
	tr.finish(rep, r)
	rep.note("steps: %s", strings.Join(steps, "; "))
	rep.finish(t)
}

// pickVoter returns a running replica that votes in the leader's
// configuration: the leader itself, or (leader false) the first other
// voter by ID.
func (r *rollout) pickVoter(ctx context.Context, leader bool) (*procNode, error) {
	var found *procNode
	err := pollUntil(ctx, 100*time.Millisecond, "a voter to pick", func(ctx context.Context) error {
		l, members, err := r.pc.leaderMembers(ctx)
		if err != nil {
			return err
		}
		if leader {
			found = l
			return nil
		}
		running := r.running()
		for _, m := range slices.SortedFunc(slices.Values(members), func(a, b api.Member) int { return strings.Compare(a.ID, b.ID) }) {
			if m.Suffrage != api.SuffrageVoter || m.ID == l.id {
				continue
			}
			if i := slices.IndexFunc(running, func(n *procNode) bool { return n.id == m.ID }); i >= 0 {
				found = running[i]
				return nil
			}
		}
		return fmt.Errorf("no running voter but the leader: %v", describeMembers(members))
	})
	return found, err
}

// waitLiveVoters waits until the leader's configuration has exactly want
// voters, every one of them a running replica the leader judges healthy.
func (r *rollout) waitLiveVoters(ctx context.Context, want int) error {
	return pollUntil(ctx, 100*time.Millisecond, "live voters", func(ctx context.Context) error {
		l, members, err := r.pc.leaderMembers(ctx)
		if err != nil {
			return err
		}
		running := r.ids()
		live, voters := 0, 0
		for _, m := range members {
			if m.Suffrage != api.SuffrageVoter {
				continue
			}
			voters++
			if slices.Contains(running, m.ID) && m.Health == "healthy" {
				live++
			}
		}
		if voters != want || live != want {
			return fmt.Errorf("leader %s: %d voters of which %d live and healthy, want %d: %v", l.id, voters, live, want, describeMembers(members))
		}
		return nil
	})
}
