package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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
	fs, agent := newClientFlagSet("status", "[-addr URL,...] [-json]", "Shows the agent's cluster: its role, the leader and the members, with the URL of\n"+
		"each one's API (its -advertise-http) and the raftlock version and command level each\n"+
		"runs once members have told each other (a member below the leader's level is marked:\n"+
		"the leader refuses newer commands until it is upgraded), the cluster's failure\n"+
		"tolerance and readiness (GET /readyz), each member's health as the leader judges it\n"+
		"(any agent shows it as the leader reports it; asked of an agent too old to, status asks\n"+
		"the leader too, at its API address) with a ROLE of failed or left for a member that is\n"+
		"gone, and, asked of the leader, the last changes its reconciler made to the membership.\n"+
		"-json prints the agent's answer (GET /v1/cluster) as JSON instead."+connectHelp, nil, stdout, stderr)
	asJSON := fs.Bool("json", false, "print the cluster status as JSON (GET /v1/cluster's answer)")
	if code := fs.parseArgs(args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return fs.usagef("unexpected argument %q", fs.Arg(0))
	}
	client, code := agent.connect()
	if code >= 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	st, err := client.Cluster(ctx)
	if err != nil {
		return fs.fail(err)
	}
	if *asJSON {
		b, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return fs.fail(err)
		}
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
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
	if q := st.Quotas; q != nil {
		fmt.Fprintf(stdout, "quotas:  %s\n", quotaLine(*q))
	}
	if h := st.Health; h != nil {
		fmt.Fprintf(stdout, "health:  failure tolerance %d (%d of %d voters healthy)\n", h.FailureTolerance, h.HealthyVoters, h.Voters)
	} else {
		fmt.Fprintln(stdout, "health:  unknown (no recent report from a leader)")
	}
	if r := st.Readiness; r != nil {
		if r.Ready {
			fmt.Fprintln(stdout, "ready:   yes (the cluster would survive losing one more node)")
		} else {
			fmt.Fprintf(stdout, "ready:   no: %s\n", r.Reason)
		}
	}
	cfg, err := agent.clientConfig()
	if err != nil {
		return fs.usagef("%v", err)
	}
	judge, unjudged := leaderView(ctx, cfg, st)
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tSUFFRAGE\tROLE\tGOSSIP\tAPI\tHEALTH\tVERSION\tLEVEL")
	leaderLevel := leaderLevelOf(st.Members)
	for _, m := range st.Members {
		m = judgedBy(m, judge)
		apiAddr := m.APIAddr
		if apiAddr == "" {
			apiAddr = "-" // not told (yet), or the member knows no dialable address
		}
		gossip := m.Gossip
		if gossip == "" {
			gossip = "-" // gossip off, or the member is not (yet) in it
		}
		version, level := buildCells(m, leaderLevel)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Address, m.Suffrage, roleCell(m), gossip, apiAddr, healthCell(m), version, level)
	}
	tw.Flush()
	if unjudged != "" {
		fmt.Fprintf(stdout, "\nHEALTH is the leader's judgement, which could not be read: %s\n", unjudged)
	}
	printBelowLeader(stdout, st.Members, leaderLevel)
	if len(st.ReconcileActions) > 0 {
		fmt.Fprintln(stdout, "\nrecent membership changes by this node's reconciler:")
		for _, a := range st.ReconcileActions {
			fmt.Fprintf(stdout, "  %s  %s %s: %s\n", a.At.Local().Format(time.DateTime), a.Action, a.ID, a.Reason)
		}
	}
	return exitOK
}

// runLocks is `raftlock locks [PREFIX]`: the held locks, in key order.
func runLocks(args []string, stdout, stderr io.Writer) int {
	fs, agent := newClientFlagSet("locks", "[-addr URL,...] [PREFIX]", "Lists held locks (never their owners), optionally only keys starting with PREFIX,\n"+
		"with their kind (mutex, semaphore/N, rwlock/read or rwlock/write) and number of holders.\n"+
		"A semaphore's or rwlock's holds follow their key, one line each (token, time left, read or\n"+
		"write, metadata); a key held as one of a multi-key set is followed by the set's keys."+connectHelp, nil, stdout, stderr)
	if code := fs.parseArgs(args); code >= 0 {
		return code
	}
	if fs.NArg() > 1 {
		return fs.usagef("at most one PREFIX")
	}
	client, code := agent.connect()
	if code >= 0 {
		return code
	}
	req := lock.ListRequest{Prefix: fs.Arg(0), Limit: 1000}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		page, err := client.List(ctx, req)
		cancel()
		if err != nil {
			if req.After != "" {
				tw.Flush() // the pages listed before this one
			}
			return fs.fail(err)
		}
		if req.After == "" {
			// Not before the first answer: a refused token, or an agent
			// that cannot answer, leaves stdout empty.
			fmt.Fprintln(tw, "KEY\tTOKEN\tREMAINING\tWAITERS\tKIND\tHOLDERS\tMETADATA")
		}
		for _, l := range page {
			meta := "-"
			switch {
			case l.Delayed:
				meta = lockDelayText
			case l.Metadata != "":
				meta = printableKey(l.Metadata)
			}
			fmt.Fprintf(tw, "%s\t%d\t%v\t%d\t%s\t%d\t%s\n", printableKey(l.Key), l.Token, l.Remaining.Round(time.Millisecond), l.Waiters, kindColumn(l.KeyInfo), l.Holders, meta)
			printHolds(tw, l.KeyInfo)
		}
		if len(page) < req.Limit {
			break
		}
		req.After = page[len(page)-1].Key
	}
	tw.Flush()
	return exitOK
}

