package integration

import (
	"context"
	"testing"
	"time"
)

// The scenarios. Each runs one workload against one cluster under one set
// of nemeses for settings.workload, checks what it recorded, and prints one
// summary line (go test -v shows it).

// newNemesis schedules faults: a quiet gap of gapMin..gapMax between them.
func newNemesis(s settings, rep *report, events *eventLog, faults []fault, ready func(context.Context) error) *nemesis {
	gapMin, gapMax := 200*time.Millisecond, time.Second
	if s.long {
		gapMin, gapMax = time.Second, 5*time.Second
	}
	rep.events = events
	return &nemesis{rep: rep, rng: s.rng(1), faults: faults, gapMin: gapMin, gapMax: gapMax,
		recoverIn: defaultRecoverIn, ready: ready, events: events}
}

// procForm is a way a process cluster of a nemesis scenario forms and
// comes back: with gossip (every agent -bootstrap-expect N -retry-join all
// the gossip addresses, the way README recommends: gossip finds the
// members, the leader adds them and the promoter gives them their votes)
// or without (one agent -bootstrap, the others -join it: membership goes
// through raft alone, a joining agent added as a voter by the leader).
// The same nemeses apply to both: a restart repeats the agent's command
// line, and a member that left or was killed asks the members it knew to
// add it back (the -bootstrap one too).
type procForm struct {
	name string // the subtest's
	mode startMode
	// percent is the part of the workload's time (RAFTLOCK_SCENARIO_SECONDS)
	// the form runs, unless RAFTLOCK_LONG=1: all of it then.
	percent int
}

// procForms are the forms every workload's process scenario runs in: the
// gossip form for the whole workload, the no-gossip form for a shorter one
// (fewer faults), which keeps the manual path under the same nemeses at a
// small cost to every run.
var procForms = []procForm{
	{name: "gossip", mode: startExpect, percent: 100},
	{name: "no-gossip", mode: startJoin, percent: 60},
}

// eachProcForm runs scenario as one subtest per procForm, with the
// form's settings.
func eachProcForm(t *testing.T, scenario func(t *testing.T, s settings, form procForm)) {
	for _, form := range procForms {
		t.Run(form.name, func(t *testing.T) {
			s := loadSettings(t)
			if !s.long {
				s.workload = s.workload * time.Duration(form.percent) / 100
			}
			scenario(t, s, form)
		})
	}
}

// TestLinearizableProcesses: three agents as processes, eight HTTP clients
// spread over them; agents killed with -9 (the leader or any), paused with
// SIGSTOP beyond the election timeout, leaving and rejoining gracefully,
// and the whole cluster crashing at once; with gossip and without
// (procForms).
func TestLinearizableProcesses(t *testing.T) {
	eachProcForm(t, func(t *testing.T, s settings, form procForm) {
		rep := newReport("linearizable/3-processes/"+form.name, s)
		c := startProcClusterMode(t, 3, form.mode)
		events := newEventLog(rep.started)
		nem := newNemesis(s, rep, events, procFaults(c, rep, events), c.waitReady)
		runLinearizable(t, s, rep, c, nem, 8, 4)
		c.checkAtEnd(rep)
		rep.finish(t)
	})
}

// TestLinearizablePartitions: five nodes in this process, clients calling
// the nodes directly, under partitions of every shape (the leader alone, a
// majority and a minority, one-way cuts, a bridge), slow links, crashes and
// a graceful leave.
func TestLinearizablePartitions(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("linearizable/5-in-process-partitions", s)
	c := startMemClusterSetup(t, 5, memSetup{parallel: parallelFromSeed(s, 5)})
	events := newEventLog(rep.started)
	nem := newNemesis(s, rep, events, memFaults(c, rep, events), c.waitReady)
	runLinearizable(t, s, rep, c, nem, 10, 5)
	rep.note("%d snapshot restores; %s", c.snapshotRestores(), c.parallelNote())
	rep.finish(t)
}

// TestFencedProcesses: five agents as processes; clients hold the lock with
// TTLs longer than the run and increment the fenced register through it,
// under the process nemeses. No lease expires, so the register must never
// refuse anyone, and no two holders may ever overlap. With gossip and
// without (procForms).
func TestFencedProcesses(t *testing.T) {
	eachProcForm(t, func(t *testing.T, s settings, form procForm) {
		rep := newReport("fenced/5-processes/"+form.name, s)
		c := startProcClusterMode(t, 5, form.mode)
		events := newEventLog(rep.started)
		nem := newNemesis(s, rep, events, procFaults(c, rep, events), c.waitReady)
		runFenced(t, s, rep, c, nem, fencedRun{
			cfg:     fencedConfig{Key: "fenced", TTL: linTTL, Wait: 2 * time.Second, Work: 10 * time.Millisecond, Writes: 4},
			holders: 6,
		})
		c.checkAtEnd(rep)
		rep.finish(t)
	})
}

