package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// The rollout tests run a "service" of agent processes the way an
// orchestrator does: every agent started from one template (the same
// flags; only its name and ports differ), replaced by new agents with new
// names and empty data dirs, scaled up and down, under continuous lock
// traffic from the durability workload (every acknowledged acquire,
// extend and release kept; tokens strictly increasing).

// rolloutFlags are the template's flags, the same for every agent ever
// started (with -retry-join the members running at the time, and
// -bootstrap-expect the service's number of voters).
// -dead-member-timeout is short so that the members stopped without a
// leave are removed within the test rather than after the default 72h.
var rolloutFlags = []string{"-dead-member-timeout", "10s"}

// rolloutVoters is the -voters (and -bootstrap-expect) of every agent,
// unless a test says otherwise.
const rolloutVoters = 3

// rollout is the service: replicas, each run by one agent at a time, and
// every agent ever started (for the cleanup and the logs).
type rollout struct {
	t     testing.TB
	dir   string
	pc    *procCluster // every agent ever started, for leader() and racesReported()
	clock *grantClock
	flags []string // the template's flags: rolloutFlags and the test's own

	mu       sync.Mutex // protects replicas
	replicas []*procNode
}

func newRollout(t testing.TB, extra ...string) *rollout {
	return newRolloutVoters(t, rolloutVoters, extra...)
}

// newRolloutVoters is newRollout for a service of voters voters: every
// agent's -voters and -bootstrap-expect.
func newRolloutVoters(t testing.TB, voters int, extra ...string) *rollout {
	flags := append([]string{"-bootstrap-expect", strconv.Itoa(voters)}, rolloutFlags...)
	r := &rollout{t: t, dir: t.TempDir(), pc: &procCluster{t: t, voters: voters}, clock: &grantClock{},
		flags: append(flags, extra...)}
	t.Cleanup(func() {
		for _, n := range r.pc.nodes {
			n.kill()
		}
		if t.Failed() {
			for _, n := range r.pc.nodes {
				t.Logf("agent %s (%s) logs, last part:\n%s", n.id, n.raftAddr, n.logs.String())
			}
		}
	})
	return r
}

// newAgent prepares agent id with its own ports and an empty data dir; it
// does not start it.
func (r *rollout) newAgent(id string) *procNode { return r.pc.newNode(id, r.dir) }

// launch starts n, new, from the template, joining the gossip addresses
// join (the running members', none of them n's). Its ports are on no other
// command line: when one was taken before the agent bound it, n gets fresh
// ones and an emptied data dir and starts again, at most portAttempts
// times.
func (r *rollout) launch(n *procNode, join []string) {
	r.t.Helper()
	for attempt := 1; ; attempt++ {
		n.args = gossipArgs(n, join, r.flags...)
		err := n.startOnce()
		if err == nil {
			return
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			require.NoError(r.t, err, "starting %s (attempt %d)", n.id, attempt)
		}
		r.t.Logf("a port was taken before agent %s bound it (%v): starting it again on fresh ports", n.id, err)
		require.NoError(r.t, os.RemoveAll(n.dataDir))
		n.pickPorts()
	}
}

// launch starts an agent again on fresh ports when one it was given is
// taken before it binds it (here: its raft port, held from the start).
func TestLaunchRetriesATakenPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	r := newRollout(t)
	n := r.newAgent("n1")
	n.raftAddr = held.Addr().String()
	r.launch(n, []string{"127.0.0.1:1"})
	require.Equal(t, nodeUp, n.currentState())
	require.NotEqual(t, held.Addr().String(), n.raftAddr)
	require.Contains(t, n.logs.String(), "-bind "+held.Addr().String()+": the port is in use", "the first attempt met the held port")
}

