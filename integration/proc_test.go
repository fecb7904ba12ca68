package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
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

// procCluster is a cluster of `raftlock agent` processes on 127.0.0.1, each
// with its own data directory, raft port and HTTP port. The ports stay the
// same across restarts (raft's configuration names a member by address).
type procCluster struct {
	t     testing.TB
	nodes []*procNode
	// voters is every agent's -voters; 0 means one voter per node.
	voters int
	// bin is the raftlock binary its nodes run unless a node says
	// otherwise; "" is the one built from this tree (binary).
	bin string
}

// nodeState is what the harness last did to a node.
type nodeState int

const (
	nodeUp     nodeState = iota
	nodeDown             // killed or stopped; restart it
	nodePaused           // SIGSTOP
	nodeLeft             // left the cluster gracefully and exited
)

func (s nodeState) String() string {
	return [...]string{"up", "down", "paused", "left"}[s]
}

// procNode is one agent, running or not.
type procNode struct {
	c        *procCluster
	id       string
	dataDir  string
	raftAddr string
	httpAddr string
	// gossipAddr is its -gossip-bind (TCP and UDP), when it gossips.
	gossipAddr string
	client     *api.Client
	logs       *logRing
	// bin is the raftlock binary the node runs from its next start on;
	// "" is the one built from this tree (binary).
	bin string

	// args are the flags this node was first started with (beyond its
	// identity and addresses): every restart repeats them, as an operator's
	// unit file or script would.
	args []string

	mu    sync.Mutex // protects cmd, done, state
	cmd   *exec.Cmd
	done  chan struct{} // closed when the process has exited
	state nodeState
}

// startMode is how a process cluster's members are first started, each
// way README shows: all with the same -bootstrap-expect N and -retry-join
// list (gossip on: the way README recommends), all with -bootstrap and the
// same -peers, or the first with -bootstrap and the others with -join (no
// gossip).
type startMode int

const (
	startExpect startMode = iota
	startPeers
	startJoin
)

func (m startMode) String() string {
	return [...]string{"bootstrap-expect", "bootstrap-peers", "bootstrap-join"}[m]
}

// startProcCluster starts n agents the way README recommends: every one
// with -bootstrap-expect n and -retry-join the gossip addresses of all n
// (-voters n, so that every one of them votes and stays a voter), and
// waits until all of them know a leader.
func startProcCluster(t testing.TB, n int) *procCluster {
	t.Helper()
	return startProcClusterMode(t, n, startExpect)
}

// startProcClusterMode is startProcCluster with the members started as mode
// says, and extra flags for every agent. Every member is a voter either way.
//
// The members' command lines name each other's ports before any starts,
// and those ports can only be picked free and released: another test's
// agent or connection (tests and packages run in parallel) may take one
// before its agent binds it. Then the agents started are killed and the
// cluster starts again on fresh ports and data dirs, at most portAttempts
// times.
func startProcClusterMode(t testing.TB, n int, mode startMode, extra ...string) *procCluster {
	t.Helper()
	return startProcClusterOf(t, "", n, mode, extra...)
}