// TestFencedExpiryProcesses: three agents as processes; short TTLs, so
// leases run out and pass to waiters; holders in this process stall past
// their lease now and then, and client processes are paused with SIGSTOP
// for several TTLs, then write late. Fencing must refuse the late writes
// that were overtaken, and no lease may end before its holder's deadline.
func TestFencedExpiryProcesses(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("fenced-expiry/3-processes", s)
	c := startProcCluster(t, 3)
	events := newEventLog(rep.started)
	nem := newNemesis(s, rep, events, procFaults(c, rep, events), c.waitReady)
	var nodes []string
	for _, n := range c.nodes {
		nodes = append(nodes, n.httpAddr)
	}
	const ttl = time.Second
	runFenced(t, s, rep, c, nem, fencedRun{
		cfg:        fencedConfig{Key: "fenced", TTL: ttl, Wait: 3 * time.Second, Expiry: true, Stall: true, Work: 20 * time.Millisecond, Writes: 4},
		holders:    4,
		procs:      2,
		procNodes:  nodes,
		procCfg:    fencedConfig{Key: "fenced", TTL: ttl, Wait: 3 * time.Second, Expiry: true, Work: 150 * time.Millisecond, Writes: 4},
		procFaults: func(p []*clientProc) []fault { f := pauseClientFault(p, ttl); return []fault{f, f} },
	})
	c.checkAtEnd(rep)
	rep.finish(t)
}

// TestFencedExpiryPartitions: three nodes in this process under the
// partition nemeses, with short TTLs and stalling holders.
func TestFencedExpiryPartitions(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("fenced-expiry/3-in-process-partitions", s)
	c := startMemClusterSetup(t, 3, memSetup{parallel: parallelFromSeed(s, 3)})
	events := newEventLog(rep.started)
	nem := newNemesis(s, rep, events, memFaults(c, rep, events), c.waitReady)
	runFenced(t, s, rep, c, nem, fencedRun{
		cfg:     fencedConfig{Key: "fenced", TTL: time.Second, Wait: 3 * time.Second, Expiry: true, Stall: true, Work: 20 * time.Millisecond, Writes: 4},
		holders: 6,
	})
	rep.note("%d snapshot restores; %s", c.snapshotRestores(), c.parallelNote())
	rep.finish(t)
}

// TestDurableProcesses: three agents as processes; every acknowledged
// acquire, extend and release must be there after the whole cluster is
// killed with -9 and restarted. With gossip and without (procForms).
func TestDurableProcesses(t *testing.T) {
	eachProcForm(t, func(t *testing.T, s settings, form procForm) {
		rep := newReport("durable/3-processes/"+form.name, s)
		c := startProcClusterMode(t, 3, form.mode)
		events := newEventLog(rep.started)
		nem := newNemesis(s, rep, events, procFaults(c, rep, events), c.waitReady)
		round := s.workload / 2
		if s.long {
			round = 30 * time.Second
		}
		runDurability(t, s, rep, c, nem, 6, 4, round, quietCrash)
		c.checkAtEnd(rep)
		rep.finish(t)
	})
}

// TestFencedSessionsProcesses: three agents as processes; holders bind the
// lock to a session of a short TTL, renew the session rather than the
// lock, and end with a release, a destroy or an expiry; holders stall past
// their session and client processes are paused for several TTLs, under
// kills and pauses of the agents. No session-bound lock may outlive its
// session into another holder's window, and none may end before its
// holder's deadline.
func TestFencedSessionsProcesses(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("fenced-sessions/3-processes", s)
	c := startProcCluster(t, 3)
	events := newEventLog(rep.started)
	nem := newNemesis(s, rep, events, procFaults(c, rep, events), c.waitReady)
	var nodes []string
	for _, n := range c.nodes {
		nodes = append(nodes, n.httpAddr)
	}
	const ttl = 2 * time.Second
	cfg := fencedConfig{Key: "fenced", TTL: ttl, Wait: time.Second, Expiry: true, Stall: true, Session: true, Work: 20 * time.Millisecond, Writes: 4}
	procCfg := cfg
	procCfg.Stall, procCfg.Work = false, 150*time.Millisecond
	runFenced(t, s, rep, c, nem, fencedRun{
		cfg:        cfg,
		holders:    4,
		procs:      2,
		procNodes:  nodes,
		procCfg:    procCfg,
		procFaults: func(p []*clientProc) []fault { f := pauseClientFault(p, ttl); return []fault{f, f} },
	})
	c.checkAtEnd(rep)
	rep.finish(t)
}