// launchGroup starts size new agents from the template, each joining all
// of their gossip addresses, as replicas 0 to size-1 of a service that has
// none yet. Those addresses are on every one's command line before any
// starts: when one was taken before its agent bound it, the agents started
// are killed and forgotten, and launchGroup returns errPortInUse; the next
// call makes them anew in a fresh directory.
func (r *rollout) launchGroup(size int) error {
	var nodes []*procNode
	var join []string
	for i := range size {
		node := r.newAgent(fmt.Sprintf("n%d", i+1))
		nodes = append(nodes, node)
		join = append(join, node.gossipAddr)
	}
	for i, node := range nodes {
		node.args = gossipArgs(node, join, r.flags...)
		if err := node.startOnce(); err != nil {
			for _, n := range nodes {
				n.kill()
			}
			r.pc.nodes = slices.DeleteFunc(r.pc.nodes, func(n *procNode) bool { return slices.Contains(nodes, n) })
			r.mu.Lock()
			r.replicas = nil
			r.mu.Unlock()
			r.dir = r.t.TempDir()
			return err
		}
		r.setReplica(i, node)
	}
	return nil
}

// runningGossip lists the gossip addresses of the running replicas.
func (r *rollout) runningGossip() []string {
	var out []string
	for _, n := range r.running() {
		out = append(out, n.gossipAddr)
	}
	return out
}

func (r *rollout) setReplica(i int, n *procNode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i == len(r.replicas) {
		r.replicas = append(r.replicas, n)
	} else {
		r.replicas[i] = n
	}
}

func (r *rollout) replica(i int) *procNode {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replicas[i]
}

// running lists the replicas whose agent runs.
func (r *rollout) running() []*procNode {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*procNode
	for _, n := range r.replicas {
		if n.currentState() == nodeUp {
			out = append(out, n)
		}
	}
	return out
}

// ids lists the running replicas' node IDs.
func (r *rollout) ids() []string {
	var out []string
	for _, n := range r.running() {
		out = append(out, n.id)
	}
	return out
}

// size and store make a rollout a storeSet: the clients see the replicas,
// whichever agent runs each, and every grant is noted on the clock.
func (r *rollout) size() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.replicas)
}

func (r *rollout) store(i int) lock.Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.replicas) || r.replicas[i].currentState() != nodeUp {
		return nil
	}
	return grantNoting{Store: r.replicas[i].client, clock: r.clock}
}

// grantNoting notes every granted acquire on a clock.
type grantNoting struct {
	lock.Store
	clock *grantClock
}

func (g grantNoting) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	lease, err := g.Store.Acquire(ctx, req)
	if err == nil {
		g.clock.grant()
	}
	return lease, err
}

// grantClock measures the longest time without a grant, per step.
type grantClock struct {
	mu     sync.Mutex // protects the rest
	last   time.Time
	worst  time.Duration
	grants int
}

func (g *grantClock) grant() {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if !g.last.IsZero() {
		g.worst = max(g.worst, now.Sub(g.last))
	}
	g.last = now
	g.grants++
}

// count is the number of grants so far.
func (g *grantClock) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grants
}

// lap returns the longest gap without a grant since the last lap and
// starts a new one.
func (g *grantClock) lap() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	worst := max(g.worst, time.Since(g.last))
	g.worst = 0
	return worst
}

// waitGrants waits until a grant comes after the ones counted so far.
func (r *rollout) waitGrants(ctx context.Context) error {
	before := r.clock.count()
	return pollUntil(ctx, 20*time.Millisecond, "a lock granted", func(context.Context) error {
		if r.clock.count() > before {
			return nil
		}
		return errors.New("no grant yet")
	})
}