// startProcClusterOf is startProcClusterMode with every member running the
// raftlock binary bin ("" for the one built from this tree).
func startProcClusterOf(t testing.TB, bin string, n int, mode startMode, extra ...string) *procCluster {
	t.Helper()
	var c *procCluster
	t.Cleanup(func() {
		for _, node := range c.nodes {
			node.kill()
		}
		for _, node := range c.nodes {
			if t.Failed() {
				t.Logf("agent %s (%s) logs, last part:\n%s", node.id, node.raftAddr, node.logs.String())
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		c = &procCluster{t: t, bin: bin}
		err := c.startMembers(ctx, n, mode, extra)
		if err == nil {
			break
		}
		for _, node := range c.nodes {
			node.kill()
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			require.NoError(t, err, "starting %d agents (attempt %d)", n, attempt)
		}
		t.Logf("a port was taken before its agent bound it (%v): starting the %d agents again on fresh ports", err, n)
	}
	require.NoError(t, c.waitReady(ctx), "the cluster elects a leader")
	return c
}

// startMembers makes and starts c's n members, as startProcClusterMode
// says, each on fresh ports and in a fresh data dir.
func (c *procCluster) startMembers(ctx context.Context, n int, mode startMode, extra []string) error {
	dir := c.t.TempDir()
	var peers, gossip []string
	for i := range n {
		node := c.newNode(fmt.Sprintf("n%d", i+1), dir)
		peers = append(peers, node.id+"="+node.raftAddr)
		gossip = append(gossip, node.gossipAddr)
	}
	for i, node := range c.nodes {
		switch {
		case mode == startExpect:
			node.args = gossipArgs(node, gossip, "-bootstrap-expect", strconv.Itoa(n))
		case mode == startPeers:
			node.args = []string{"-bootstrap", "-peers", strings.Join(peers, ",")}
		case i == 0:
			node.args = []string{"-bootstrap"}
		default:
			node.args = []string{"-join", c.nodes[0].raftAddr}
		}
		node.args = append(node.args, extra...)
		if err := node.startOnce(); err != nil {
			return err
		}
		if mode == startJoin && i == 0 {
			if err := c.waitReady(ctx); err != nil {
				return fmt.Errorf("the first node elects itself: %w", err)
			}
		}
	}
	return nil
}

// newNode prepares a member of c named id, with a data dir under dir (empty)
// and its own raft, HTTP and gossip ports; it does not start it.
func (c *procCluster) newNode(id, dir string) *procNode {
	c.t.Helper()
	n := &procNode{c: c, id: id, dataDir: filepath.Join(dir, id), logs: newLogRing(1 << 20), state: nodeDown, bin: c.bin}
	n.pickPorts()
	c.nodes = append(c.nodes, n)
	return n
}

// pickPorts gives n fresh raft, HTTP and gossip ports, free a moment ago
// and none of another member's.
func (n *procNode) pickPorts() {
	c := n.c
	c.t.Helper()
	var addrs []string
	for {
		var err error
		addrs, err = freeAddrs(3)
		require.NoError(c.t, err)
		if !slices.ContainsFunc(addrs, c.portTaken) {
			break
		}
	}
	n.raftAddr, n.httpAddr, n.gossipAddr = addrs[0], addrs[1], addrs[2]
	var err error
	n.client, err = api.NewClient(n.httpAddr, api.ClientConfig{})
	require.NoError(c.t, err)
}

// portTaken says whether addr is already one of a member's ports (free
// ports found one call apart may repeat).
func (c *procCluster) portTaken(addr string) bool {
	for _, n := range c.nodes {
		if addr == n.raftAddr || addr == n.httpAddr || addr == n.gossipAddr {
			return true
		}
	}
	return false
}

// gossipArgs are the flags of a member that finds the others through
// gossip: its own gossip address, the gossip addresses join (all the
// members', itself included: an agent skips its own), and flags.
func gossipArgs(n *procNode, join []string, flags ...string) []string {
	return append([]string{"-gossip-bind", n.gossipAddr, "-retry-join", strings.Join(join, ",")}, flags...)
}

// freeAddrs finds n distinct free TCP ports on 127.0.0.1. They are free
// when this returns; a process or connection that takes one a moment later
// makes the agent given it exit saying so (errPortInUse): a first start
// then goes again on fresh ports (startProcClusterMode, rollout.launch), a
// restart retries its own (start).
func freeAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

var listeningLine = regexp.MustCompile(`raftlock agent (\S+): raft on (\S+), HTTP API on http://(\S+), data in`)

// setJoin changes how n is started from now on, as an operator restarting
// a member whose data dir was emptied does: -join addrs instead of
// -bootstrap, -peers or an earlier -join, and extra flags added; n's other
// flags stay. A member that gossips keeps its flags (only extra is added):
// on an empty data dir, -retry-join finds the cluster and the leader adds
// it again (its -bootstrap-expect does not bootstrap while gossip shows
// members of a cluster), as an orchestrator's replica with a lost volume
// comes back.
func (n *procNode) setJoin(addrs []string, extra ...string) {
	if slices.Contains(n.args, "-retry-join") {
		n.args = append(n.args, extra...)
		return
	}
	var kept []string
	for i := 0; i < len(n.args); i++ {
		switch n.args[i] {
		case "-bootstrap":
		case "-peers", "-join":
			i++ // and its value
		default:
			kept = append(kept, n.args[i])
		}
	}
	n.args = append(append(kept, "-join", strings.Join(addrs, ",")), extra...)
}

// portAttempts bounds how many sets of fresh ports a first start tries.
const portAttempts = 5

// errPortInUse is an agent that exited at start because a port on its
// command line was taken.
var errPortInUse = errors.New("a port on the agent's command line is in use")

// portInUse says whether an agent's logs say it could not bind a port
// because something holds it: -http's and gossip's bind errors, or the
// agent's own message for -bind's.
func portInUse(logs string) bool {
	return strings.Contains(logs, "address already in use") || strings.Contains(logs, "the port is in use")
}

// start runs the agent with its fixed identity and addresses plus args,
// and waits for its "listening" line. A restart must come back on the same
// ports (the raft configuration and the others' -retry-join name them): a
// port taken by someone else in the meantime is retried for a while.
func (n *procNode) start(args ...string) error {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = n.startOnce(args...); err == nil || !errors.Is(err, errPortInUse) {
			return err
		}
		time.Sleep(250 * time.Millisecond) // the port is held by a connection in flight; it goes soon
	}
	return err
}

// startingMark begins the line the harness writes in an agent's logs as it
// starts it.
const startingMark = "--- harness: starting"

// startOnce is start without retries: errPortInUse when the agent exited
// because a port was taken.
func (n *procNode) startOnce(args ...string) error {
	voters := len(n.c.nodes)
	if n.c.voters > 0 {
		voters = n.c.voters
	}
	full := append([]string{"agent", "-log-level", "warn", "-voters", strconv.Itoa(voters),
		"-node-id", n.id, "-data-dir", n.dataDir, "-bind", n.raftAddr, "-http", n.httpAddr}, n.args...)
	full = append(full, args...)
	program := binary
	if n.bin != "" {
		program = n.bin
	}
	cmd := exec.Command(program, full...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = n.logs
	fmt.Fprintf(n.logs, "%s %s %s\n", startingMark, program, strings.Join(full, " "))
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			if first {
				lines <- sc.Text()
				first = false
			}
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		if ok && listeningLine.MatchString(line) {
			n.mu.Lock()
			n.cmd, n.done, n.state = cmd, done, nodeUp
			n.mu.Unlock()
			return nil
		}
		cmd.Process.Kill()
		<-done
		logs := n.logs.String()
		if i := strings.LastIndex(logs, startingMark); i >= 0 {
			logs = logs[i:] // this start's
		}
		if portInUse(logs) {
			return fmt.Errorf("%w: agent %s did not start: %s", errPortInUse, n.id, lastLines(logs, 5))
		}
		return fmt.Errorf("agent %s did not start (first line %q): %s", n.id, line, lastLines(logs, 5))
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("agent %s did not start within a minute: %s", n.id, lastLines(n.logs.String(), 5))
	}
}

func lastLines(s string, k int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return strings.Join(lines, "\n")
}

// signal sends sig to the running agent; false when there is none.
func (n *procNode) signal(sig syscall.Signal) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	return n.cmd.Process.Signal(sig) == nil
}

// kill ends the agent with SIGKILL (a crash: nothing is flushed, nobody is
// told) and waits for it to be gone.
func (n *procNode) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	if n.state != nodeLeft {
		n.state = nodeDown
	}
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT) // a paused process dies just as well, but let it be counted as gone
	cmd.Process.Kill()
	<-done
	fmt.Fprintf(n.logs, "--- harness: killed with SIGKILL\n")
}

