package main

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/apiserver"
	"github.com/raftlock/raftlock/cluster"
)

// agentFlags are the flags of `raftlock agent`.
type agentFlags struct {
	dev                bool
	nodeID, dataDir    string
	bind, advertise    string
	httpAddr           string
	bootstrap          bool
	peers, join        string
	logLevel           string
	leaveOnTerminate   bool
	shutdownGrace      time.Duration
	heartbeat, electTO time.Duration
	requestTimeout     time.Duration
	leaderWait         time.Duration
	maxWatchers        int
	deadVoter          time.Duration
	deadMember         time.Duration
	snapshotInterval   time.Duration
	snapshotThreshold  uint64
	voters             int
	logStore           string
	walSegmentSize     int
	leaderParallel     bool // cluster.Config.LeaderWritesInParallel

	gossipBind, gossipAdvertise string   // gossip (serf) address; "off" turns gossip off
	gossipKeyFile               string   // base64 AES keys, one a line, the first primary
	clusterName                 string   // separates clusters' gossip
	bootstrapExpect             int      // form a cluster once this many members see each other
	retryJoin                   listFlag // where members gossip, re-resolved at every attempt

	peerCert, peerKey, peerCA string // mutual TLS between nodes
	certFile, keyFile         string // HTTPS for the API
	clientCA                  string // ... requiring client certificates
	httpToken, httpTokenFile  string // a token for the API
	httpACLFile               string // named API tokens with rights per key prefix
	advertiseHTTP             string // the API's URL for clients, told to other members
	allowedOrigins            string // web origins whose pages may call the API
	allowedHosts              string // Host header names beyond the agent's own
	maxHTTPConns              int    // concurrent HTTP connections
	enablePprof               bool   // net/http/pprof under /debug/pprof/

	maxLocks, maxSessions, maxTotalWaiters quotaFlag // quotas on the lock state
}

// configFieldFlags names the agent flag that sets each cluster.Config field,
// so that a *cluster.ConfigError reaches the agent's user in the words they
// typed. Keep it next to the flag definitions below: a flag that sets a
// field belongs here. Fields without a flag keep their Go names.
var configFieldFlags = map[string]string{
	"NodeID":                 "-node-id",
	"DataDir":                "-data-dir",
	"LogStore":               "-log-store",
	"WALSegmentSize":         "-wal-segment-size",
	"LeaderWritesInParallel": "-leader-writes-in-parallel",
	"BindAddr":               "-bind",
	"AdvertiseAddr":          "-advertise",
	"APIAddr":                "-advertise-http",
	"Bootstrap":              "-bootstrap",
	"Peers":                  "-peers",
	"Join":                   "-join",
	"HeartbeatTimeout":       "-raft-heartbeat",
	"ElectionTimeout":        "-raft-election",
	"Voters":                 "-voters",
	"DeadVoterTimeout":       "-dead-voter-timeout",
	"DeadMemberTimeout":      "-dead-member-timeout",
	"SnapshotThreshold":      "-snapshot-threshold",
	"SnapshotInterval":       "-snapshot-interval",
	"RequestTimeout":         "-request-timeout",
	"LeaderWait":             "-leader-wait",
	"MaxWatchers":            "-max-watchers",
	"ServerTLS":              "-peer-cert-file",
	"ClientTLS":              "-peer-cert-file",

	"GossipBindAddr":      "-gossip-bind",
	"GossipAdvertiseAddr": "-gossip-advertise",
	"GossipKeys":          "-gossip-key-file",
	"ClusterName":         "-cluster-name",
	"BootstrapExpect":     "-bootstrap-expect",
	"RetryJoin":           "-retry-join",

	"MaxLocks":        "-max-locks",
	"MaxSessions":     "-max-sessions",
	"MaxTotalWaiters": "-max-total-waiters",
}

// agentError words err for the agent's user: a cluster.ConfigError names
// flags, not Config fields.
func agentError(err error) string {
	var cerr *cluster.ConfigError
	if errors.As(err, &cerr) {
		return cerr.Describe(func(field string) string {
			if name, ok := configFieldFlags[field]; ok {
				return name
			}
			return field
		})
	}
	return err.Error()
}

// security is what the agent's TLS and token flags amount to.
type security struct {
	peerServer, peerClient *tls.Config // nil: plain TCP between nodes
	api                    *tls.Config // nil: plain HTTP
	token                  string      // "": no token required
}

