package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/apiserver"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/internal/quietlog"
)

// agentCommand is `raftlock agent`: loadAgentConfig, then runAgent.
func agentCommand(args []string, stdout, stderr io.Writer) int {
	cfg, err := loadAgentConfig(args, os.LookupEnv)
	if err != nil {
		return reportLoadError("agent", err, stdout, stderr)
	}
	return runAgent(context.Background(), cfg, stdout, stderr)
}

// agentRun is a running agent: what runAgent's steps share.
type agentRun struct {
	agentConfig
	stdout, stderr io.Writer
	logger         hclog.Logger
	recentLogs     *apiserver.LogRing
	httpLn         net.Listener
	node           *cluster.Node
	handler        *apiserver.Handler
	srv            *http.Server
	serveErr       chan error    // the HTTP server stopped
	leftOnRequest  chan struct{} // closed once the node left on POST /v1/leave
	// undo is what to do when runAgent returns, in reverse order.
	undo []func()
}

// runAgent starts the node and its HTTP API as cfg says, and runs them until
// a signal (SIGINT, SIGTERM), a leave request, ctx's end or a failure stops
// them; it returns the exit status. Its output: a line or two on stdout once
// serving, the log and any error on stderr.
func runAgent(ctx context.Context, cfg agentConfig, stdout, stderr io.Writer) int {
	a := &agentRun{agentConfig: cfg, stdout: stdout, stderr: stderr}
	defer func() {
		for i := len(a.undo) - 1; i >= 0; i-- {
			a.undo[i]()
		}
	}()
	// The last lines also go to a ring, for GET /v1/agent/logs (raftlock debug).
	a.recentLogs = apiserver.NewLogRing(recentLogLines)
	a.logger = hclog.New(&hclog.LoggerOptions{Name: "raftlock", Level: a.level, Output: io.MultiWriter(stderr, a.recentLogs)})
	a.cluster.Logger = a.logger
	a.warnSharedSecretFiles(a.logger)
	for _, step := range []func() int{a.makeDevDataDir, a.listenHTTP, a.startNode} {
		if code := step(); code >= 0 {
			return code
		}
	}
	a.newHandler()
	a.reloadTokensOnSIGHUP()
	a.serveHTTP()

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	code, left := a.waitForStop(ctx, signals)
	a.shutdown(signals, left)
	return code
}

// fail reports, in one line on stderr, why the agent stops before it
// serves, and returns code, the exit status.
func (a *agentRun) fail(code int, format string, args ...any) int {
	fmt.Fprintf(a.stderr, "raftlock agent: "+format+"\n", args...)
	return code
}

// makeDevDataDir makes -dev's data dir, removed when the agent stops.
func (a *agentRun) makeDevDataDir() int {
	if !a.dev {
		return -1
	}
	dir, err := os.MkdirTemp("", "raftlock-dev-")
	if err != nil {
		return a.fail(exitUsage, "%s", agentError(err))
	}
	a.undo = append(a.undo, func() { os.RemoveAll(dir) })
	a.cluster.DataDir = dir
	return -1
}

// listenHTTP takes the HTTP port, first: a port in use is a usage error to
// report before a node joins anything. The port bound tells the API's URL
// when -advertise-http does not, and the host names the API answers to.
func (a *agentRun) listenHTTP() int {
	var err error
	if a.httpLn, err = net.Listen("tcp", a.httpAddr); err != nil {
		return a.fail(exitUsage, "-http %s: %v", a.httpAddr, err)
	}
	if a.cluster.APIAddr == "" {
		a.cluster.APIAddr, err = apiURL("", a.httpLn.Addr(), a.cluster.AdvertiseAddr, a.cluster.BindAddr, a.sec.api != nil)
		if err != nil {
			a.httpLn.Close()
			return a.fail(exitUsage, "%v", err)
		}
	}
	a.hosts = append(a.hosts, ownHostNames(a.httpAddr, a.cluster.APIAddr, a.cluster.AdvertiseAddr, a.sec.api)...)
	return -1
}

