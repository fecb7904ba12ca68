package uitest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/apiserver"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/cluster/clustertest"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testskip"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

const (
	token       = "ui-test-token"             // the shared token: every right
	readerToken = "billing-reader-0123456789" // read on billing/ only
)

func readerTokens(t *testing.T) *apiserver.Tokens {
	tokens, err := apiserver.NewTokens([]apiserver.Token{{Name: "billing-reader", Secret: readerToken,
		Rules: []api.TokenRule{{Prefix: "billing/", Right: api.RightRead}}}})
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

// browserPath finds a Chromium or Chrome, or "" when none is installed.
func browserPath() string {
	if p := os.Getenv("RAFTLOCK_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startCluster starts three nodes, each serving the API (with the console)
// on its own port with the token, and returns the nodes' URLs.
func startCluster(t *testing.T) (c *clustertest.Cluster, urls []string) {
	listeners := map[string]net.Listener{}
	c = clustertest.Start(t, 3, func(cfg *cluster.Config) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listening: %v", err)
		}
		listeners[cfg.NodeID] = ln
		cfg.APIAddr = "http://" + ln.Addr().String()
		// Slower than clustertest's timings, so that a loaded machine (CI
		// runs this beside everything else) does not change leaders mid-test.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	})
	for _, n := range c.Nodes {
		ln := listeners[n.ID()]
		srv := apiserver.NewServer(ln.Addr().String(), apiserver.NewHandler(n, apiserver.Config{Token: token, Tokens: readerTokens(t)}))
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return c, urls
}

// TestConsoleShowsLocksLive opens the leader's console of a three-node
// cluster in a headless Chromium: the page asks for the token, shows the
// members, shows the locks the test takes (tokens, queue lengths, a key's
// waiter), force-releases one with its button (the waiter gets it), shows a
// read-only token only what it may read and no button, and drops a lock
// when the test releases it, without reloading.
func TestConsoleShowsLocksLive(t *testing.T) {
	browser := needBrowser(t)
	c, urls := startCluster(t)
	leader := c.Leader(t)
	var consoleURL string
	for i, n := range c.Nodes {
		if n == leader {
			consoleURL = urls[i] // the leader's console: it times commits
		}
	}
	client, err := api.NewClient(urls[0], api.ClientConfig{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bctx := openBrowser(t, ctx, browser)

	// The page loads without the token and asks for it.
	run(t, bctx, "open the console",
		chromedp.Navigate(consoleURL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		evaluate(`window.__notReloaded = true`),
		waitText("#conn", "token needed"),
	)
	// With the token, it goes live and shows the three members.
	run(t, bctx, "give the token",
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
		waitText("#conn", "live"),
		waitText("#who", "token shared"), // the shared token's name in whoami
		waitCount("#members tbody tr", 3),
		// Each member's version and command level, told to every member.
		waitText(`#members tr[data-member="n2"] td.version`, fmt.Sprintf("(level %d)", fsm.MaxCommandLevel)),
		// The leader's name (which may change on a loaded machine).
		wrap("a leader's name", chromedp.Poll[chromedp.Void](`["n0", "n1", "n2"].includes(document.getElementById("leader-id").textContent)`,
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(pollPatience))),
	)

	// A lock the test takes shows up, with its token.
	ownerA, ownerB := lock.NewOwner(), lock.NewOwner()
	lease, err := client.Acquire(ctx, lock.AcquireRequest{Key: "billing/invoice-42", Owner: ownerA, TTL: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Acquire(ctx, lock.AcquireRequest{Key: "jobs/nightly-report", Owner: ownerB, TTL: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	// A semaphore of 3 with two holders, each with its own token and
	// metadata, and a multi-key set: the page shows every hold and the set.
	pool := []lock.AcquireRequest{
		{Key: "render/pool", Owner: lock.NewOwner(), TTL: 5 * time.Minute, Kind: lock.KindSemaphore, Limit: 3, Metadata: "host=render-a"},
		{Key: "render/pool", Owner: lock.NewOwner(), TTL: 4 * time.Minute, Kind: lock.KindSemaphore, Limit: 3, Metadata: "host=render-b"},
	}
	var poolTokens []uint64
	for _, req := range pool {
		l, err := client.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		poolTokens = append(poolTokens, l.Token)
	}
	if _, err := client.AcquireAll(ctx, lock.AcquireRequest{Key: "acct/alice", Keys: []string{"acct/alice", "acct/bob"}, Owner: lock.NewOwner(), TTL: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	// One caller waits for jobs/nightly-report, for the queue column.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() {
		_, _ = client.Acquire(waitCtx, lock.AcquireRequest{Key: "jobs/nightly-report", Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
	}()
	// Some traffic for the charts, until the screenshot.
	traffic, stopTraffic := context.WithCancel(ctx)
	trafficDone := make(chan struct{})
	go func() {
		defer close(trafficDone)
		for i := 0; traffic.Err() == nil; i++ {
			o := lock.NewOwner()
			key := fmt.Sprintf("scratch/%d", i%10)
			if _, err := client.Acquire(traffic, lock.AcquireRequest{Key: key, Owner: o, TTL: time.Minute}); err == nil {
				_, _ = client.Release(traffic, key, o)
			}
		}
	}()
	defer func() { stopTraffic(); <-trafficDone }()
	row := `tr[data-key="billing/invoice-42"]`
	run(t, bctx, "see the lock",
		chromedp.WaitVisible(chromedp.CSS(row)),
		waitText(row+" td:nth-child(2)", fmt.Sprint(lease.Token)),
		waitText(`tr[data-key="jobs/nightly-report"] td:nth-child(4)`, "1"),
		// The semaphore: its kind and both holds, each with its token and metadata.
		waitText(`tr[data-key="render/pool"] td.kind`, "semaphore 2/3"),
		waitCount(`tr.hold[data-hold-of="render/pool"]`, 2),
		waitText(fmt.Sprintf(`tr.hold[data-hold-of="render/pool"][data-token="%d"]`, poolTokens[0]), "host=render-a"),
		waitText(fmt.Sprintf(`tr.hold[data-hold-of="render/pool"][data-token="%d"]`, poolTokens[1]), "host=render-b"),
		// The multi-key set: each key's row names the set.
		waitText(`tr[data-set-of="acct/alice"]`, "acct/bob"),
		waitText("#watches", "0"),
		// The queued key's detail lists its waiter.
		chromedp.Click(chromedp.CSS(`tr[data-key="jobs/nightly-report"] td.key`)),
		waitText("#detail-body", "fencing token"),
		waitText(`#detail-waiters li[data-position="1"]`, "asks for 60.0 s"),
		waitCount("#chart-applied polyline", 1),
		// A few seconds of history, for the screenshot's charts.
		wrap("six seconds of history", chromedp.Poll[chromedp.Void](`lastEvent && lastEvent.history.length >= 6`,
			chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(pollPatience))),
	)
	stopTraffic()
	<-trafficDone
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	saveScreenshot(t, png)

	// The semaphore's detail lists both holds; when one holder releases,
	// the list and the detail drop its hold without a reload.
	run(t, bctx, "see the semaphore's holds",
		chromedp.Click(chromedp.CSS(`tr[data-key="render/pool"] td.key`)),
		waitText("#detail-body", "semaphore 2/3"),
		waitCount("#detail-holds li", 2),
		waitText(fmt.Sprintf(`#detail-holds li[data-token="%d"]`, poolTokens[1]), "host=render-b"),
	)
	if released, err := client.Release(ctx, "render/pool", pool[0].Owner); err != nil || !released {
		t.Fatalf("release of a semaphore hold: %v %v", released, err)
	}
	run(t, bctx, "see one hold go",
		waitText(`tr[data-key="render/pool"] td.kind`, "semaphore 1/3"),
		wrap("one hold left, the second holder's", chromedp.Poll[chromedp.Void](fmt.Sprintf(
			`document.querySelectorAll('tr.hold[data-hold-of="render/pool"]').length === 1 && !!document.querySelector('tr.hold[data-token="%d"]') && document.querySelectorAll("#detail-holds li").length === 1`, poolTokens[1]),
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(pollPatience))),
	)

	// The shared token is an admin: the force-release button ends
	// jobs/nightly-report's lease, and the page shows its waiter holding it.
	run(t, bctx, "force-release",
		evaluate(`window.confirm = () => true`),
		chromedp.Click(chromedp.CSS(`tr[data-key="jobs/nightly-report"] button.danger`)),
		waitText(`tr[data-key="jobs/nightly-report"] td:nth-child(4)`, "0"),
		wrap("a new token for jobs/nightly-report", chromedp.Poll[chromedp.Void](
			`document.querySelector('tr[data-key="jobs/nightly-report"] td:nth-child(2)').textContent !== "2"`,
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(pollPatience))),
	)
	info, err := client.Inspect(ctx, "jobs/nightly-report")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Locked || info.Waiters != 0 || info.Token == 2 {
		t.Errorf("after the force-release, jobs/nightly-report is %+v; want held by its waiter", info)
	}

	// A token that may only read billing/ sees that key, no other, and no button.
	run(t, bctx, "use a read-only token",
		chromedp.Click(chromedp.CSS("#token-clear")),
		chromedp.SendKeys(chromedp.CSS("#token"), readerToken),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
		waitText("#who", "token billing-reader"),
		chromedp.WaitVisible(chromedp.CSS(row)),
		wrap("jobs/ to go and no button", chromedp.Poll[chromedp.Void](
			`!document.querySelector('tr[data-key="jobs/nightly-report"]') && !document.querySelector("button.danger")`,
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(pollPatience))),
	)

	// Released, it goes from the page without a reload.
	if released, err := client.Release(ctx, "billing/invoice-42", ownerA); err != nil || !released {
		t.Fatalf("release: %v %v", released, err)
	}
	run(t, bctx, "see the release", chromedp.WaitNotPresent(chromedp.CSS(row)))
	notReloaded, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.__notReloaded === true`))
	if err != nil {
		t.Fatal(err)
	}
	if !notReloaded {
		t.Error("the page reloaded to show the release; it should update in place")
	}
	stopWaiting()

	// A follower times no commits: its page links to the leader's console.
	var followerURL string
	var others []string
	for i, n := range c.Nodes {
		if n != leader && followerURL == "" {
			followerURL = urls[i]
		} else {
			others = append(others, urls[i]+"/ui/")
		}
	}
	linksToALeader := fmt.Sprintf(`(() => { const a = document.querySelector("#c-latency-where a"); return !!a && %s.includes(a.href); })()`, jsList(others))
	run(t, bctx, "a follower's console",
		chromedp.Navigate(followerURL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
		waitText("#conn", "live"),
		waitText("#c-latency-where", "timed on the leader only"),
		wrap("a link to the leader's console", chromedp.Poll[chromedp.Void](linksToALeader,
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(pollPatience))),
	)
}

// jsList is a JavaScript array literal of strings.
func jsList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// needBrowser returns the path of a Chromium or Chrome, skipping the test
// with what to install when there is none.
func needBrowser(t *testing.T) string {
	browser := browserPath()
	if browser == "" {
		testskip.Skip(t, "%s", "no Chromium or Chrome found (looked for chromium, chromium-browser, google-chrome, chrome; or set RAFTLOCK_CHROMIUM): "+
			"install one (Debian: apt-get install chromium) to run the console's browser test")
	}
	return browser
}

// openBrowser starts a headless browser for the test, closed when ctx ends
// or the test does, and returns its context.
func openBrowser(t *testing.T, ctx context.Context, browser string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelBrowser)
	return bctx
}

// TestConsoleUnderAPrefix opens the console of a Handler that a program
// serves under a prefix of its own server (http.StripPrefix): the page
// loads from the prefix, goes live, and shows a lock taken meanwhile, so
// every address it asks for stayed under the prefix.
func TestConsoleUnderAPrefix(t *testing.T) {
	browser := needBrowser(t)
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	mux := http.NewServeMux()
	mux.Handle("/raftlock/", http.StripPrefix("/raftlock", apiserver.NewHandler(store, apiserver.Config{Token: token})))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "the program's own page", http.StatusTeapot)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bctx := openBrowser(t, ctx, browser)
	run(t, bctx, "open the console under the prefix",
		chromedp.Navigate(srv.URL+"/raftlock/ui"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
		waitText("#conn", "live"),
		waitText("#who", "token shared"),
	)
	if _, err := store.Acquire(ctx, lock.AcquireRequest{Key: "billing/invoice-7", Owner: lock.NewOwner(), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	run(t, bctx, "see the lock", chromedp.WaitVisible(chromedp.CSS(`tr[data-key="billing/invoice-7"]`)))
}

// run runs the steps, failing the test with the page's text if one fails.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, page)
	}
}

func evaluate(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](js)(ctx, t)
		return err
	})
}

// pollPatience bounds each wait for the page, generous for a loaded machine.
const pollPatience = 60 * time.Second

// waitText waits until the element's text contains want.
func waitText(sel, want string) chromedp.Action[chromedp.Void] {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, want)
	return wrap(fmt.Sprintf("%s to say %q", sel, want), chromedp.Poll[chromedp.Void](js,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(pollPatience)))
}

// waitCount waits until at least n elements match sel.
func waitCount(sel string, n int) chromedp.Action[chromedp.Void] {
	js := fmt.Sprintf(`document.querySelectorAll(%q).length >= %d`, sel, n)
	return wrap(fmt.Sprintf("%d of %s", n, sel), chromedp.Poll[chromedp.Void](js,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(pollPatience)))
}

func wrap(what string, a chromedp.Action[chromedp.Void]) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := a(ctx, t); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		return nil
	})
}

// saveScreenshot writes png to RAFTLOCK_UI_SCREENSHOT when set, else to the
// test's temporary directory.
func saveScreenshot(t *testing.T, png []byte) {
	path := os.Getenv("RAFTLOCK_UI_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "console.png")
	}
	if !strings.HasSuffix(path, ".png") {
		t.Fatalf("RAFTLOCK_UI_SCREENSHOT=%q: want a .png path", path)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}