// TestFencedSessionsPartitions: the session workload on three nodes in
// this process under the partition nemeses.
func TestFencedSessionsPartitions(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("fenced-sessions/3-in-process-partitions", s)
	c := startMemClusterSetup(t, 3, memSetup{parallel: parallelFromSeed(s, 3)})
	events := newEventLog(rep.started)
	nem := newNemesis(s, rep, events, memFaults(c, rep, events), c.waitReady)
	runFenced(t, s, rep, c, nem, fencedRun{
		cfg:     fencedConfig{Key: "fenced", TTL: 2 * time.Second, Wait: time.Second, Expiry: true, Stall: true, Session: true, Work: 20 * time.Millisecond, Writes: 4},
		holders: 6,
	})
	rep.note("%d snapshot restores; %s", c.snapshotRestores(), c.parallelNote())
	rep.finish(t)
}

// TestFencedSemaphorePartitions: holders of a semaphore of 3 on three nodes
// in this process under the partition nemeses, with short TTLs, stalls
// and waits: never more than 3 windows at once, tokens growing.
func TestFencedSemaphorePartitions(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("fenced-semaphore/3-in-process-partitions", s)
	c := startMemClusterSetup(t, 3, memSetup{parallel: parallelFromSeed(s, 3)})
	events := newEventLog(rep.started)
	nem := newNemesis(s, rep, events, memFaults(c, rep, events), c.waitReady)
	runFenced(t, s, rep, c, nem, fencedRun{
		cfg:     fencedConfig{Key: "fenced", TTL: time.Second, Wait: 3 * time.Second, Expiry: true, Stall: true, Work: 20 * time.Millisecond, Writes: 4, Limit: 3},
		holders: 7,
	})
	rep.note("%d snapshot restores; %s", c.snapshotRestores(), c.parallelNote())
	rep.finish(t)
}

// TestFencedRWLockProcesses: readers and writers of one read/write lock
// on three agents as processes under kills and pauses, some of them bound
// to sessions: never a writer's window with any other.
func TestFencedRWLockProcesses(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("fenced-rwlock/3-processes", s)
	c := startProcCluster(t, 3)
	events := newEventLog(rep.started)
	nem := newNemesis(s, rep, events, procFaults(c, rep, events), c.waitReady)
	runFenced(t, s, rep, c, nem, fencedRun{
		cfg:     fencedConfig{Key: "fenced", TTL: time.Second, Wait: 3 * time.Second, Expiry: true, Stall: true, Work: 20 * time.Millisecond, Writes: 4, RW: true},
		holders: 6,
	})
	if races := c.racesReported(); len(races) > 0 {
		rep.problem("data races reported by agents %v (their logs follow)", races)
	}
	rep.finish(t)
}

// TestFencedRWLockPartitions: the read/write workload on three nodes in
// this process under the partition nemeses, holders bound to sessions.
func TestFencedRWLockPartitions(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("fenced-rwlock-sessions/3-in-process-partitions", s)
	c := startMemClusterSetup(t, 3, memSetup{parallel: parallelFromSeed(s, 3)})
	events := newEventLog(rep.started)
	nem := newNemesis(s, rep, events, memFaults(c, rep, events), c.waitReady)
	runFenced(t, s, rep, c, nem, fencedRun{
		cfg:     fencedConfig{Key: "fenced", TTL: 2 * time.Second, Wait: time.Second, Expiry: true, Stall: true, Session: true, Work: 20 * time.Millisecond, Writes: 4, RW: true},
		holders: 6,
	})
	rep.note("%d snapshot restores; %s", c.snapshotRestores(), c.parallelNote())
	rep.finish(t)
}

// TestFencedMultiKeyPartitions: holders take random sets of one to three
// of four keys all at once (and single keys among them), three nodes in
// this process under the partition nemeses, with short leases, stalls and
// impatient waiters: key by key one holder at a time and tokens growing,
// and never a partial grant seen by a holder's reads.
func TestFencedMultiKeyPartitions(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("fenced-multikey/3-in-process-partitions", s)
	c := startMemClusterSetup(t, 3, memSetup{parallel: parallelFromSeed(s, 3)})
	events := newEventLog(rep.started)
	nem := newNemesis(s, rep, events, memFaults(c, rep, events), c.waitReady)
	runFenced(t, s, rep, c, nem, fencedRun{
		cfg:     fencedConfig{Key: "multi", TTL: time.Second, Wait: 3 * time.Second, Expiry: true, Stall: true, Work: 20 * time.Millisecond, Writes: 4, Multi: true},
		holders: 7,
	})
	rep.note("%d snapshot restores; %s", c.snapshotRestores(), c.parallelNote())
	rep.finish(t)
}