// agentConfig is what `raftlock agent` was told, checked, with the files it
// names read: what runAgent starts from. Nothing in it is started yet.
type agentConfig struct {
	agentFlags
	level   hclog.Level
	sec     security
	cluster cluster.Config    // see clusterConfig for what the start adds
	tokens  *apiserver.Tokens // from -http-acl-file; nil without one
	// origins and hosts are -allowed-origins and -allowed-hosts, checked;
	// the start adds the agent's own host names to hosts.
	origins, hosts []string
	// flagValues is every flag's value, secrets redacted, for
	// GET /v1/agent/config.
	flagValues map[string]string
}

// loadAgentConfig reads the agent's flags from args and, for flags not
// given there, from the environment as lookupEnv (os.LookupEnv) finds it;
// checks them all and reads the files they name (certificates, the token,
// the ACL and gossip key files). Its errors name the flag at fault, in
// words that follow "raftlock agent: "; on -h it returns a *helpRequest.
func loadAgentConfig(args []string, lookupEnv func(string) (string, bool)) (agentConfig, error) {
	var c agentConfig
	var help bytes.Buffer
	fs := newAgentFlagSet(&c.agentFlags, &help)
	if err := fs.parseWithEnv(args, agentEnv, lookupEnv); err != nil {
		return c, helpOr(err, &help)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (see raftlock agent -h)", fs.Arg(0))
	}
	if c.level = hclog.LevelFromString(c.logLevel); c.level == hclog.NoLevel {
		return c, fmt.Errorf("-log-level %q: want trace, debug, info, warn or error", c.logLevel)
	}
	var err error
	if c.sec, err = c.security(fs); err != nil {
		return c, err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if c.cluster, err = c.clusterConfig(set, c.sec); err != nil {
		return c, flagWordedError{err}
	}
	if err := c.checkHTTP(); err != nil {
		return c, err
	}
	c.flagValues = redactedFlags(fs)
	return c, nil
}

// checkHTTP checks the API's flags, and reads -http-acl-file.
func (c *agentConfig) checkHTTP() error {
	if samePort(c.httpAddr, c.cluster.BindAddr) {
		return fmt.Errorf("-http %s and -bind %s name the same port: the HTTP API and raft need a port each (by default 7070 and 7071)", c.httpAddr, c.cluster.BindAddr)
	}
	if c.advertiseHTTP != "" {
		var err error
		if c.cluster.APIAddr, err = advertisedAPIURL(c.advertiseHTTP, c.sec.api != nil); err != nil {
			return err
		}
	}
	if c.maxHTTPConns < 0 {
		return fmt.Errorf("-max-http-conns must not be negative, got %d (0: no limit)", c.maxHTTPConns)
	}
	if c.httpACLFile != "" {
		var err error
		if c.tokens, err = loadTokens(c.httpACLFile, c.sec.token); err != nil {
			return fmt.Errorf("-http-acl-file: %v: fix the file (its format: raftlock agent -h) and start again", err)
		}
	}
	var err error
	c.origins, c.hosts, err = allowedBrowsers(c.allowedOrigins, c.allowedHosts)
	return err
}

// flagWordedError is an error of cluster.Config worded for the agent's
// user (see agentError).
type flagWordedError struct{ err error }

func (e flagWordedError) Error() string { return agentError(e.err) }
func (e flagWordedError) Unwrap() error { return e.err }

// agentEnv names the environment variable each agent flag defaults from.
var agentEnv = map[string]string{
	"dev": "RAFTLOCK_DEV", "node-id": "RAFTLOCK_NODE_ID", "data-dir": "RAFTLOCK_DATA_DIR",
	"bind": "RAFTLOCK_BIND", "advertise": "RAFTLOCK_ADVERTISE", "http": "RAFTLOCK_HTTP_ADDR",
	"bootstrap": "RAFTLOCK_BOOTSTRAP", "peers": "RAFTLOCK_PEERS", "join": "RAFTLOCK_JOIN",
	"log-level": "RAFTLOCK_LOG_LEVEL", "voters": "RAFTLOCK_VOTERS", "log-store": "RAFTLOCK_LOG_STORE", "leave-on-terminate": "RAFTLOCK_LEAVE_ON_TERMINATE",
	"peer-cert-file": "RAFTLOCK_PEER_CERT_FILE", "peer-key-file": "RAFTLOCK_PEER_KEY_FILE", "peer-ca-file": "RAFTLOCK_PEER_CA_FILE",
	"cert-file": "RAFTLOCK_CERT_FILE", "key-file": "RAFTLOCK_KEY_FILE", "client-ca-file": "RAFTLOCK_CLIENT_CA_FILE",
	"http-token": "RAFTLOCK_HTTP_TOKEN", "http-token-file": "RAFTLOCK_HTTP_TOKEN_FILE", "advertise-http": "RAFTLOCK_ADVERTISE_HTTP",
	"http-acl-file":  "RAFTLOCK_HTTP_ACL_FILE",
	"shutdown-grace": "RAFTLOCK_SHUTDOWN_GRACE", "raft-heartbeat": "RAFTLOCK_RAFT_HEARTBEAT", "raft-election": "RAFTLOCK_RAFT_ELECTION",
	"request-timeout": "RAFTLOCK_REQUEST_TIMEOUT", "dead-voter-timeout": "RAFTLOCK_DEAD_VOTER_TIMEOUT",
	"dead-member-timeout": "RAFTLOCK_DEAD_MEMBER_TIMEOUT", "snapshot-interval": "RAFTLOCK_SNAPSHOT_INTERVAL",
	"snapshot-threshold":        "RAFTLOCK_SNAPSHOT_THRESHOLD",
	"leader-wait":               "RAFTLOCK_LEADER_WAIT",
	"wal-segment-size":          "RAFTLOCK_WAL_SEGMENT_SIZE",
	"leader-writes-in-parallel": "RAFTLOCK_LEADER_WRITES_IN_PARALLEL",
	"allowed-origins":           "RAFTLOCK_ALLOWED_ORIGINS",
	"allowed-hosts":             "RAFTLOCK_ALLOWED_HOSTS",
	"max-http-conns":            "RAFTLOCK_MAX_HTTP_CONNS",
	"max-watchers":              "RAFTLOCK_MAX_WATCHERS",
	"gossip-bind":               "RAFTLOCK_GOSSIP_BIND",
	"gossip-advertise":          "RAFTLOCK_GOSSIP_ADVERTISE",
	"gossip-key-file":           "RAFTLOCK_GOSSIP_KEY_FILE",
	"cluster-name":              "RAFTLOCK_CLUSTER_NAME",
	"bootstrap-expect":          "RAFTLOCK_BOOTSTRAP_EXPECT",
	"retry-join":                "RAFTLOCK_RETRY_JOIN",
	"enable-pprof":              "RAFTLOCK_ENABLE_PPROF",

	"max-locks": "RAFTLOCK_MAX_LOCKS", "max-sessions": "RAFTLOCK_MAX_SESSIONS", "max-total-waiters": "RAFTLOCK_MAX_TOTAL_WAITERS",
}

// agentSynopsis and agentAbout are the head of the agent's -h.
const agentSynopsis = "[-dev] [-node-id ID -data-dir DIR (-bootstrap-expect N -retry-join HOST,... | -retry-join HOST,... | -bootstrap [-peers ...] | -join ADDR,...)] [FLAGS]"

const agentAbout = "Runs a raftlock node: a member of the Raft cluster that keeps the locks, serving the\n" +
	"HTTP API. -dev runs a single-node cluster on a temporary data dir, for trying things out.\n\n" +
	"A new cluster, the simple way: start N members with the same -bootstrap-expect N and the\n" +
	"same -retry-join list (names or addresses of the members; a DNS name is resolved again\n" +
	"at every attempt): they form one cluster of N voters once they see each other through\n" +
	"gossip. Later members need only -retry-join. Gossip runs on -gossip-bind (default:\n" +
	"-bind's port + 1, UDP and TCP) when -bootstrap-expect, -retry-join or -gossip-bind is\n" +
	"given; -gossip-key-file encrypts it, -cluster-name keeps clusters on one network apart.\n\n" +
	"Or by hand: start every member with -bootstrap and the same -peers list, or one member\n" +
	"with -bootstrap and the others with -join pointing at it. The flags only matter while\n" +
	"-data-dir is empty: restart a member with the same command line and it comes back from\n" +
	"its data dir as the same member, with every lock. Such a restart logs that -bootstrap and\n" +
	"-peers are ignored, and warns when -peers gives a member another address than the data\n" +
	"dir holds (a warning, not an error: membership changes after bootstrap).\n\n" +
	"Stopping. SIGINT or SIGTERM stops the node without leaving the cluster: the others count\n" +
	"it as down until it returns (a second signal cuts the graceful stop short). A node that\n" +
	"left, or was removed, and is started again on its data dir asks the members it knew\n" +
	"(and -join, -peers) to add it back. A node with no leader stops at once. To remove a\n" +
	"member for good, run 'raftlock leave -addr' against it (or start it with\n" +
	"-leave-on-terminate) and do not start it again; to reuse its host as a new member,\n" +
	"empty its -data-dir and start it with -join.\n\n" +
	"Security. Without the flags below, raft traffic and the API are plain TCP and HTTP and\n" +
	"anyone who reaches the ports may join the cluster or take locks: fine for -dev (which\n" +
	"listens on 127.0.0.1), not on a shared network.\n" +
	"  Between nodes, -peer-cert-file, -peer-key-file and -peer-ca-file (all three or none)\n" +
	"  turn on mutual TLS (1.3): each node presents its certificate when it accepts and when\n" +
	"  it dials, and accepts only certificates the peer CA signed, for both server and client\n" +
	"  auth. Host names and IPs in them are not checked: nodes dial each other by IP and any\n" +
	"  certificate of the peer CA may join anyway, so the peer CA is the trust boundary; use\n" +
	"  one that signs this cluster's nodes only. Every member needs the flags.\n" +
	"  For the API, -cert-file and -key-file serve HTTPS (TLS 1.2+); -client-ca-file also\n" +
	"  requires a client certificate of that CA on every connection (/healthz included).\n" +
	"  -http-token (better: -http-token-file or the environment, which ps does not show)\n" +
	"  requires \"Authorization: Bearer TOKEN\" or \"X-Raftlock-Token: TOKEN\" on every\n" +
	"  request but /healthz, /readyz and /ui/ (the probes then say only ok or what is wrong);\n" +
	"  clients: raftlock COMMAND -token, or RAFTLOCK_HTTP_TOKEN.\n" +
	"  That shared token may do everything. -http-acl-file names tokens with narrower rights,\n" +
	"  per key prefix (the longest matching prefix decides; lock implies read, admin implies\n" +
	"  lock; deny takes away), in JSON:\n" +
	"    {\"tokens\": [\n" +
	"      {\"name\": \"ops\", \"secret\": \"<openssl rand -hex 16>\",\n" +
	"       \"rules\": [{\"prefix\": \"\", \"right\": \"admin\"}]},\n" +
	"      {\"name\": \"billing\", \"secret\": \"<another>\",\n" +
	"       \"rules\": [{\"prefix\": \"billing/\", \"right\": \"lock\"}, {\"prefix\": \"\", \"right\": \"read\"}]}]}\n" +
	"  Rights: read (inspect, list: a list shows only the keys the token may read), lock\n" +
	"  (acquire, release, extend), admin (release -force; on the prefix \"\": also leave);\n" +
	"  status and metrics need any known token. Names: letters, digits, . _ -; secrets: 16+\n" +
	"  visible ASCII characters, each its own (or \"secret_sha256\": printf %s \"$SECRET\" |\n" +
	"  sha256sum, so that the file holds no secret). SIGHUP reloads the file: a bad file\n" +
	"  then keeps the tokens in force and logs why; at start it stops the agent. Audit: each\n" +
	"  force release is logged at INFO with the token's name; secrets are never logged.\n" +
	"  Certificates and -http-token are read at start only: restart the agent to change them."

// newAgentFlagSet defines the agent's flags on f; -h prints to help.
func newAgentFlagSet(f *agentFlags, help io.Writer) *flagSet {
	fs := newFlagSet("agent", agentSynopsis, agentAbout, help, io.Discard)
	fs.BoolVar(&f.dev, "dev", false, "single-node cluster with a temporary data dir, listening on 127.0.0.1 without TLS or token unless the flags below say so")
	fs.StringVar(&f.nodeID, "node-id", "", "this node's unique, stable ID: letters, digits, '-', '_' and '.' (env RAFTLOCK_NODE_ID; default: the host name)")
	fs.StringVar(&f.dataDir, "data-dir", "", "where the raft log and snapshots live")
	fs.StringVar(&f.bind, "bind", "127.0.0.1:7071", "TCP address for raft and forwarding between nodes")
	fs.StringVar(&f.advertise, "advertise", "", "address other nodes dial to reach -bind (env RAFTLOCK_ADVERTISE; default: -bind)")
	fs.StringVar(&f.httpAddr, "http", "127.0.0.1:7070", "address of the HTTP API")
	fs.BoolVar(&f.bootstrap, "bootstrap", false, "start a new cluster if the data dir is empty")
	fs.StringVar(&f.peers, "peers", "", "with -bootstrap: the initial members, ID=HOST:PORT,... including this node")
	fs.StringVar(&f.join, "join", "", "addresses (-bind of running members), HOST:PORT,..., to join")
	fs.IntVar(&f.walSegmentSize, "wal-segment-size", 0, "bytes per segment file of the wal log store, 4096 to 1073741824, each preallocated in full; 0: 64 MiB")
	fs.StringVar(&f.logStore, "log-store", "", `raft log format for a new data dir: "wal" (default) or "boltdb"; an existing dir keeps its own (env RAFTLOCK_LOG_STORE)`)
	fs.StringVar(&f.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.BoolVar(&f.leaveOnTerminate, "leave-on-terminate", false, "leave the cluster for good on SIGINT/SIGTERM, as 'raftlock leave' does (default: a signal only stops the node); started again on its data dir, it asks to be added back")
	durationVar(fs, &f.shutdownGrace, "shutdown-grace", 10*time.Second, "how long a graceful stop may take")
	defaults := cluster.DefaultConfig()
	fs.BoolVar(&f.leaderParallel, "leader-writes-in-parallel", defaults.LeaderWritesInParallel, "the leader sends a new raft log entry to the followers while it syncs it to its own disk, and counts itself toward the commit once synced: one disk sync on a commit's path instead of two; false: it syncs first, then sends")
	durationVar(fs, &f.heartbeat, "raft-heartbeat", defaults.HeartbeatTimeout, "raft heartbeat timeout")
	durationVar(fs, &f.electTO, "raft-election", defaults.ElectionTimeout, "raft election timeout")
	durationVar(fs, &f.requestTimeout, "request-timeout", defaults.RequestTimeout, "bound on one lock command or read (finding the leader, forwarding, committing, retries) and on joining")
	durationVar(fs, &f.leaderWait, "leader-wait", defaults.LeaderWait, "how long a lock call waits while no leader is known before answering unavailable (0: four -raft-election timeouts; a waiting acquire waits at least its wait)")
	durationVar(fs, &f.deadVoter, "dead-voter-timeout", defaults.DeadVoterTimeout, "how long a voter may be unhealthy (failed, out of contact, far behind) before a healthy non-voter replaces it")
	durationVar(fs, &f.deadMember, "dead-member-timeout", defaults.DeadMemberTimeout, "how long a non-voter may be failed before the leader removes it; it must -join again")
	durationVar(fs, &f.snapshotInterval, "snapshot-interval", defaults.SnapshotInterval, "how often raft checks whether to snapshot the lock state")
	fs.Uint64Var(&f.snapshotThreshold, "snapshot-threshold", defaults.SnapshotThreshold, "log entries since the last snapshot that make the next one due")
	fs.IntVar(&f.voters, "voters", defaults.Voters, "how many members vote (odd: 3 or 5); later members join as non-voters")
	fs.StringVar(&f.advertiseHTTP, "advertise-http", "", "URL (or HOST:PORT) clients dial to reach -http, told to the other members (env RAFTLOCK_ADVERTISE_HTTP; default: -http's bound address, a wildcard host replaced by -advertise's or -bind's)")
	fs.StringVar(&f.peerCert, "peer-cert-file", "", "PEM certificate this node presents to its peers; with -peer-key-file and -peer-ca-file")
	fs.StringVar(&f.peerKey, "peer-key-file", "", "PEM private key of -peer-cert-file")
	fs.StringVar(&f.peerCA, "peer-ca-file", "", "PEM CA certificate(s) that sign every member's peer certificate")
	fs.StringVar(&f.certFile, "cert-file", "", "PEM certificate to serve the HTTP API over HTTPS; with -key-file")
	fs.StringVar(&f.keyFile, "key-file", "", "PEM private key of -cert-file")
	fs.StringVar(&f.clientCA, "client-ca-file", "", "PEM CA certificate(s): API clients must present a certificate they signed; needs -cert-file")
	fs.StringVar(&f.httpToken, "http-token", "", "token every API request but /healthz, /readyz and /ui/ must carry (env RAFTLOCK_HTTP_TOKEN; a flag shows in ps: prefer the env or -http-token-file)")
	fs.StringVar(&f.httpTokenFile, "http-token-file", "", "file holding -http-token, surrounding whitespace ignored")
	fs.StringVar(&f.httpACLFile, "http-acl-file", "", "JSON file of named API tokens with rights per key prefix (format above); reloaded on SIGHUP")
	fs.StringVar(&f.allowedOrigins, "allowed-origins", "", "web origins (https://ops.example.com,...) whose pages may call the API from a browser; requests from any other page are refused (default: none)")
	fs.StringVar(&f.allowedHosts, "allowed-hosts", "", "host names clients use to reach the API, beyond IPs, localhost and the names in -http, -advertise-http, -advertise and -cert-file; a request with another Host is refused, against DNS rebinding (* allows any)")
	fs.StringVar(&f.gossipBind, "gossip-bind", "", "UDP and TCP address for gossip (membership, failure detection), on with -bootstrap-expect, -retry-join or this flag; default: -bind's host and port + 1 (a 0 port stays 0); off: no gossip")
	fs.StringVar(&f.gossipAdvertise, "gossip-advertise", "", "IP:PORT other members gossip to, when -gossip-bind is not reachable as bound (default: the bound address, or -advertise's host for a wildcard)")
	fs.StringVar(&f.gossipKeyFile, "gossip-key-file", "", "file of base64 AES keys (16, 24 or 32 bytes), one a line: gossip is encrypted with the first, any decrypts")
	fs.StringVar(&f.clusterName, "cluster-name", cluster.DefaultClusterName, "name gossip checks: nodes of another name are refused")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0, "on an empty data dir, form a new cluster once this many members (odd: 3 or 5) started with the same value see each other (use with -retry-join)")
	fs.Var(&f.retryJoin, "retry-join", "where other members gossip: HOST or HOST:PORT (a DNS name, re-resolved at each attempt; _srv._tcp.names as SRV), comma-separated or repeated; retried with backoff")
	fs.IntVar(&f.maxHTTPConns, "max-http-conns", apiserver.DefaultMaxConns, "most HTTP connections open at once; more wait in the kernel's backlog until one closes (0: no limit)")
	fs.IntVar(&f.maxWatchers, "max-watchers", 0, "most blocking queries (watches: raftlock watch, GET /v1/inspect?index=) served at once; more are answered 429 too_many_watchers (0: 10000). Each also holds an HTTP connection: the API serves at most half of -max-http-conns of them at once, leaving the rest to lock traffic")
	fs.BoolVar(&f.enablePprof, "enable-pprof", false, "serve Go's net/http/pprof under /debug/pprof/ (to tokens with the admin right on every key), for profiles and raftlock debug's goroutine dump")
	f.maxLocks, f.maxSessions, f.maxTotalWaiters = cluster.DefaultMaxLocks, cluster.DefaultMaxSessions, cluster.DefaultMaxTotalWaiters
	fs.Var(&f.maxLocks, "max-locks", "most locks the cluster keeps (keys with a holder or waiters, and each further hold of a semaphore or read/write key): a `count`, or unlimited (each costs every member ~180 bytes, up to 1.25 KB with metadata); past it, acquires that would add one are answered 429 quota_exceeded while releases, extends and retries go on. Set the same on every member: the leader enforces its own")
	fs.Var(&f.maxSessions, "max-sessions", "most sessions the cluster keeps: a `count`, or unlimited (~185 bytes each); past it, new sessions are answered 429 quota_exceeded")
	fs.Var(&f.maxTotalWaiters, "max-total-waiters", "most callers queued over all keys: a `count`, or unlimited (~205 bytes each, plus metadata; each key also takes at most 65536); past it, acquires that would queue are answered 429 quota_exceeded")
	return fs
}

// security checks the TLS and token flags and loads what they name.
func (f *agentFlags) security(fs *flagSet) (security, error) {
	var sec security
	if err := allOrNone([]string{"peer-cert-file", "peer-key-file", "peer-ca-file"}, f.peerCert, f.peerKey, f.peerCA); err != nil {
		return sec, err
	}
	if err := allOrNone([]string{"cert-file", "key-file"}, f.certFile, f.keyFile); err != nil {
		return sec, err
	}
	if f.clientCA != "" && f.certFile == "" {
		return sec, errors.New("-client-ca-file needs -cert-file and -key-file: client certificates come with HTTPS")
	}
	var err error
	if f.peerCert != "" {
		if sec.peerServer, sec.peerClient, err = peerTLS(f.peerCert, f.peerKey, f.peerCA); err != nil {
			return sec, err
		}
	}
	if f.certFile != "" {
		if sec.api, err = apiServerTLS(f.certFile, f.keyFile, f.clientCA); err != nil {
			return sec, err
		}
	}
	sec.token, err = token(fs, "http-token", f.httpToken, "http-token-file", f.httpTokenFile, apiserver.ValidateSecret)
	return sec, err
}

// warnSharedSecretFiles warns about each file of secrets given (the API
// token, the gossip keys, the TLS private keys) that other users may read;
// -http-acl-file is checked where it is read, and again on each reload.
func (f *agentFlags) warnSharedSecretFiles(logger hclog.Logger) {
	for _, file := range []struct{ flag, path string }{
		{"-http-token-file", f.httpTokenFile},
		{"-gossip-key-file", f.gossipKeyFile},
		{"-key-file", f.keyFile},
		{"-peer-key-file", f.peerKey},
	} {
		if file.path != "" {
			warnIfShared(file.flag, file.path, logger)
		}
	}
}

// clusterConfig turns the flags into a cluster.Config, but for what only
// the start knows: its Logger, its APIAddr when -advertise-http does not
// give it, and -dev's data dir, made then. set holds the flags given, on
// the command line or in the environment.
func (f *agentFlags) clusterConfig(set map[string]bool, sec security) (cluster.Config, error) {
	cfg := cluster.DefaultConfig()
	if f.leaderWait < 0 {
		return cfg, fmt.Errorf("-leader-wait must not be negative, got %v (0 means four -raft-election timeouts)", f.leaderWait)
	}
	cfg.ServerTLS, cfg.ClientTLS = sec.peerServer, sec.peerClient
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = f.heartbeat, f.electTO
	cfg.RequestTimeout = f.requestTimeout
	cfg.LeaderWait = f.leaderWait
	cfg.MaxWatchers = f.maxWatchers
	cfg.MaxLocks, cfg.MaxSessions, cfg.MaxTotalWaiters = int(f.maxLocks), int(f.maxSessions), int(f.maxTotalWaiters)
	cfg.DeadVoterTimeout, cfg.DeadMemberTimeout = f.deadVoter, f.deadMember
	cfg.SnapshotInterval, cfg.SnapshotThreshold = f.snapshotInterval, f.snapshotThreshold
	cfg.Voters = f.voters
	cfg.LogStore = cluster.LogStore(f.logStore)
	cfg.WALSegmentSize = f.walSegmentSize
	cfg.LeaderWritesInParallel = f.leaderParallel
	if n := f.walSegmentSize; n != 0 && (n < 4<<10 || n > 1<<30) {
		return cfg, fmt.Errorf("-wal-segment-size must be from 4096 to 1073741824 bytes (or 0 for 64 MiB), got %d", n)
	}
	cfg.LeaderLeaseTimeout = min(cfg.LeaderLeaseTimeout, cfg.HeartbeatTimeout)
	if f.dev {
		return f.devClusterConfig(cfg, set)
	}
	if f.nodeID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			return cfg, errors.New("-node-id is required (the host name is unknown)")
		}
		f.nodeID = host
	}
	if f.dataDir == "" {
		return cfg, errors.New("-data-dir is required (or use -dev)")
	}
	cfg.NodeID, cfg.DataDir = f.nodeID, f.dataDir
	cfg.BindAddr, cfg.AdvertiseAddr = f.bind, f.advertise
	cfg.Bootstrap = f.bootstrap
	if err := f.memberAddrs(&cfg); err != nil {
		return cfg, err
	}
	if err := f.gossipConfig(&cfg); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// devClusterConfig is -dev's cluster of one, on 127.0.0.1 unless -bind
