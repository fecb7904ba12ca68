// Command raftlock runs a raftlock node (agent) and talks to one (lock,
// status, locks, release, leave).
//
//	raftlock agent -dev                          a single-node agent for trying things out
//	raftlock lock [-ttl 30s] [-wait 0] KEY -- COMMAND [ARG...]
//	raftlock status                              the cluster and its leader at a glance
//	raftlock locks [PREFIX]                      held locks
//	raftlock release -owner HEX KEY              release a lock whose owner you know
//	raftlock leave -addr URL                     take a member out of its cluster for good
//
// Every flag can also be set by an environment variable, named in its help
// (RAFTLOCK_…); a flag on the command line wins over the environment.
//
// # Security
//
// An agent started with no security flags speaks plain TCP to its peers and
// plain HTTP to clients, and takes no token: anyone who reaches its ports
// can join the cluster or take every lock. That is what -dev does, on
// 127.0.0.1 only. Elsewhere, like etcd's and Consul's:
//
//   - -peer-cert-file, -peer-key-file, -peer-ca-file: mutual TLS 1.3 between
//     nodes. A node accepts a peer, and dials one, only with a certificate
//     the peer CA signed; host names and IPs are not checked (see peerTLS for
//     why), so the peer CA must sign this cluster's nodes and nothing else.
//   - -cert-file, -key-file: HTTPS for the API; -client-ca-file also requires
//     client certificates of that CA (like etcd's --client-cert-auth).
//   - -http-token or -http-token-file (RAFTLOCK_HTTP_TOKEN): every API request
//     but /healthz must carry the token (see package api).
//
// The client commands take -addr with https:// and -ca-file
// (RAFTLOCK_CACERT), -client-cert and -client-key (RAFTLOCK_CLIENT_CERT,
// RAFTLOCK_CLIENT_KEY), -token or -token-file (RAFTLOCK_HTTP_TOKEN,
// RAFTLOCK_HTTP_TOKEN_FILE). -addr may list several agents, comma-separated;
// a request that cannot reach one goes to the next. A refused token exits
// with status 77.
//
// Certificates and tokens are read when a command starts; an agent must be
// restarted to change them.
package main

import (
	"fmt"
	"io"
	"os"
)

// Exit statuses of the binary, stable for scripts. A command run by
// `raftlock lock` exits with its own status, which may collide with these;
// the one-line message on stderr tells them apart.
const (
	exitOK          = 0
	exitError       = 1  // anything not covered below
	exitUsage       = 2  // wrong flags or arguments
	exitUnavailable = 69 // the agent cannot be reached, or has no leader (EX_UNAVAILABLE)
	exitHeld        = 75 // the lock is held by another owner and we may not wait any longer (EX_TEMPFAIL)
	exitLost        = 76 // the lock was lost while the command ran; the command was stopped
	exitDenied      = 77 // the agent refused our token (missing or wrong) (EX_NOPERM)
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"agent", "run a raftlock node (a cluster member serving the HTTP API)", runAgent},
		{"lock", "run a command while holding a lock", runLock},
		{"status", "show the cluster and its leader", runStatus},
		{"locks", "list held locks, optionally by key prefix", runLocks},
		{"release", "release a lock by key and owner", runRelease},
		{"leave", "take an agent's node out of its cluster for good, and stop it", runLeave},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "raftlock: unknown command %q (see raftlock -h)\n", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "raftlock: a distributed lock service built on Raft.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: raftlock COMMAND [FLAGS] [ARGS]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run raftlock COMMAND -h for its flags. Start with: raftlock agent -dev")
}
