package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestStopAllStartAllProcesses: three agents as processes, started each way
// README shows (all with -bootstrap -peers; one with -bootstrap and two with
// -join), as they are by default and with -leave-on-terminate (the old
// default: every stop was a leave). Between rounds of the durability
// workload every agent is stopped at once, with SIGTERM and SIGINT in turn,
// and all are started again with identical command lines. Each stop must
// be prompt (stopGrace), the same three voters must come back,
// every acknowledged acquire, extend and release must be there, and tokens
// keep rising.
func TestStopAllStartAllProcesses(t *testing.T) {
	for _, mode := range []startMode{startPeers, startJoin} {
		for _, leave := range []bool{false, true} {
			name := mode.String()
			// A grace far above stopGrace: a stop that waits it out is caught.
			extra := []string{"-shutdown-grace", "1m"}
			if leave {
				name += "/leave-on-terminate"
				extra = append(extra, "-leave-on-terminate")
			}
			t.Run(name, func(t *testing.T) {
				s := loadSettings(t)
				rep := newReport("stop-all-start-all/3-processes/"+name, s)
				c := startProcClusterMode(t, 3, mode, extra...)
				events := newEventLog(rep.started)
				nem := newNemesis(s, rep, events, nil, c.waitReady)
				round := s.workload / 4
				if s.long {
					round = 20 * time.Second
				}
				runDurability(t, s, rep, c, nem, 4, 4, round, stopAllStartAll())
				if races := c.racesReported(); len(races) > 0 {
					rep.problem("data races reported by agents %v (their logs follow)", races)
				}
				rep.finish(t)
			})
		}
	}
}

// stopGrace is how long the harness lets a stopped agent take. Nothing is
// in flight, so a stop takes a second or two (one of them the race
// detector's pause at exit), also when it leaves; an agent that waits for
// something that cannot come (its -shutdown-grace, here 1m) is caught.
const stopGrace = 10 * time.Second

// stopAllStartAll stops every agent at once with a signal (SIGTERM, then
// SIGINT the next time, and so on), starts them all again with the command
// lines they were first started with, and waits until the voters are the
// same as before.
func stopAllStartAll() wholeRestart {
	var round int
	return wholeRestart{name: "stop-all-start-all", run: func(c *procCluster) error {
		round++
		sig := syscall.SIGTERM
		if round%2 == 0 {
			sig = syscall.SIGINT
		}
		var want []string
		for _, n := range c.nodes {
			want = append(want, n.id)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(c.nodes))
		for i, n := range c.nodes {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = n.stop(sig, stopGrace) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if err := c.restartAll(); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), defaultRecoverIn)
		defer cancel()
		if err := c.waitVoters(ctx, want); err != nil {
			return fmt.Errorf("after %v to all and a restart with the same command lines: %w", sig, err)
		}
		return nil
	}}
}

// waitVoters waits until the leader's configuration is exactly ids (sorted),
// every one of them a voter.
func (c *procCluster) waitVoters(ctx context.Context, ids []string) error {
	return pollUntil(ctx, 50*time.Millisecond, "voters", func(ctx context.Context) error {
		_, members, err := c.leaderMembers(ctx)
		if err != nil {
			return err
		}
		var got []string
		for _, m := range members {
			got = append(got, m.ID+"("+m.Suffrage+")")
		}
		slices.Sort(got)
		var expect []string
		for _, id := range ids {
			expect = append(expect, id+"(voter)")
		}
		slices.Sort(expect)
		if !slices.Equal(got, expect) {
			return fmt.Errorf("the configuration is %v, want %v", got, expect)
		}
		return nil
	})
}