// pause stops the agent with SIGSTOP: it keeps its sockets but answers
// nothing, like a process stuck in a long GC pause or a frozen VM.
func (n *procNode) pause() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.state != nodeUp {
		return false
	}
	n.state = nodePaused
	fmt.Fprintf(n.logs, "--- harness: SIGSTOP\n")
	return n.cmd.Process.Signal(syscall.SIGSTOP) == nil
}

func (n *procNode) resume() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.state != nodePaused {
		return
	}
	n.state = nodeUp
	fmt.Fprintf(n.logs, "--- harness: SIGCONT\n")
	n.cmd.Process.Signal(syscall.SIGCONT)
}

// leave takes the agent out of the cluster for good, as `raftlock leave`
// does (POST /v1/leave), and waits for it to exit; past grace it is killed.
// Like an operator, it asks again while the agent answers that it is, or
// may still be, a member (no leader for a while: an election on a loaded
// host). A leave that the agent reports done while the leader's
// configuration keeps the node is an error.
func (n *procNode) leave(grace time.Duration) error {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	if cmd == nil || n.state != nodeUp {
		n.mu.Unlock()
		return fmt.Errorf("agent %s is %v", n.id, n.state)
	}
	n.state = nodeLeft
	n.mu.Unlock()
	fmt.Fprintf(n.logs, "--- harness: POST /v1/leave\n")
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	for {
		err := n.client.Leave(ctx)
		if err == nil {
			break
		}
		if !leaveRetryable(err) || ctx.Err() != nil {
			n.kill()
			return fmt.Errorf("agent %s did not leave: %w; killed", n.id, err)
		}
		fmt.Fprintf(n.logs, "--- harness: leave failed, asking again: %v\n", err)
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		n.kill()
		return fmt.Errorf("agent %s left but did not exit within %v; killed", n.id, grace)
	}
	n.mu.Lock()
	n.cmd = nil
	n.mu.Unlock()
	return pollUntil(ctx, 50*time.Millisecond, "left, but the leader's configuration keeps the node", func(ctx context.Context) error {
		l, members, err := n.c.leaderMembers(ctx)
		if err != nil {
			return err
		}
		for _, m := range members {
			if m.ID == n.id {
				return fmt.Errorf("leader %s: %v", l.id, describeMembers(members))
			}
		}
		return nil
	})
}