// says otherwise. Its data dir is made at the start.
func (f *agentFlags) devClusterConfig(cfg cluster.Config, set map[string]bool) (cluster.Config, error) {
	for _, name := range []string{"bootstrap", "peers", "join", "data-dir", "bootstrap-expect", "retry-join"} {
		if set[name] {
			return cfg, fmt.Errorf("-dev makes its own single-node cluster; drop -%s", name)
		}
	}
	cfg.NodeID = "dev"
	if f.nodeID != "" {
		cfg.NodeID = f.nodeID
	}
	cfg.BindAddr = "127.0.0.1:0"
	if set["bind"] {
		cfg.BindAddr = f.bind
	}
	cfg.AdvertiseAddr = f.advertise
	cfg.Bootstrap = true
	return cfg, nil
}

// memberAddrs sets cfg's Peers from -peers and Join from -join.
func (f *agentFlags) memberAddrs(cfg *cluster.Config) error {
	if f.peers != "" {
		if !f.bootstrap {
			return errors.New("-peers only makes sense with -bootstrap")
		}
		for _, item := range splitList(f.peers) {
			id, addr, ok := strings.Cut(item, "=")
			if !ok || id == "" || addr == "" {
				return fmt.Errorf("-peers: %q is not ID=HOST:PORT", item)
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return fmt.Errorf("-peers: %q: %v", item, err)
			}
			cfg.Peers = append(cfg.Peers, cluster.Peer{ID: id, Addr: addr})
		}
	}
	for _, addr := range splitList(f.join) {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("-join: %q: %v", addr, err)
		}
		cfg.Join = append(cfg.Join, addr)
	}
	return nil
}