// printHolds writes, under a key's line of raftlock locks, one line per
// hold of a semaphore or rwlock (its own token, time left, mode and
// metadata), how many holds the answer left out, and a set's keys.
func printHolds(tw io.Writer, info lock.KeyInfo) {
	for _, h := range info.Holds {
		fmt.Fprintf(tw, "  hold\t%d\t%v\t\t%s\t\t%s\n", h.Token, h.Remaining.Round(time.Millisecond), holdMode(info.Kind, h), holdMetadata(h))
	}
	if more := info.Holders - len(info.Holds); len(info.Holds) > 0 && more > 0 {
		fmt.Fprintf(tw, "  (%d more holds not listed)\t\t\t\t\t\t\n", more)
	}
	if len(info.SetKeys) > 0 {
		fmt.Fprintf(tw, "  set\t\t\t\t\t\t%s\n", setKeysText(info.SetKeys))
	}
}

// holdMode is a hold's KIND cell: read or write for a rwlock's hold (none
// for a slot a lock-delay keeps: nobody holds it).
func holdMode(kind lock.Kind, h lock.HoldInfo) string {
	switch {
	case kind != lock.KindRWLock || h.Delayed:
		return "-"
	case h.Shared:
		return "read"
	}
	return "write"
}

// holdMetadata is a hold's METADATA cell; a slot a lock-delay keeps says so.
func holdMetadata(h lock.HoldInfo) string {
	switch {
	case h.Delayed:
		return lockDelayText
	case h.Metadata == "":
		return "-"
	}
	return printableKey(h.Metadata)
}

// lockDelayText is the METADATA cell of a key or slot nobody holds, which
// an expired session's lock-delay keeps free.
const lockDelayText = "(lock-delay: free when it runs out)"

// setKeysText is a multi-key set's keys, printable, space-separated.
func setKeysText(keys []string) string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = printableKey(k)
	}
	return strings.Join(out, " ")
}

// kindColumn is the KIND column of raftlock locks: mutex, semaphore/N,
// rwlock/read or rwlock/write.
func kindColumn(info lock.KeyInfo) string {
	switch info.Kind {
	case lock.KindSemaphore:
		return fmt.Sprintf("semaphore/%d", info.Limit)
	case lock.KindRWLock:
		if info.Shared {
			return "rwlock/read"
		}
		return "rwlock/write"
	}
	return info.Kind.String()
}

// runRelease is `raftlock release -owner HEX KEY`.
func runRelease(args []string, stdout, stderr io.Writer) int {
	fs, agent := newClientFlagSet("release", "[-addr URL,...] (-owner HEX | -force) KEY",
		"Releases KEY held by the owner given (32 hex digits, as the HTTP API returned it).\n"+
			"Exit status 0 when released, 1 when that owner did not hold KEY.\n\n"+
			"-force releases KEY whoever holds it and hands it to the next waiter, for a lock whose\n"+
			"holder is gone: it needs a token with the admin right on KEY, and the agent logs who\n"+
			"did it. The former holder finds out at its next extend or release; whatever the lock\n"+
			"protects must check fencing tokens. Exit status 1 when nobody held KEY."+connectHelp,
		map[string]string{"owner": "RAFTLOCK_OWNER"}, stdout, stderr)
	fs.leadingArgs = 1 // KEY -owner HEX works too
	ownerText := fs.String("owner", "", "the lock's owner token, 32 hex digits: the \"owner\" of the HTTP API's acquire answer")
	force := fs.Bool("force", false, "release KEY whoever holds it (an admin's tool for a lock whose holder is gone; needs the admin right on KEY)")
	if code := fs.parseArgs(args); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		return fs.usagef("want exactly one KEY (see raftlock release -h)")
	}
	if *force {
		if *ownerText != "" {
			return fs.usagef("give -owner or -force, not both: -force releases KEY whoever holds it")
		}
		return forceRelease(agent, fs.Arg(0), stdout, stderr)
	}
	if *ownerText == "" {
		return fs.usagef("-owner is required (or RAFTLOCK_OWNER): the 32 hex digits of \"owner\" in the HTTP API's acquire answer " +
			"that took the lock. A lock taken by 'raftlock lock' is released by it when its command exits; " +
			"one whose owner is unknown is free once its lease runs out ('raftlock locks' shows how long)")
	}
	owner, err := lock.ParseOwner(*ownerText)
	if err != nil {
		return fs.usagef("-owner: %v", err)
	}
	key := fs.Arg(0)
	if err := lock.ValidateRelease(key, owner); err != nil {
		return fs.usagef("%v", err)
	}
	client, code := agent.connect()
	if code >= 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	released, err := client.Release(ctx, key, owner)
	if err != nil {
		return fs.fail(err)
	}
	if !released {
		fmt.Fprintf(stderr, "raftlock release: %q is not held by that owner\n", key)
		return exitError
	}
	fmt.Fprintf(stdout, "released %q\n", key)
	return exitOK
}

