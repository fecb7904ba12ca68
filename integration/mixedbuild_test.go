package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testskip"
	"github.com/raftlock/raftlock/lock"
)

// compatBaseCommit is an earlier build of this repository that a cluster
// of the current one must run together with: the current build reads its
// log entries, snapshots, data dirs and node-to-node requests, and it reads
// the current build's, while a rolling upgrade replaces its agents one by
// one. It is the last commit before the packages were reshaped (lock's
// plumbing, the memory store, cluster's subpackages), which promised to
// change no wire or disk format. Move it forward only to a commit whose
// formats every later build must still speak.
const compatBaseCommit = "58446891f78e166df8db0a641c676cf85431bd48"

// buildAtCommit builds cmd/raftlock as it was at commit, from this clone's
// git history, into a temporary directory, and returns the binary's path.
// The test skips, saying so, when there is no such history (a source
// archive, a shallow clone) or no git.
func buildAtCommit(t *testing.T, commit string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	if _, err := exec.LookPath("git"); err != nil {
		testskip.Skip(t, "no git to read commit %.12s from", commit)
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		testskip.Skip(t, "commit %.12s is not in this clone's history (shallow clone or source archive?): %s",
			commit, strings.TrimSpace(string(out)))
	}
	src := t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	var tarball, stderr bytes.Buffer
	archive.Stdout, archive.Stderr = &tarball, &stderr
	require.NoError(t, archive.Run(), "git archive %s: %s", commit, stderr.String())
	untar := exec.Command("tar", "-x", "-C", src)
	untar.Stdin = &tarball
	out, err := untar.CombinedOutput()
	require.NoError(t, err, "unpacking %s: %s", commit, out)

	bin := filepath.Join(t.TempDir(), "raftlock-"+commit[:12])
	build := exec.Command("go", "build", "-o", bin, "./cmd/raftlock")
	build.Dir = src
	// The old tree's go.mod and go.sum are complete; nothing of the current
	// tree's module setup may leak into its build.
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err = build.CombinedOutput()
	require.NoError(t, err, "building raftlock at %s: %s", commit, out)
	return bin
}