// startNode starts the cluster node: it opens its data dir, binds -bind and
// joins or bootstraps its cluster.
func (a *agentRun) startNode() int {
	var err error
	if a.node, err = cluster.New(a.cluster); err == nil {
		return -1
	}
	a.httpLn.Close()
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return a.fail(exitUsage, "-bind %s: the port is in use (another agent on this host?): choose another -bind, or stop what holds it", a.cluster.BindAddr)
	case errors.Is(err, cluster.ErrInvalidConfig):
		return a.fail(exitUsage, "%s", agentError(err))
	}
	return a.fail(exitError, "%s", agentError(err))
}

// newHandler makes the API's handler, with POST /v1/leave (raftlock leave):
// once the node has left, the agent stops as it does on a signal.
func (a *agentRun) newHandler() {
	a.leftOnRequest = make(chan struct{})
	var leaveOnce sync.Once
	leave := func(ctx context.Context) error {
		a.logger.Info("asked to leave the cluster")
		if err := a.node.Leave(ctx); err != nil {
			a.logger.Warn("leaving the cluster failed; still running, and a member or maybe one (the error says which)", "error", err, "what_to_do", "run raftlock leave again once a leader is known")
			return err
		}
		a.logger.Info("left the cluster; stopping (started again on its data dir, it would ask to be added back)")
		leaveOnce.Do(func() { close(a.leftOnRequest) })
		return nil
	}
	if a.dev {
		leave = nil // a cluster of one has nobody to leave to: 501
	}
	// Repeated HTTP warnings and errors (a client retrying a refused
	// request, accept failing while file descriptors run out) come as one
	// line per window with repeated=N.
	httpQuiet := quietlog.New(quietlog.DefaultWindow, nil)
	a.undo = append(a.undo, func() { httpQuiet.Close() })
	httpLog := httpQuiet.Wrap(a.logger.Named("http"))
	a.handler = apiserver.NewHandler(a.node, apiserver.Config{Cluster: apiserver.NodeStatus(a.node), Logger: httpLog, Token: a.sec.token, Leave: leave,
		AllowedOrigins: a.origins, AllowedHosts: a.hosts, Tokens: a.tokens,
		EnablePprof: a.enablePprof, RecentLogs: a.recentLogs, AgentConfig: effectiveConfig(a.flagValues, a.cluster, a.node),
		MaxWatchers: httpWatchers(a.maxHTTPConns)})
	if a.tokens != nil {
		a.logger.Info("API tokens loaded", "file", a.httpACLFile, "names", a.tokens.Names())
		warnIfShared("-http-acl-file", a.httpACLFile, a.logger)
	}
	a.srv = apiserver.NewServer(a.httpLn.Addr().String(), a.handler)
	a.srv.ErrorLog = log.New(httpServerLog{httpLog}, "", 0)
}

// reloadTokensOnSIGHUP reloads -http-acl-file on each SIGHUP until the
// agent stops.
func (a *agentRun) reloadTokensOnSIGHUP() {
	reloads := make(chan os.Signal, 1)
	signal.Notify(reloads, syscall.SIGHUP)
	reloadDone := make(chan struct{})
	a.undo = append(a.undo, func() { signal.Stop(reloads) }, func() { close(reloadDone) })
	go func() {
		for {
			select {
			case <-reloads:
				reloadTokens(a.httpACLFile, a.sec.token, a.handler, a.logger)
			case <-reloadDone:
				return
			}
		}
	}()
}

