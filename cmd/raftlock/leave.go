package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// leaveTimeout bounds `raftlock leave`: the agent waits a few election
// timeouts for a leader and then one request timeout for the removal.
const leaveTimeout = time.Minute

// runLeave is `raftlock leave`: the explicit way to take a member out of
// its cluster for good, where SIGINT and SIGTERM only stop it.
func runLeave(args []string, stdout, stderr io.Writer) int {
	fs, agent := newClientFlagSet("leave", "[-addr URL]",
		"Asks the agent at -addr to leave its cluster for good and stop. The leader removes it\n"+
			"from the raft configuration (handing leadership over first if it leads); the agent\n"+
			"then exits with status 0. Unlike SIGINT and SIGTERM, which only stop a member, this\n"+
			"shrinks the cluster: a voter that leaves is replaced by a non-voter if there is one.\n"+
			"Do not start the agent again on its data dir afterwards: a node that finds it is no\n"+
			"longer a member asks to be added back. To reuse the host for a new member, empty its\n"+
			"-data-dir and start it with -join.\n\n"+
			"-addr must name exactly one agent: the one to take out.\n\n"+
			"Exit status 0 once the agent left; 69 when it cannot be reached or no leader could\n"+
			"remove it (it then stays a member and keeps running); 77 when it refuses the token;\n"+
			"2 for usage errors; 1 otherwise."+connectHelp,
		nil, stdout, stderr)
	if code := fs.parseArgs(args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return fs.usagef("unexpected argument %q: the agent to take out is -addr (see raftlock leave -h)", fs.Arg(0))
	}
	if addrs := splitList(agent.addr); len(addrs) != 1 {
		return fs.usagef("-addr %q names %d agents; name exactly the one to take out", agent.addr, len(addrs))
	}
	client, code := agent.connect()
	if code >= 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	if err := client.Leave(ctx); err != nil {
		return fs.fail(err)
	}
	fmt.Fprintf(stdout, "the agent at %s left the cluster and is stopping\n", agent.addr)
	return exitOK
}