// stop sends sig (SIGTERM or SIGINT: a graceful stop) and waits for the
// agent to exit; past grace it is killed.
func (n *procNode) stop(sig syscall.Signal, grace time.Duration) error {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	if cmd == nil || n.state != nodeUp {
		n.mu.Unlock()
		return fmt.Errorf("agent %s is %v", n.id, n.state)
	}
	n.state = nodeDown
	n.mu.Unlock()
	fmt.Fprintf(n.logs, "--- harness: %v\n", sig)
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		n.kill()
		return fmt.Errorf("agent %s did not stop within %v of %v; killed", n.id, grace, sig)
	}
	n.mu.Lock()
	n.cmd = nil
	n.mu.Unlock()
	return nil
}

// restart starts a stopped agent again on its data directory with the
// command line it was first started with. One that left asks to be added
// back by itself.
func (n *procNode) restart() error { return n.start() }

func (n *procNode) currentState() nodeState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.state
}

// raceReported says whether the agent's race detector reported a data race.
func (n *procNode) raceReported() bool { return n.logs.raced() }

// size and store make a procCluster a storeSet.
func (c *procCluster) size() int { return len(c.nodes) }

func (c *procCluster) store(i int) lock.Store {
	if c.nodes[i].currentState() != nodeUp {
		return nil
	}
	return c.nodes[i].client
}

// up lists the nodes that are running and not paused.
func (c *procCluster) up() []*procNode {
	var out []*procNode
	for _, n := range c.nodes {
		if n.currentState() == nodeUp {
			out = append(out, n)
		}
	}
	return out
}

