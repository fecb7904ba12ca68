// Package integration is the evidence that raftlock never grants one lock
// twice: multi-node and multi-process tests that run real clusters under
// faults, record what clients saw, and check it. It holds tests only.
//
//	go test ./integration/...                         a short version of every scenario (~10s each)
//	go test -race -timeout 20m ./integration/...      as CI runs it
//	RAFTLOCK_LONG=1 go test -v -timeout 0 ./integration/...
//	                                                  the long version: minutes per scenario
//
// # Clusters
//
// A process cluster runs the real binary: TestMain builds cmd/raftlock once
// into a temporary directory (with the race detector when the tests have it,
// so a data race in an agent under faults fails the run), and each node is a
// `raftlock agent` process on 127.0.0.1 with its own data directory, raft
// port, HTTP port and gossip port, all kept across restarts. The nodes form
// their cluster the way README recommends: every one started with the same
// -bootstrap-expect N and -retry-join list (the gossip addresses of all N),
// gossip on, and -voters N, so every one of them votes (three or five).
// The scenarios of the three workloads (TestLinearizableProcesses,
// TestFencedProcesses, TestDurableProcesses) run twice, as the subtests
// gossip (as above) and no-gossip: a cluster formed by hand, one node
// -bootstrap and the others -join it, without gossip, so that membership
// goes through raft alone under the same nemeses (a node that left or was
// killed asks the members it knew to add it back, the -bootstrap one
// too). A no-gossip run takes 60% of the workload's time, so it causes
// fewer faults; the long form runs both forms for the whole time:
//
//	RAFTLOCK_LONG=1 go test -race -v -timeout 0 \
//	    -run '^(TestLinearizableProcesses|TestFencedProcesses|TestDurableProcesses)$/^no-gossip$' ./integration/
//
// Two more scenarios keep the manual ways under test: the damaged-log scenario
// (one node -bootstrap, the others -join, no gossip; a node whose data dir
// was emptied comes back with -join, as the refusal says) and the
// stop-all/start-all scenario (all with -bootstrap -peers, and -bootstrap
// plus -join). A node whose data dir was emptied under gossip comes back
// with its own command line: -retry-join finds the cluster and the leader
// adds it again. Every restart repeats the command line a node was first
// started with, as an operator's unit file would. Clients use the HTTP API
// (api.Client).
//
// The rollout scenarios (TestRollingReplacementProcesses,
// TestScaleUpAndDownProcesses) run a service the way an orchestrator does
// instead: every agent started from one template (-bootstrap-expect 3
// -retry-join the running members' gossip addresses, -voters 3), replaced
// by agents with new names, new ports and empty data dirs, scaled up and
// down, each step gated on GET /readyz, under the durability workload; they
// report each step's longest time without a grant. The same service heals
// from kills without a rollout (TestTwoVotersKilledInTurnProcesses: of 3
// voters and 2 non-voters, a voter and then the leader killed, each time
// back to 3 live voters; TestFiveVotersTwoKilledAtOnceProcesses: 5 voters,
// the leader and another killed together, then started again) and comes
// back whole from a stop of all its agents, then a kill of all
// (TestStopAllStartAllServiceProcesses). The SIGTERM rollouts, the scale
// and the stop of all run a short form in every run (of three agents the
// leader replaced; 3 to 4 to 3; three agents stopped with SIGTERM), and the
// full one (five agents replaced, 3 to 9 to 3, five stopped and killed)
// with RAFTLOCK_LONG=1; their docs say how.
//
// An in-process cluster runs cluster.New nodes in the test process. Their
// transports share a fault table (internal/faultnet, plugged in as
// cluster.Config.TransportDial and TransportListen) that is consulted
// wherever a node dials and accepts a connection and on every read and
// write, so a test can cut the traffic from one node to another, one way or
// both, existing connections included, drop it silently, or delay it:
// partitions that one loopback interface cannot make. Clients call the
// *cluster.Node directly. Both kinds of store are lock.Store.
//
// # Nemeses
//
// While clients work, a nemesis causes one fault at a time at random, holds
// it, heals it, and waits until the cluster commits again (a cluster that
// does not within a minute is a problem of the run, which fails it):
//
//   - processes: kill -9 of the leader (when the other voters can elect
//     one: a member back from a leave votes again only a health check or
//     two after it rejoined) or of any node, then a restart;
//     SIGSTOP of the leader for 2.5–5s (several election timeouts: the
//     others elect a new leader meanwhile), then SIGCONT; a graceful leave
//     (POST /v1/leave, as `raftlock leave` does) and a restart with the same
//     command line, which asks to be added back; the whole cluster killed with -9 at once and
//     restarted; SIGSTOP of a client process for two to four TTLs.
//   - in process: the leader isolated; a majority and a minority; one-way
//     cuts (the leader's messages lost, or the answers to them); a bridge
//     (two pairs that cannot see each other and one node that sees all);
//     the same as silent drops (the leader or a minority blackholed, the
//     leader's messages vanishing), where calls hang until their timeouts
//     instead of failing at once; slow links; a crash (Close) of the leader
//     or any node and a restart; a graceful Leave and rejoin; all nodes
//     crashed and restarted.
//   - power loss, in process (TestLinearizablePowerLoss,
//     TestFencedSemaphorePowerLoss): the nodes' WAL segment files sit on a
//     disk that loses power (internal/diskfault; syncs take 2, 4, 6 ms on
//     the nodes' disks, as on SSDs of different speeds), and every node
//     loses it at once under load, at the moment a leader is about to sync
//     a write: each write not synced yet is undone, no later write, sync or
//     message of theirs gets anywhere, and they restart on what is left.
//     Half the faults of these scenarios are power losses, the rest those
//     above.
//
// The in-process partition scenarios turn cluster.Config.
// LeaderWritesInParallel on for each node or not from the seed (the
// summary says for which); the power-loss scenarios turn it on for all:
// its leader counts itself in a commit only once its write is synced, which
// only a lost unsynced write can tell from counting it at once.
//
// When the leader is killed a probe times the failover: from the kill to the
// first acquire a surviving node commits. The summary reports the worst.
//
// # Workloads and what is checked
//
// Every client operation is retried until its outcome is known, as a real
// user would: on another node when one cannot answer (lock.ErrUnavailable:
// nothing happened), and with the same owner when the outcome is unknown
// (lock.ErrUnknownOutcome: the store makes that retry idempotent). An
// operation is recorded from its first invocation to its final answer; one
// whose outcome is never learned is recorded as porcupine expects, with its
// return at infinity and an output that allows any effect.
//
// Linearizability. Many clients, each one owner, acquire, release, extend
// and inspect a few keys through different nodes. The history is checked
// with github.com/anishathalye/porcupine against a model partitioned by key
// (model_test.go). Leases expire by time, which a sequential model cannot
// see, so the TTLs are far longer than the run: no lease expires, and a key
// is an owner-checked mutex with fencing tokens (acquire of a free key
// grants a token above any before; the holder's repeated acquire returns the
// same token; extend by another owner is not held; inspect tells locked and
// the token). Expiry is tested by the fenced register. Two decisions of the
// model:
//
//   - a release by an owner that does not hold the key must change nothing,
//     but may answer true as well as false: a cluster node whose first
//     attempt's outcome was unknown and whose retry finds the owner not
//     holding reports true (see cluster.Node.Release), and from outside
//     that cannot be told apart from a lie;
//   - a release by the holder may answer false only when the workload's own
//     earlier attempt had an unknown outcome (that attempt may have released).
//
// The same workload runs on semaphores and read/write locks
// (TestLinearizableKindsPartitions), checked against groupModel: each
// client's hold (a slot, a read or a write) and token; a grant only when
// it fits (fewer than N holders, no writer for a read, nobody for a
// write), held otherwise, inspect telling the number of holders.
//
// Tokens are global, which the per-key model cannot see; a separate check
// demands that no two grants share a token and that a grant invoked after
// another grant returned gets a larger token.
//
// Fenced register. Holders increment a shared register by reading and
// writing it with their fencing token; the register refuses tokens below
// the highest it has seen. Each holder records the window in which it knew
// it held the lock (from its acquire's return until it sent its release or
// its own conservative deadline passed, counted from when it sent the
// acquire or last extend). No two windows may overlap, the register may
// never refuse a holder inside its window, and no update may be lost. With
// long TTLs nothing may ever be refused; with short TTLs leases run out,
// waiters are handed the lock, holders stall past their leases (a sleep, or
// a SIGSTOP of a client process: TestMain runs this test binary as a
// client process when RAFTLOCK_INTEGRATION_CLIENT is set) and write late,
// and fencing must refuse the late writes that were overtaken. In the
// session variant (TestFencedSessions*) each holding binds the lock to a
// fresh session of a short TTL, renews the session instead of the lock,
// and ends with a release, a destroy of the session or its expiry; a
// holder's window ends at its session's conservative deadline, so the same
// checks show that no session-bound lock outlived its session and none
// ended before its holder's deadline, under kills, pauses and partitions.
//
// Semaphores and read/write locks (TestFencedSemaphore*,
// TestFencedRWLock*) run the same holders on a semaphore of 3 or a
// read/write lock (three holdings in four read), with short TTLs, stalls
// and waits; several hold at once, so they leave the register alone, and
// the check is on their windows: never more than N of them at once, never
// a writer's with any other, and a grant whose acquire was sent after
// another grant returned has the larger token.
//
// Multi-key locks (TestFencedMultiKey*) run holders that take random sets
// of one to three of four keys all at once (and, among them, single keys
// alone), with short TTLs, stalls and impatient waits, under partitions
// (in-process nodes) or kills and pauses (agent processes over HTTP).
// Right after each grant a holder reads every key of its set: a key not
// held with its token while the holder's own deadline has not passed is a
// partial grant. The windows are then checked key by key as a semaphore of
// one is: never two holders of a key at once, and a grant of a key whose
// acquire was sent after another grant of it returned has the larger
// token.
//
// Durability. Clients own their keys, so they know what each acknowledged
// acquire, extend and release left. Between rounds of work under the
// nemesis, the whole cluster is killed with -9 while nothing is in flight,
// restarted, and every key is inspected: its locked state and token must be
// what was acknowledged. During the rounds an acknowledged lock must never
// be found lost, and grant tokens keep rising across restarts.
//
// Vanished waiters. A client waits through one agent for a lock another
// holds (wait 1m, TTL 5m) and that agent, a follower or the leader, is
// killed with -9; when the holder releases, a fresh acquire through a live
// agent must get the lock at once: a lock handed to the dead waiter would
// be held by nobody for its whole TTL (TestWaiterNodeKilledProcesses).
//
// Stop-all/start-all. The durability workload again, but between rounds
// every agent is stopped gracefully at once (SIGTERM, then SIGINT the next
// round), by default and with -leave-on-terminate, and all are started again
// with identical command lines, for each way of starting a cluster. Every
// stop must end within the agent's grace, the same voters must come back,
// and the keys are checked as above.
//
// At the end of each process scenario every agent must vote again.
//
// The checkers are tested too: the workloads run against stores broken on
// purpose (sensitivity_test.go) must report violations. Every check passes
// an empty history, so a run in which no acquire was granted (or, for the
// durability workload, no key was checked) fails as a problem of the run. A bug a scenario
// finds is pinned by a deterministic test in regression_test.go; everyday
// faults an operator reported are pinned the same way (frozenleader_test.go:
// requests forwarded to a leader that froze, calls without a leader, a
// lease across an outage without a quorum).
//
// # Output
//
// Each scenario prints one summary line (visible with go test -v): the
// operations with a known outcome (and how many of them needed a retry
// after an unknown outcome), the unknown outcomes, the operations that took
// no effect, the faults injected by kind, the violations, the worst
// failover, and the seed. On a violation the history, porcupine's
// visualisation (open visualization.html in a browser), the nemesis
// timeline and, for the fenced register, the windows and the register's
// log are kept under RAFTLOCK_VIOLATIONS_DIR (default
// $TMPDIR/raftlock-violations), and the line gives the path.
//
// Environment:
//
//	RAFTLOCK_LONG=1               the long version (3 minutes per scenario unless set below)
//	RAFTLOCK_SCENARIO_SECONDS=N   how long each scenario's workload runs (default 10; the
//	                              no-gossip forms 60% of it unless RAFTLOCK_LONG=1)
//	RAFTLOCK_SEED=N               replay the nemesis schedule and the clients' choices of a run
//	                              (timing still differs)
//	RAFTLOCK_VIOLATIONS_DIR=DIR   where a violation's files go
//	RAFTLOCK_AGENT_RACE=0|1       build the agents without or with the race detector
package integration