// serveHTTP serves the API, and says where the agent serves what.
func (a *agentRun) serveHTTP() {
	// Capped first, so that a connection waiting for a slot costs no file
	// descriptor; net/http's own error answers become JSON on each one.
	servedLn := apiserver.JSONErrorListener(a.handler.LimitListener(a.httpLn, a.maxHTTPConns))
	scheme := "http"
	a.serveErr = make(chan error, 1)
	if a.sec.api != nil {
		scheme = "https"
		a.srv.TLSConfig = a.sec.api
		go func() { a.serveErr <- a.srv.ServeTLS(servedLn, "", "") }()
	} else {
		go func() { a.serveErr <- a.srv.Serve(servedLn) }()
	}

	fmt.Fprintf(a.stdout, "raftlock agent %s: raft on %s, HTTP API on %s://%s, data in %s (%s log)\n",
		a.node.ID(), a.node.Addr(), scheme, a.httpLn.Addr(), a.cluster.DataDir, a.node.Stats().LogStore)
	if a.cluster.GossipBindAddr != "" {
		fmt.Fprintf(a.stdout, "raftlock agent %s: gossip on %s, cluster name %q\n", a.node.ID(), a.node.GossipAddr(), a.cluster.ClusterName)
	}
	a.logger.Info("web console", "url", strings.TrimSuffix(a.cluster.APIAddr, "/")+"/ui/", "pprof", a.enablePprof)
}

// waitForStop waits for what stops the agent, and returns the exit status it
// calls for; left says the node left on request, and is closed.
func (a *agentRun) waitForStop(ctx context.Context, signals <-chan os.Signal) (code int, left bool) {
	// The node closes by itself when its state machine meets a committed
	// entry this build cannot read (cluster.ErrHalted): it stops rather
	// than skip it, and so does the agent, with the node's message. (A
	// node that left closes too, without an Err.)
	halted := make(chan error, 1)
	go func() {
		<-a.node.Done()
		if err := a.node.Err(); err != nil {
			halted <- err
		}
	}()
	select {
	case sig := <-signals:
		a.logger.Info("stopping", "signal", sig.String(), "leave", a.leaveOnTerminate && !a.dev)
	case <-ctx.Done():
		a.logger.Info("stopping", "reason", context.Cause(ctx), "leave", a.leaveOnTerminate && !a.dev)
	case <-a.leftOnRequest:
		return exitOK, true
	case err := <-a.serveErr:
		a.logger.Error("HTTP server stopped; the agent stops", "error", err, "what_to_do", "fix what the error says and start the agent again")
		return exitError, false
	case err := <-halted:
		a.logger.Error("the node stopped; the agent stops", "error", err)
		fmt.Fprintf(a.stderr, "raftlock agent: %v\n", err)
		return exitError, false
	}
	return exitOK, false
}

// shutdown stops the API and the node, within -shutdown-grace; a second
// signal cuts it short. With -leave-on-terminate the node leaves its cluster
// first, unless it left already.
func (a *agentRun) shutdown(signals <-chan os.Signal, left bool) {
	ctx, cancel := context.WithTimeout(context.Background(), a.shutdownGrace)
	defer cancel()
	go func() {
		select {
		case <-signals:
			cancel()
		case <-ctx.Done():
		}
	}()
	closedEarly := drainHTTP(ctx, a.srv, a.handler, a.node, left, a.logger)
	switch {
	case left || !a.leaveOnTerminate || a.dev || a.node.Err() != nil:
	case closedEarly:
		a.logger.Warn("-leave-on-terminate: no leader to remove this node; stopping as a member",
			"what_to_do", "start it again and run raftlock leave on it once its cluster has a leader")
	default:
		// Leave fails within a few election timeouts when no leader can
		// remove the node; it then stays a member, and closes below.
		if err := a.node.Leave(ctx); err != nil {
			a.logger.Warn("leaving the cluster failed; stopping, as a member or maybe one (the error says which)", "error", err,
				"what_to_do", "start it again and run raftlock leave on it once its cluster has a leader")
		}
	}
	if err := a.node.Close(); err != nil { // after Leave, a no-op
		a.logger.Warn("closing the node", "error", err)
	}
}