// readyz asks n's GET /readyz: nil on 200.
func readyz(ctx context.Context, n *procNode) error {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(qctx, http.MethodGet, "http://"+n.httpAddr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: /readyz %d %s", n.id, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// waitReadyz is the rollout's gate: n's /readyz answers 200.
func waitReadyz(ctx context.Context, n *procNode) error {
	return pollUntil(ctx, 50*time.Millisecond, n.id+" ready", func(ctx context.Context) error { return readyz(ctx, n) })
}

// waitMembers waits until the leader's configuration is exactly ids, voters
// of them voting, every member alive in gossip.
func (r *rollout) waitMembers(ctx context.Context, ids []string, voters int) error {
	want := slices.Sorted(slices.Values(ids))
	return pollUntil(ctx, 100*time.Millisecond, "members", func(ctx context.Context) error {
		l, members, err := r.pc.leaderMembers(ctx)
		if err != nil {
			return err
		}
		var got []string
		v := 0
		for _, m := range members {
			got = append(got, m.ID)
			if m.Suffrage == api.SuffrageVoter {
				v++
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) || v != voters {
			return fmt.Errorf("leader %s: configuration %v, want %v with %d voters", l.id, describeMembers(members), want, voters)
		}
		return nil
	})
}

// leaderMembers asks the leader for its raft configuration.
func (c *procCluster) leaderMembers(ctx context.Context) (*procNode, []api.Member, error) {
	l := c.leader(ctx)
	if l == nil {
		return nil, nil, errors.New("no leader")
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := l.client.Cluster(qctx)
	if err != nil {
		return nil, nil, fmt.Errorf("leader %s: %w", l.id, err)
	}
	return l, st.Members, nil
}

// describeMembers is members as ID=suffrage/gossip/health, for messages.
func describeMembers(members []api.Member) []string {
	var out []string
	for _, m := range members {
		out = append(out, fmt.Sprintf("%s=%s/%s/%s", m.ID, m.Suffrage, m.Gossip, m.Health))
	}
	return out
}

// traffic is the durability workload running against a rollout until
// stopped.
type traffic struct {
	w       *durWorkload
	clients []*durClient
	stop    context.CancelFunc
	budget  context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errs    *errorLog
}

func startTraffic(s settings, rep *report, r *rollout, clients, keysEach int) *traffic {
	tr := &traffic{w: &durWorkload{rep: rep}, errs: &errorLog{}}
	run, stop := context.WithCancel(context.Background())
	tr.stop = stop
	tr.budget, tr.cancel = context.WithCancel(context.Background())
	for i := range clients {
		dc := &durClient{workClient: &workClient{id: i, owner: lock.NewOwner(), stores: r, node: i % r.size(), rng: s.rng(uint64(5000 + i)), unexpected: tr.errs},
			state: map[string]*durState{}}
		for k := range keysEach {
			key := fmt.Sprintf("rollout/%d/%d", i, k)
			dc.keys = append(dc.keys, key)
			dc.state[key] = &durState{}
		}
		tr.clients = append(tr.clients, dc)
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			for run.Err() == nil {
				tr.w.step(dc, tr.budget)
			}
		}()
	}
	return tr
}

// finish stops the clients (each ends its operation in flight), inspects
// every key and fills the report.
func (tr *traffic) finish(rep *report, r *rollout) {
	tr.stop()
	tr.wg.Wait()
	vctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	checked := tr.w.verify(tr.clients, r, vctx)
	tr.cancel()
	tr.w.summarize(tr.clients, checked, "at the end", tr.errs)
	if races := r.pc.racesReported(); len(races) > 0 {
		rep.problem("data races reported by agents %v (their logs follow)", races)
	}
}

// startService starts n agents from the template, all joining each other,
// and waits until they form one cluster with rolloutVoters voters, every
// one of them ready.
func startService(t *testing.T, r *rollout, n int) {
	for attempt := 1; ; attempt++ {
		err := r.launchGroup(n)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			require.NoError(t, err, "starting %d agents (attempt %d)", n, attempt)
		}
		t.Logf("a port was taken before its agent bound it (%v): starting the %d agents again on fresh ports", err, n)
	}
	var nodes []*procNode
	for i := range n {
		nodes = append(nodes, r.replica(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, r.waitMembers(ctx, r.ids(), r.pc.voters), "the agents form one cluster")
	for _, node := range nodes {
		require.NoError(t, waitReadyz(ctx, node))
	}
}

// stepTimeout bounds one step of a rollout (an agent stopped, its
// replacement ready, grants seen again): far above the dead-voter timeout
// plus an election, for a loaded machine with race-built agents.
const stepTimeout = 3 * time.Minute

// TestRollingReplacementProcesses: five agents started from one template
// (-bootstrap-expect 3 -retry-join the others; 3 voters, 2 non-voters)
// under continuous lock traffic, replaced one by one by new agents with new
// names and empty data dirs that join by -retry-join alone, as a
// Deployment rollout does; each old agent is stopped with SIGTERM (without
// -leave-on-terminate: it does not leave) or killed with SIGKILL, and the
// next step waits for the new agent's /readyz. No acknowledged lock may be
// lost, tokens keep increasing, locks are granted again after each step,
// and in the end the configuration holds only the new agents, 3 voting.
// Each step's longest time without a grant is reported.
func TestRollingReplacementProcesses(t *testing.T) {
	for _, stop := range []struct {
		sig   syscall.Signal
		leave bool
	}{{syscall.SIGTERM, false}, {syscall.SIGTERM, true}, {syscall.SIGKILL, false}} {
		sig := stop.sig
		name := strings.ToLower(unixSignalName(sig))
		var extra []string
		if stop.leave {
			name += "-leave-on-terminate"
			extra = append(extra, "-leave-on-terminate")
		}
		t.Run(name, func(t *testing.T) {
			s := loadSettings(t)
			if !s.long && sig != syscall.SIGKILL {
				// Each subtest takes a minute and a half under -race: the
				// short run keeps the hardest (kills), the long one all three.
				t.Skip("runs with RAFTLOCK_LONG=1; the short run keeps the sigkill rollout")
			}
			rep := newReport("rolling-replacement/5-processes/"+name, s)
			r := newRollout(t, extra...)
			startService(t, r, 5)
			tr := startTraffic(s, rep, r, 6, 4)
			defer tr.stop()
			defer tr.cancel()
			ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
			require.NoError(t, r.waitGrants(ctx), "locks are granted before the rollout")
			cancel()

			var steps []string
			for i := range 5 {
				old := r.replica(i)
				before := r.describe(old.id)
				r.clock.lap()
				began := time.Now()
				if sig == syscall.SIGKILL {
					old.kill()
				} else {
					require.NoError(t, old.stop(sig, 30*time.Second))
				}
				rep.fault(name)
				fresh := r.newAgent(fmt.Sprintf("m%d", i+1))
				r.launch(fresh, r.runningGossip())
				r.setReplica(i, fresh)
				ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
				err := waitReadyz(ctx, fresh)
				ready := time.Since(began)
				if err == nil {
					err = r.waitGrants(ctx)
				}
				cancel()
				require.NoError(t, err, "step %d: %s replaced by %s", i+1, old.id, fresh.id)
				gap := r.clock.lap()
				rep.failover(gap)
				steps = append(steps, fmt.Sprintf("%s->%s (%s) ready %v, gap %v, then leader %s", old.id, fresh.id, before, ready.Round(time.Millisecond), gap.Round(time.Millisecond), r.leaderID()))
			}
			ctx, cancel = context.WithTimeout(context.Background(), stepTimeout)
			err := r.waitMembers(ctx, r.ids(), rolloutVoters)
			cancel()
			if err != nil {
				rep.problem("after the rollout: %v", err)
			}
			tr.finish(rep, r)
			rep.note("steps: %s", strings.Join(steps, "; "))
			rep.finish(t)
		})
	}
}

// TestScaleUpAndDownProcesses: three agents started from the template
// (-bootstrap-expect 3 -retry-join each other) under continuous lock
// traffic; six more from the same template started at once, joining the
// three by -retry-join (and, with the template's -bootstrap-expect 3, not
// forming a cluster of their own): nine members, three voting. Then six
// are stopped with SIGTERM one at a time, among them all three original
// voters, as a scale-down to three that respects a PodDisruptionBudget of
// one: each next stop waits until the stopped agent no longer votes and
// every remaining agent's /readyz answers 200. Locks are granted
// throughout, nothing acknowledged is lost, tokens keep increasing, and the
// configuration ends with the three remaining agents, all voting.
func TestScaleUpAndDownProcesses(t *testing.T) {
	s := loadSettings(t)
	if !s.long {
		// About 100 s under -race, which would take the package near go
		// test's default 10-minute limit on a loaded 2-core machine.
		t.Skip("runs with RAFTLOCK_LONG=1")
	}
	rep := newReport("scale-3-9-3/processes", s)
	r := newRollout(t)
	startService(t, r, 3)
	tr := startTraffic(s, rep, r, 6, 4)
	defer tr.stop()
	defer tr.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	require.NoError(t, r.waitGrants(ctx), "locks are granted before scaling")

	// Up: six at once.
	r.clock.lap()
	began := time.Now()
	join := r.runningGossip()
	var added []*procNode
	for i := range 6 {
		n := r.newAgent(fmt.Sprintf("m%d", i+1))
		r.launch(n, join)
		r.setReplica(3+i, n)
		added = append(added, n)
	}
	up, cancelUp := context.WithTimeout(context.Background(), stepTimeout)
	defer cancelUp()
	require.NoError(t, r.waitMembers(up, r.ids(), rolloutVoters), "scaled up to 9")
	for _, n := range added {
		require.NoError(t, waitReadyz(up, n))
	}
	require.NoError(t, r.waitGrants(up))
	gap := r.clock.lap()
	rep.failover(gap)
	steps := []string{fmt.Sprintf("3->9 in %v, gap %v", time.Since(began).Round(time.Millisecond), gap.Round(time.Millisecond))}

	// Down: the original three (voters, the leader among them) and three of
	// the added, in turn.
	for _, i := range []int{0, 3, 1, 4, 2, 5} {
		n := r.replica(i)
		before := r.describe(n.id)
		began := time.Now()
		require.NoError(t, n.stop(syscall.SIGTERM, 30*time.Second))
		rep.fault("sigterm")
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		err := pollUntil(ctx, 100*time.Millisecond, n.id+" no longer votes", func(ctx context.Context) error {
			return r.notVoting(ctx, n.id)
		})
		for _, m := range r.running() {
			if err == nil {
				err = waitReadyz(ctx, m)
			}
		}
		if err == nil {
			err = r.waitGrants(ctx)
		}
		cancel()
		require.NoError(t, err, "after stopping %s", n.id)
		gap := r.clock.lap()
		rep.failover(gap)
		steps = append(steps, fmt.Sprintf("-%s (%s) in %v, gap %v", n.id, before, time.Since(began).Round(time.Millisecond), gap.Round(time.Millisecond)))
	}
	fin, cancelFin := context.WithTimeout(context.Background(), stepTimeout)
	defer cancelFin()
	if err := r.waitMembers(fin, r.ids(), rolloutVoters); err != nil {
		rep.problem("after scaling down: %v", err)
	}
	tr.finish(rep, r)
	rep.note("steps: %s", strings.Join(steps, "; "))
	rep.finish(t)
}

// describe says who leads and what id is in the leader's configuration,
// for the report.
func (r *rollout) describe(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, members, err := r.pc.leaderMembers(ctx)
	if err != nil {
		return err.Error()
	}
	suffrage := "not a member"
	for _, m := range members {
		if m.ID == id {
			suffrage = m.Suffrage
		}
	}
	return fmt.Sprintf("%s %s, leader %s", id, suffrage, l.id)
}

// leaderID names the leader, for the report.
func (r *rollout) leaderID() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if l := r.pc.leader(ctx); l != nil {
		return l.id
	}
	return "none known"
}

// notVoting says (nil) whether the leader's configuration has id as
// anything but a voter, or not at all.
func (r *rollout) notVoting(ctx context.Context, id string) error {
	l, members, err := r.pc.leaderMembers(ctx)
	if err != nil {
		return err
	}
	for _, m := range members {
		if m.ID == id && m.Suffrage == api.SuffrageVoter {
			return fmt.Errorf("%s still votes (leader %s)", id, l.id)
		}
	}
	return nil
}

func unixSignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return sig.String()
}