// TestMixedBuildRollingUpgrade runs a cluster of agents built at
// compatBaseCommit, takes locks, and replaces its agents one at a time by
// agents of the current build on the same data dirs and command lines, as a
// rolling upgrade does. Snapshots are taken often, so each build restores
// the other's. At every step, through every agent (so a request is
// forwarded between builds): the held locks keep their tokens, their owners
// can extend them, a new grant's token is larger than every one before, and
// a release ends it, and the leader judges every member healthy (followers
// of the current build show its judgement when it is of the current build
// too). With one agent upgraded, the checks run once under a
// leader of each build, so that requests are forwarded both ways and each
// build replicates its entries to the other.
func TestMixedBuildRollingUpgrade(t *testing.T) {
	oldBin := buildAtCommit(t, compatBaseCommit)
	const agents = 3
	c := startProcClusterOf(t, oldBin, agents, startExpect, "-snapshot-threshold", "8", "-snapshot-interval", "50ms")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	type held struct {
		req   lock.AcquireRequest
		token uint64
	}
	var holds []held
	var maxToken uint64
	grant := func(via int, req lock.AcquireRequest) lock.Lease {
		t.Helper()
		lease, err := c.store(via).Acquire(ctx, req)
		require.NoError(t, err, "acquire %q through %s (%s)", req.Key, c.nodes[via].id, buildOf(c.nodes[via]))
		require.Greater(t, lease.Token, maxToken, "a new grant's fencing token exceeds every earlier one")
		maxToken = lease.Token
		return lease
	}
	for i, req := range []lock.AcquireRequest{
		{Key: "mixed/mutex", Owner: lock.NewOwner(), TTL: 5 * time.Minute, Metadata: "held across the upgrade"},
		{Key: "mixed/semaphore", Owner: lock.NewOwner(), TTL: 5 * time.Minute, Kind: lock.KindSemaphore, Limit: 2},
		{Key: "mixed/rw", Owner: lock.NewOwner(), TTL: 5 * time.Minute, Kind: lock.KindRWLock, Shared: true},
	} {
		holds = append(holds, held{req: req, token: grant(i%agents, req).Token})
	}

	// checkJudgements: the leader judges every member alive and healthy,
	// whatever its build (a member of the older build refuses a stats
	// request that carries the leader's view of the members, is asked
	// again without it, and keeps answering), and a follower of the
	// current build shows that judgement when a leader of the current
	// build reports it.
	checkJudgements := func(step string) {
		t.Helper()
		require.NoError(t, pollUntil(ctx, 100*time.Millisecond, step+": the leader's judgement of the members", func(ctx context.Context) error {
			l := c.leader(ctx)
			if l == nil {
				return errors.New("no leader")
			}
			for _, n := range c.nodes {
				if n != l && (n.bin != "" || l.bin != "") {
					continue // no judgement on a follower of the older build, nor under a leader of it
				}
				qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				st, err := n.client.Cluster(qctx)
				cancel()
				if err != nil {
					return fmt.Errorf("%s: %w", n.id, err)
				}
				for _, m := range st.Members {
					if m.Status != "alive" || m.Health != api.HealthHealthy {
						return fmt.Errorf("%s (%s build, leader %s of the %s build) shows %s %q/%q", n.id, buildOf(n), l.id, buildOf(l), m.ID, m.Status, m.Health)
					}
				}
			}
			return nil
		}))
	}

	// checkEveryAgent is what must hold between any two steps of the upgrade.
	checkEveryAgent := func(step string) {
		t.Helper()
		checkJudgements(step)
		for via := range c.nodes {
			s := c.store(via)
			for _, h := range holds {
				info, err := s.Inspect(ctx, h.req.Key)
				require.NoError(t, err, "%s: inspect %q through %s", step, h.req.Key, c.nodes[via].id)
				require.True(t, info.Locked, "%s: %q is still held, seen through %s", step, h.req.Key, c.nodes[via].id)
				require.Equal(t, h.req.Kind, info.Kind, "%s: %q keeps its kind", step, h.req.Key)
				if h.req.Kind == lock.KindMutex {
					require.Equal(t, h.token, info.Token, "%s: %q keeps its token", step, h.req.Key)
					require.Equal(t, h.req.Metadata, info.Metadata, "%s: %q keeps its metadata", step, h.req.Key)
				}
				lease, err := s.Extend(ctx, h.req.Key, h.req.Owner, 5*time.Minute)
				require.NoError(t, err, "%s: extend %q through %s", step, h.req.Key, c.nodes[via].id)
				require.Equal(t, h.token, lease.Token, "%s: an extend keeps %q's token", step, h.req.Key)
			}
			// Enough grants to cross the snapshot threshold on every step.
			for k := range 6 {
				req := lock.AcquireRequest{Key: fmt.Sprintf("mixed/%s/via-%s/%d", step, c.nodes[via].id, k), Owner: lock.NewOwner(), TTL: time.Minute}
				grant(via, req)
				released, err := s.Release(ctx, req.Key, req.Owner)
				require.NoError(t, err, "%s: release %q through %s", step, req.Key, c.nodes[via].id)
				require.True(t, released, "%s: the release of %q through %s ends the grant", step, req.Key, c.nodes[via].id)
			}
		}
	}

	checkEveryAgent("all-old")
	for i, n := range c.nodes {
		require.NoError(t, n.stop(syscall.SIGTERM, 30*time.Second), "stopping %s", n.id)
		n.bin = "" // the current build, on the same data dir and command line
		require.NoError(t, n.restart(), "starting %s on the current build", n.id)
		require.NoError(t, c.waitReady(ctx), "the cluster is ready after %s is upgraded", n.id)
		step := fmt.Sprintf("upgraded-%d", i+1)
		if l := c.leader(ctx); l != nil {
			t.Logf("%s: %s leads, on the %s build", step, l.id, buildOf(l))
		}
		checkEveryAgent(step)
		if i == 0 {
			for _, current := range []bool{true, false} {
				l := leadOnBuild(ctx, t, c, current)
				checkEveryAgent(fmt.Sprintf("%s-%s-leads", step, l.id))
			}
		}
	}
	for _, h := range holds {
		released, err := c.store(0).Release(ctx, h.req.Key, h.req.Owner)
		require.NoError(t, err, "release %q after the upgrade", h.req.Key)
		require.True(t, released, "the holder of %q releases it after the upgrade", h.req.Key)
	}
}

// leadOnBuild makes a node of the current build (or of an older one) lead,
// by pausing (SIGSTOP) whichever node leads until the others have elected
// another, and returns the leader. Which of the others wins is up to their
// election timers, so it tries until the build wanted leads: each try
// fails with odds of about one half.
func leadOnBuild(ctx context.Context, t *testing.T, c *procCluster, current bool) *procNode {
	t.Helper()
	for attempt := 1; ; attempt++ {
		var l *procNode
		require.NoError(t, pollUntil(ctx, 50*time.Millisecond, "a leader", func(context.Context) error {
			if l = c.leader(ctx); l == nil {
				return fmt.Errorf("no leader")
			}
			return nil
		}))
		if (l.bin == "") == current {
			t.Logf("%s leads, on the %s build (try %d)", l.id, buildOf(l), attempt)
			return l
		}
		require.Less(t, attempt, 24, "a node of the wanted build never won an election")
		require.True(t, l.pause(), "pausing leader %s", l.id)
		err := pollUntil(ctx, 50*time.Millisecond, "another leader", func(context.Context) error {
			if other := c.leader(ctx); other == nil || other == l {
				return fmt.Errorf("no other leader yet")
			}
			return nil
		})
		l.resume()
		require.NoError(t, err)
		require.NoError(t, c.waitReady(ctx))
	}
}

// buildOf names the build a node runs, for messages.
func buildOf(n *procNode) string {
	if n.bin == "" {
		return "current"
	}
	return "older (" + filepath.Base(n.bin) + ")"
}