// forceRelease is release -force.
func forceRelease(agent *clientFlags, key string, stdout, stderr io.Writer) int {
	fs := agent.fs
	if err := lock.ValidateKey(key); err != nil {
		return fs.usagef("%v", err)
	}
	client, code := agent.connect()
	if code >= 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	token, err := client.ForceRelease(ctx, key)
	switch {
	case errors.Is(err, lock.ErrNotHeld):
		fmt.Fprintf(stderr, "raftlock release: %q is not held by anyone\n", key)
		return exitError
	case err != nil:
		return fs.fail(err)
	}
	fmt.Fprintf(stdout, "released %q (its lease had token %d)\n", key, token)
	return exitOK
}

// reportError prints err in one line and picks the exit status.
func reportError(stderr io.Writer, cmd string, err error) int {
	if errors.Is(err, api.ErrUnauthorized) {
		fmt.Fprintf(stderr, "raftlock %s: %v (set -token, -token-file or RAFTLOCK_HTTP_TOKEN)\n", cmd, err)
		return exitDenied
	}
	if errors.Is(err, api.ErrPermissionDenied) {
		fmt.Fprintf(stderr, "raftlock %s: %v (use a token whose rules give that right: the agent's -http-acl-file)\n", cmd, err)
		return exitDenied
	}
	if hint, ok := tlsConfigError(err); ok {
		fmt.Fprintf(stderr, "raftlock %s: %v (%s)\n", cmd, err, hint)
		return exitConfig
	}
	fmt.Fprintf(stderr, "raftlock %s: %v\n", cmd, err)
	if errors.Is(err, lock.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return exitUnavailable
	}
	return exitError
}

// tlsConfigError reports whether err is a TLS handshake that failed over
// configuration (certificates, or TLS spoken to a port that does not), which
// retrying cannot fix, and says what to check.
func tlsConfigError(err error) (hint string, ok bool) {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		record    tls.RecordHeaderError
		op        *net.OpError
	)
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &verify) && errors.As(verify.Err, &unknownCA):
		return "the agent's certificate is not signed by a CA we trust: set -ca-file or RAFTLOCK_CACERT to its CA", true
	case errors.As(err, &hostname):
		return "the agent's certificate does not name -addr's host: use a name it has, or -tls-server-name", true
	case errors.As(err, &invalid), errors.As(err, &verify):
		return "the agent's certificate is not valid: see the agent's -cert-file", true
	case errors.As(err, &record),
		// net/http's own words for a RecordHeaderError that looks like HTTP.
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "the agent did not answer TLS: is -addr's port plain HTTP? then use http://", true
	case errors.Is(err, lock.ErrUnavailable) && clientCertRequested.Load() && !clientCertSent.Load():
		// It asked for a certificate we do not have, and the connection
		// ended: its alert (certificate required) crossed its hang-up.
		return "the agent requires a client certificate: set -client-cert and -client-key (RAFTLOCK_CLIENT_CERT, RAFTLOCK_CLIENT_KEY)", true
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert from the agent: it refused our certificate, or its absence.
		return "the agent refused the TLS handshake: it may require a client certificate its -client-ca-file signed (-client-cert and -client-key)", true
	}
	return "", false
}

// connectHelp ends the -h text of every command that talks to an agent.
const connectHelp = "\n\nConnecting: -addr names the agent (http:// or https://), or several, comma-separated,\n" +
	"tried in turn while one cannot be reached. For an HTTPS agent: -ca-file to trust its\n" +
	"certificate, -client-cert and -client-key when it requires one. For an agent that\n" +
	"requires a token: RAFTLOCK_HTTP_TOKEN or -token-file (exit status 77 when refused).\n" +
	"Exit status 78: a TLS configuration error (a certificate refused by either side, or\n" +
	"https:// to a plain HTTP port), which retrying does not fix."

// printableKey quotes keys a terminal would mangle.
func printableKey(k string) string {
	if strings.IndexFunc(k, func(r rune) bool { return r < ' ' || r == 0x7f || r == '\uFFFD' }) >= 0 {
		return fmt.Sprintf("%q", k)
	}
	return k
}