// leader asks the running nodes who leads and returns that node, or nil when
// none of them knows a leader that is one of ours.
func (c *procCluster) leader(ctx context.Context) *procNode {
	for _, n := range c.up() {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := n.client.Health(qctx)
		cancel()
		if err != nil || h.LeaderAddr == "" {
			continue
		}
		for _, l := range c.nodes {
			if l.raftAddr == h.LeaderAddr && l.currentState() == nodeUp {
				return l
			}
		}
	}
	return nil
}

// waitReady waits until every running node knows the same leader, a
// running one, and a write goes through.
func (c *procCluster) waitReady(ctx context.Context) error {
	return pollUntil(ctx, 50*time.Millisecond, "cluster not ready", c.ready)
}

func (c *procCluster) ready(ctx context.Context) error {
	up := c.up()
	if len(up) == 0 {
		return errors.New("no node is running")
	}
	leaders := map[string]bool{}
	for _, n := range up {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := n.client.Health(qctx)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", n.id, err)
		}
		if !h.Ready {
			return fmt.Errorf("%s knows no leader", n.id)
		}
		leaders[h.LeaderAddr] = true
	}
	if len(leaders) != 1 {
		return fmt.Errorf("nodes disagree about the leader: %v", leaders)
	}
	return probeWrite(ctx, up[0].client)
}

// probeWrite takes and releases a lock of its own, proving the cluster
// commits.
func probeWrite(ctx context.Context, s lock.Store) error {
	owner := lock.NewOwner()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.Acquire(wctx, lock.AcquireRequest{Key: "harness/probe", Owner: owner, TTL: time.Second}); err != nil {
		return err
	}
	_, err := s.Release(wctx, "harness/probe", owner)
	return err
}

// checkAtEnd reports what a nemesis scenario checks of its cluster at the
// end: every agent votes (leaves and rejoins, kills and restarts must not
// leave a member without its vote for good), and no agent's race detector
// spoke.
func (c *procCluster) checkAtEnd(rep *report) {
	var ids []string
	for _, n := range c.nodes {
		ids = append(ids, n.id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultRecoverIn)
	defer cancel()
	if err := c.waitVoters(ctx, ids); err != nil {
		rep.problem("at the end: %v", err)
	}
	if races := c.racesReported(); len(races) > 0 {
		rep.problem("data races reported by agents %v (their logs follow)", races)
	}
}

// survivorsElect says whether the voters other than l that run are a
// majority of the leader's configuration's voters: whether a failover is
// possible if l dies now. Not right after a member came back (a leave and
// a restart, say): with gossip it is added as a non-voter and gets its
// vote a health check or two later, and meanwhile two voters are a quorum
// of two.
func (c *procCluster) survivorsElect(ctx context.Context, l *procNode) bool {
	leader, members, err := c.leaderMembers(ctx)
	if err != nil || leader != l {
		return false
	}
	voters, surviving := 0, 0
	for _, m := range members {
		if m.Suffrage != api.SuffrageVoter {
			continue
		}
		voters++
		for _, n := range c.up() {
			if n != l && n.id == m.ID {
				surviving++
			}
		}
	}
	return surviving > voters/2
}

// racesReported lists the nodes whose race detector reported a data race.
func (c *procCluster) racesReported() []string {
	var out []string
	for _, n := range c.nodes {
		if n.raceReported() {
			out = append(out, n.id)
		}
	}
	return out
}

// logRing keeps the last max bytes a process wrote, and remembers whether
// the race detector ever spoke.
type logRing struct {
	mu   sync.Mutex // protects buf and race
	buf  []byte
	max  int
	race bool
}

func newLogRing(max int) *logRing { return &logRing{max: max} }

func (r *logRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if bytes.Contains(p, []byte("WARNING: DATA RACE")) {
		r.race = true
	}
	r.buf = append(r.buf, p...)
	if over := len(r.buf) - r.max; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	return len(p), nil
}

func (r *logRing) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.buf)
}

func (r *logRing) raced() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.race
}