// drainHTTP stops the API taking requests and lets those in flight finish,
// until ctx ends. A request can only finish while the node knows a leader:
// while it knows none, drainHTTP closes the node at once, which answers the
// requests in flight (503 closed) instead of holding the stop for the whole
// grace, so that a leaderless node stops promptly and can be started again
// on its ports at once. closed says the node is closed already (it left).
// It reports whether it closed the node.
func drainHTTP(ctx context.Context, srv *http.Server, handler *apiserver.Handler, node *cluster.Node, closed bool, logger hclog.Logger) (closedNode bool) {
	drained := make(chan error, 1)
	// The Go clients' streams are told to go away as Shutdown begins, and
	// answered like requests in flight; net/http does not wait for them.
	go func() { drained <- errors.Join(srv.Shutdown(ctx), handler.CloseStreams(ctx)) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if id, _ := node.Leader(); id == "" && !closed && !closedNode {
			logger.Info("no leader known: closing the node now rather than waiting for requests in flight")
			if err := node.Close(); err != nil {
				logger.Warn("closing the node", "error", err)
			}
			closedNode = true
		}
		select {
		case err := <-drained:
			if err != nil {
				srv.Close()
			}
			return closedNode
		case <-tick.C:
		}
	}
}

// httpServerLog takes net/http's server log lines into the agent's log:
// refused TLS handshakes (a client without a certificate, a port scan, a
// TCP probe) at debug, since the client is told why and they would flood
// the log; failing accepts as one error message whatever the retry delay
// (so that a quieter counts them); the rest (a handler's panic) as errors.
type httpServerLog struct{ log hclog.Logger }

func (l httpServerLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	switch {
	case strings.HasPrefix(msg, "http: TLS handshake error"):
		l.log.Debug(msg)
	case strings.HasPrefix(msg, "http: Accept error: "):
		// net/http retries with a growing delay; one message for every
		// occurrence lets the quieter count them.
		text := strings.TrimPrefix(msg, "http: Accept error: ")
		if i := strings.LastIndex(text, "; retrying in "); i >= 0 {
			text = text[:i]
		}
		l.log.Error("accepting HTTP connections failed; retrying", "error", text,
			"what_to_do", "if it says too many open files, raise the open-files limit (ulimit -n) or find who holds the connections")
	default:
		l.log.Error(msg)
	}
	return len(p), nil
}

// reloadTokens is what SIGHUP does: read -http-acl-file again and put it in
// force. A file that cannot be read or is not valid changes nothing: the
// tokens in force stay, and the log says why. It reports whether the new
// tokens are in force.
func reloadTokens(path, shared string, handler *apiserver.Handler, logger hclog.Logger) bool {
	if path == "" {
		logger.Info("SIGHUP: no -http-acl-file to reload")
		return false
	}
	tokens, err := loadTokens(path, shared)
	if err == nil {
		err = handler.SetTokens(tokens)
	}
	if err != nil {
		logger.Error("SIGHUP: the token file was not reloaded; the tokens in force stay", "error", err,
			"what_to_do", "fix the file and send SIGHUP again")
		return false
	}
	logger.Info("SIGHUP: API tokens reloaded", "file", path, "names", tokens.Names())
	warnIfShared("-http-acl-file", path, logger)
	return true
}

// warnIfShared warns when users other than the agent's may read or write
// path, a file of secrets that flagName named: the one check of every
// secret file's mode.
func warnIfShared(flagName, path string, logger hclog.Logger) {
	fi, err := os.Stat(path)
	if err == nil && fi.Mode().Perm()&0o077 != 0 {
		logger.Warn("a file of secrets may be read by other users than the agent's", "flag", flagName, "file", path,
			"mode", fi.Mode().Perm().String(), "what_to_do", "chmod 600 it: whoever reads it can use its secrets")
	}
}

// httpWatchers is the API's bound on blocking queries: half the connection
// limit, so that watches never take every connection from lock traffic; no
// bound of its own without a connection limit (the node's -max-watchers
// still applies).
func httpWatchers(maxConns int) int {
	if maxConns <= 0 {
		return -1
	}
	return max(maxConns/2, 1)
}
