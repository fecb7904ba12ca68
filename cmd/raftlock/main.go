// Command raftlock runs a raftlock node (agent) and talks to one (lock,
// status, locks, release, leave).
//
//	raftlock agent -dev                          a single-node agent for trying things out
//	raftlock lock [-ttl 30s] [-wait 0] KEY -- COMMAND [ARG...]
//	raftlock status [-json]                      the cluster, its leader, each member's version
//	raftlock locks [PREFIX]                      held locks
//	raftlock watch [-prefix] [-json] KEY         a line at each change of KEY (or of the keys under it)
//	raftlock release -owner HEX KEY              release a lock whose owner you know
//	raftlock release -force KEY                  release a lock whoever holds it (admin right)
//	raftlock leave -addr URL                     take a member out of its cluster for good
//	raftlock debug -addr URL -o FILE.tar.gz      a bundle for a bug report (status, config, log, goroutines)
//	raftlock version                             the version, Go version and commit (also -version)
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
//     but /healthz, /readyz and the console's files under /ui/ must carry
//     the token (see docs/http.md).
//   - -http-acl-file (RAFTLOCK_HTTP_ACL_FILE): named tokens with rights
//     (read, lock, admin, deny) per key prefix, the longest matching prefix
//     deciding, as Consul's key_prefix rules do; reloaded on SIGHUP.
//
// The client commands take -addr with https:// and -ca-file
// (RAFTLOCK_CACERT), -client-cert and -client-key (RAFTLOCK_CLIENT_CERT,
// RAFTLOCK_CLIENT_KEY), -token or -token-file (RAFTLOCK_HTTP_TOKEN,
// RAFTLOCK_HTTP_TOKEN_FILE). -addr may list several agents, comma-separated;
// a request that cannot reach one goes to the next. A refused token, or one
// without the right the request needs, exits with status 77.
//
// Certificates and tokens are read when a command starts; an agent must be
// restarted to change them, except -http-acl-file, which SIGHUP reloads.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
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
	exitLost        = 76 // the lock was lost while the command ran; the command was stopped, or had ended by itself
	exitDenied      = 77 // the agent refused our token (missing, wrong, or without the right) (EX_NOPERM)
	// exitConfig: a configuration error a retry cannot fix: a TLS handshake
	// failed over certificates (unknown CA, missing or rejected client
	// certificate, wrong host name) or https:// named a plain HTTP port
	// (EX_CONFIG). Distinct from 69 so that scripts retrying an unreachable
	// agent do not retry this forever.
	exitConfig = 78
	// exitUnknownCommand: no such command, as a shell says of one.
	exitUnknownCommand = 127
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"agent", "run a raftlock node (a cluster member serving the HTTP API)", agentCommand},
		{"lock", "run a command while holding a lock", lockCommand},
		{"status", "show the cluster and its leader", runStatus},
		{"locks", "list held locks, optionally by key prefix", runLocks},
		{"watch", "print a key's (or a prefix's) state at each change, like consul watch", runWatch},
		{"release", "release a lock by key and owner", runRelease},
		{"leave", "take an agent's node out of its cluster for good, and stop it", runLeave},
		{"debug", "collect an agent's status, config, recent log and goroutines into a bundle", runDebug},
		{"version", "print the version of raftlock, and the Go it was built with", runVersion},
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
	case "-version", "--version":
		return runVersion(args[1:], stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	names := make([]string, 0, len(commands()))
	for _, c := range commands() {
		names = append(names, c.name)
	}
	fmt.Fprintf(stderr, "raftlock: unknown command %q; the commands are %s (see raftlock -h)\n", args[0], strings.Join(names, ", "))
	return exitUnknownCommand
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
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Exit status, for scripts: 0 done; 1 other errors; 2 wrong flags or arguments;")
	fmt.Fprintln(w, "69 no agent or leader answers (worth retrying); 75 the lock is held; 76 the lock")
	fmt.Fprintln(w, "was lost while COMMAND ran; 77 the agent refused the token; 78 a TLS configuration")
	fmt.Fprintln(w, "error a retry cannot fix (a certificate refused by either side, https:// to an")
	fmt.Fprintln(w, "HTTP port); 127 unknown command. `raftlock lock` otherwise exits with COMMAND's")
	fmt.Fprintln(w, "status. raftlock -version prints the version.")
}

// runVersion is `raftlock version` and `raftlock -version`: the module
// version (or "(devel)" for a build inside its own checkout), the Go
// version, and the VCS commit the binary was built from when Go recorded it.
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "", "Prints raftlock's version (the module version, \"(devel)\" for a build in its own\n"+
		"checkout), the Go version, the platform, and the commit when the build recorded it.", stdout, stderr)
	if code := fs.parseArgs(args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return fs.usagef("unexpected argument %q (it takes none)", fs.Arg(0))
	}
	fmt.Fprintln(stdout, versionLine())
	return exitOK
}

func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "raftlock (unknown version: built without module information) " + runtime.Version()
	}
	version := info.Main.Version
	if version == "" {
		version = "(unknown)"
	}
	line := fmt.Sprintf("raftlock %s %s %s/%s", version, info.GoVersion, runtime.GOOS, runtime.GOARCH)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		line += " commit " + rev
		if settings["vcs.modified"] == "true" {
			line += " (modified)"
		}
		if t := settings["vcs.time"]; t != "" {
			line += " " + t
		}
	}
	return line
}