// TestFencedMultiKeyProcesses: the multi-key workload over HTTP on three
// agents as processes under kills and pauses.
func TestFencedMultiKeyProcesses(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("fenced-multikey/3-processes", s)
	c := startProcCluster(t, 3)
	events := newEventLog(rep.started)
	nem := newNemesis(s, rep, events, procFaults(c, rep, events), c.waitReady)
	runFenced(t, s, rep, c, nem, fencedRun{
		cfg:     fencedConfig{Key: "multi", TTL: time.Second, Wait: 3 * time.Second, Expiry: true, Stall: true, Work: 20 * time.Millisecond, Writes: 4, Multi: true},
		holders: 6,
	})
	if races := c.racesReported(); len(races) > 0 {
		rep.problem("data races reported by agents %v (their logs follow)", races)
	}
	rep.finish(t)
}

// TestLinearizableKindsPartitions: the linearizability workload on
// semaphores of 3 and on read/write locks, five nodes in this process
// under the partition nemeses, checked against groupModel.
func TestLinearizableKindsPartitions(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind linKind
	}{{"semaphore", linKind{limit: 3}}, {"rwlock", linKind{rw: true}}} {
		t.Run(tc.name, func(t *testing.T) {
			s := loadSettings(t)
			rep := newReport("linearizable-"+tc.name+"/5-in-process-partitions", s)
			c := startMemClusterSetup(t, 5, memSetup{parallel: parallelFromSeed(s, 5)})
			events := newEventLog(rep.started)
			nem := newNemesis(s, rep, events, memFaults(c, rep, events), c.waitReady)
			runLinearizableKind(t, s, rep, c, nem, 8, 3, tc.kind)
			rep.note("%d snapshot restores; %s", c.snapshotRestores(), c.parallelNote())
			rep.finish(t)
		})
	}
}

// powerLossNemesis is the nemesis of the power-loss scenarios: every fault
// of an in-process cluster, and every node losing power at once as often
// as all of them together, so that a short run sees several.
func powerLossNemesis(s settings, rep *report, events *eventLog, c *memCluster) *nemesis {
	faults := memFaults(c, rep, events)
	for range len(faults) {
		faults = append(faults, powerLossAllFault(c))
	}
	return newNemesis(s, rep, events, faults, c.waitReady)
}

// TestLinearizablePowerLoss: three nodes in this process, every one's
// leader writing in parallel (LeaderWritesInParallel), their WALs on disks
// of different speeds that lose every unsynced write when the power goes,
// which it does for all of them at once, under load, among the partitions
// and crashes of TestLinearizablePartitions: nothing acknowledged may be
// lost. Three nodes, not five: a commit then rests on the leader and one
// follower, so a leader that counted an entry before its own sync would
// lose an acknowledged one to the next power loss more often.
func TestLinearizablePowerLoss(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("linearizable/3-in-process-power-loss", s)
	c := startMemClusterSetup(t, 3, memSetup{parallel: allParallel(3), powerLoss: true})
	events := newEventLog(rep.started)
	runLinearizable(t, s, rep, c, powerLossNemesis(s, rep, events, c), 8, 4)
	rep.note("%d snapshot restores; %s; %d unsynced WAL writes undone", c.snapshotRestores(), c.parallelNote(), c.undone.Load())
	rep.finish(t)
}

// TestFencedSemaphorePowerLoss: the semaphore workload of
// TestFencedSemaphorePartitions on three nodes writing in parallel whose
// disks lose power all at once: never more than 3 windows at once, and no
// fencing token issued twice.
func TestFencedSemaphorePowerLoss(t *testing.T) {
	s := loadSettings(t)
	rep := newReport("fenced-semaphore/3-in-process-power-loss", s)
	c := startMemClusterSetup(t, 3, memSetup{parallel: allParallel(3), powerLoss: true})
	events := newEventLog(rep.started)
	runFenced(t, s, rep, c, powerLossNemesis(s, rep, events, c), fencedRun{
		cfg:     fencedConfig{Key: "fenced", TTL: time.Second, Wait: 3 * time.Second, Expiry: true, Stall: true, Work: 20 * time.Millisecond, Writes: 4, Limit: 3},
		holders: 7,
	})
	rep.note("%d snapshot restores; %s; %d unsynced WAL writes undone", c.snapshotRestores(), c.parallelNote(), c.undone.Load())
	rep.finish(t)
}
