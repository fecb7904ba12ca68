package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// requestTimeout bounds one CLI request to an agent.
const requestTimeout = 10 * time.Second

// runStatus is `raftlock status`: this agent's view of the cluster.
func runStatus(args []string, stdout, stderr io.Writer) int {
	env := map[string]string{}
	fs := newFlagSet("status", "[-addr URL,...]", "Shows the agent's cluster: its role, the leader and the members, with the URL of\n"+
		"each one's API (its -advertise-http) once members have told each other."+connectHelp, stdout, stderr)
	agent := addClientFlags(fs, env)
	if code := parseFlags(fs, args, env, stderr); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "raftlock status: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	client, err := agent.newClient()
	if err != nil {
		fmt.Fprintf(stderr, "raftlock status: %v\n", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	st, err := client.Cluster(ctx)
	if err != nil {
		return reportError(stderr, "status", err)
	}
	leader := st.LeaderID
	if leader == "" {
		leader = "(none known)"
	} else if st.LeaderAddr != "" {
		leader += " at " + st.LeaderAddr
	}
	fmt.Fprintf(stdout, "node:    %s (%s)\nleader:  %s\nterm:    %d\nindex:   commit %d, applied %d\n",
		st.NodeID, st.Role, leader, st.Term, st.CommitIndex, st.AppliedIndex)
	if st.Locks != nil {
		fmt.Fprintf(stdout, "locks:   %d held, %d waiting\n", st.Locks.Held, st.Locks.Waiters)
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tSUFFRAGE\tROLE\tAPI")
	for _, m := range st.Members {
		role := "follower"
		if m.Leader {
			role = "leader"
		}
		apiAddr := m.APIAddr
		if apiAddr == "" {
			apiAddr = "-" // not told (yet), or the member knows no dialable address
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, m.Address, m.Suffrage, role, apiAddr)
	}
	tw.Flush()
	return exitOK
}

// runLocks is `raftlock locks [PREFIX]`: the held locks, in key order.
func runLocks(args []string, stdout, stderr io.Writer) int {
	env := map[string]string{}
	fs := newFlagSet("locks", "[-addr URL,...] [PREFIX]", "Lists held locks (never their owners), optionally only keys starting with PREFIX."+connectHelp, stdout, stderr)
	agent := addClientFlags(fs, env)
	if code := parseFlags(fs, args, env, stderr); code >= 0 {
		return code
	}
	if fs.NArg() > 1 {
		fmt.Fprintln(stderr, "raftlock locks: at most one PREFIX")
		return exitUsage
	}
	client, err := agent.newClient()
	if err != nil {
		fmt.Fprintf(stderr, "raftlock locks: %v\n", err)
		return exitUsage
	}
	req := lock.ListRequest{Prefix: fs.Arg(0), Limit: 1000}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTOKEN\tREMAINING\tWAITERS")
	for {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		page, err := client.List(ctx, req)
		cancel()
		if err != nil {
			tw.Flush()
			return reportError(stderr, "locks", err)
		}
		for _, l := range page {
			fmt.Fprintf(tw, "%s\t%d\t%v\t%d\n", printableKey(l.Key), l.Token, l.Remaining.Round(time.Millisecond), l.Waiters)
		}
		if len(page) < req.Limit {
			break
		}
		req.After = page[len(page)-1].Key
	}
	tw.Flush()
	return exitOK
}

// runRelease is `raftlock release -owner HEX KEY`.
func runRelease(args []string, stdout, stderr io.Writer) int {
	env := map[string]string{"owner": "RAFTLOCK_OWNER"}
	fs := newFlagSet("release", "[-addr URL,...] -owner HEX KEY",
		"Releases KEY held by the owner given (32 hex digits, as the HTTP API returned it).\n"+
			"Exit status 0 when released, 1 when that owner did not hold KEY."+connectHelp, stdout, stderr)
	agent := addClientFlags(fs, env)
	ownerText := fs.String("owner", "", "the lock's owner token, 32 hex digits")
	if code := parseFlags(fs, args, env, stderr); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "raftlock release: want exactly one KEY (see raftlock release -h)")
		return exitUsage
	}
	owner, err := lock.ParseOwner(*ownerText)
	if err != nil {
		fmt.Fprintf(stderr, "raftlock release: -owner: %v\n", err)
		return exitUsage
	}
	key := fs.Arg(0)
	if err := lock.ValidateRelease(key, owner); err != nil {
		fmt.Fprintf(stderr, "raftlock release: %v\n", err)
		return exitUsage
	}
	client, err := agent.newClient()
	if err != nil {
		fmt.Fprintf(stderr, "raftlock release: %v\n", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	released, err := client.Release(ctx, key, owner)
	if err != nil {
		return reportError(stderr, "release", err)
	}
	if !released {
		fmt.Fprintf(stderr, "raftlock release: %q is not held by that owner\n", key)
		return exitError
	}
	fmt.Fprintf(stdout, "released %q\n", key)
	return exitOK
}

// reportError prints err in one line and picks the exit status.
func reportError(stderr io.Writer, cmd string, err error) int {
	if errors.Is(err, api.ErrUnauthorized) {
		fmt.Fprintf(stderr, "raftlock %s: %v (set -token, -token-file or RAFTLOCK_HTTP_TOKEN)\n", cmd, err)
		return exitDenied
	}
	fmt.Fprintf(stderr, "raftlock %s: %v\n", cmd, err)
	if errors.Is(err, lock.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return exitUnavailable
	}
	return exitError
}

// connectHelp ends the -h text of every command that talks to an agent.
const connectHelp = "\n\nConnecting: -addr names the agent (http:// or https://), or several, comma-separated,\n" +
	"tried in turn while one cannot be reached. For an HTTPS agent: -ca-file to trust its\n" +
	"certificate, -client-cert and -client-key when it requires one. For an agent that\n" +
	"requires a token: RAFTLOCK_HTTP_TOKEN or -token-file (exit status 77 when refused)."

// printableKey quotes keys a terminal would mangle.
func printableKey(k string) string {
	if strings.IndexFunc(k, func(r rune) bool { return r < ' ' || r == 0x7f || r == '\uFFFD' }) >= 0 {
		return fmt.Sprintf("%q", k)
	}
	return k
}