// samePort reports whether two listen addresses would take the same port:
// the same port number (not 0, which picks a free one) on the same host, or
// on hosts one of which is a wildcard.
func samePort(a, b string) bool {
	hostA, portA, errA := net.SplitHostPort(a)
	hostB, portB, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || portA != portB || portA == "0" {
		return false
	}
	return hostA == hostB || wildcardHost(hostA) || wildcardHost(hostB)
}

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// gossipConfig sets cfg's gossip fields from the flags. Gossip is on with
// -bootstrap-expect, -retry-join or -gossip-bind (not "off"), on -bind's
// port + 1 unless -gossip-bind says otherwise. Without them it is off: an
// agent started the old way (-bootstrap, -join) has no one to gossip with
// (gossip finds its members through -retry-join), and a port it was not
// asked to open could clash with what runs next to it.
func (f *agentFlags) gossipConfig(cfg *cluster.Config) error {
	cfg.ClusterName = f.clusterName
	cfg.BootstrapExpect = f.bootstrapExpect
	cfg.RetryJoin = f.retryJoin
	switch {
	case f.gossipBind == "off":
		return nil
	case f.gossipBind == "" && f.bootstrapExpect == 0 && len(f.retryJoin) == 0:
		if f.gossipKeyFile != "" || f.gossipAdvertise != "" {
			return errors.New("-gossip-key-file and -gossip-advertise need gossip: add -retry-join (or -bootstrap-expect, or -gossip-bind)")
		}
		return nil
	case f.gossipBind == "":
		host, port, err := net.SplitHostPort(f.bind)
		if err != nil {
			return fmt.Errorf("-bind %q: %v", f.bind, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p >= 65535 {
			return fmt.Errorf("-bind %q: the port must be a number below 65535 (gossip takes the next one unless -gossip-bind says otherwise)", f.bind)
		}
		if p != 0 {
			p++
		}
		cfg.GossipBindAddr = net.JoinHostPort(host, strconv.Itoa(p))
	default:
		cfg.GossipBindAddr = f.gossipBind
	}
	cfg.GossipAdvertiseAddr = f.gossipAdvertise
	if f.gossipKeyFile != "" {
		keys, err := readGossipKeys(f.gossipKeyFile)
		if err != nil {
			return err
		}
		cfg.GossipKeys = keys
	}
	return nil
}

// readGossipKeys reads -gossip-key-file: base64 keys, one a line; blank
// lines and lines starting with # are skipped.
func readGossipKeys(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-gossip-key-file: %w", err)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("-gossip-key-file %s, line %d: not base64 (make a key with: head -c 32 /dev/urandom | base64)", path, i+1)
		}
		if l := len(key); l != 16 && l != 24 && l != 32 {
			return nil, fmt.Errorf("-gossip-key-file %s, line %d: the key is %d bytes; AES needs 16, 24 or 32 (make one with: head -c 32 /dev/urandom | base64)", path, i+1, l)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("-gossip-key-file %s holds no key: write one base64 key a line (make one with: head -c 32 /dev/urandom | base64)", path)
	}
	return keys, nil
}

// listFlag is a flag that may be repeated, each value a comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = append(*l, splitList(s)...)
	return nil
}

// loadTokens reads an -http-acl-file and checks it against the shared
// token, so that a clash is found before it is put in force.
func loadTokens(path, shared string) (*apiserver.Tokens, error) {
	tokens, err := apiserver.LoadTokens(path)
	if err != nil {
		return nil, err
	}
	if err := apiserver.CheckTokens(shared, tokens); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return tokens, nil
}
