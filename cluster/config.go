package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/cluster/internal/membership"
	"github.com/raftlock/raftlock/cluster/nodewire"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/transport"
)

// Peer names one member of the initial configuration of a bootstrapped cluster.
type Peer struct {
	ID   string // the peer's Config.NodeID
	Addr string // the peer's advertised address (host:port)
}

// Config configures a Node. Start from DefaultConfig and set NodeID, DataDir,
// BindAddr and one of Bootstrap or Join.
type Config struct {
	// NodeID names this node in the raft configuration. It must stay the same
	// across restarts on the same DataDir: the data dir records it, and New
	// refuses to start it under another (ErrWrongNode). 1 to 255 bytes of
	// ASCII letters, digits, '-', '_' and '.', not "." or "..": a host name
	// fits. The same rule holds for the IDs other nodes give (gossip, join).
	NodeID string
	// DataDir holds the raft log and stable store, the snapshots, and the
	// node's identity (node and cluster ID). It is created if missing, and
	// New makes it and everything in it private to the user the node runs
	// as (directories 0700, files 0600): it holds every owner token.
	DataDir string
	// LogStore chooses the raft log's format on a fresh DataDir: LogStoreWAL
	// (the default when empty) or LogStoreBoltDB. On a DataDir that already
	// holds a log, empty means that log's format, and naming the other one
	// is an error: the node would start with an empty log. To move a member
	// to the other format, Leave, remove its DataDir, and start it again
	// with Join and the new LogStore: it is added again and sent a snapshot.
	LogStore LogStore
	// WALSegmentSize is the size in bytes of the WAL's segment files, each
	// preallocated when created; 0 means 64 MiB. The WAL drops compacted
	// entries a whole segment at a time, so until a segment fills, a lagging
	// follower is sent entries rather than a snapshot.
	WALSegmentSize int
	// LeaderWritesInParallel (on in DefaultConfig) lets the leader send a
	// new entry to the followers while its own write of it is being
	// synced, rather than after (internal/raft, doc.go): a commit then
	// waits for one sync on its path, not two in turn. The leader counts
	// itself towards a commit only once its write is durable, so what is
	// acknowledged is on a quorum's disks either way. Off, the leader
	// syncs first and then sends, as hashicorp/raft does. With
	// LogStoreBoltDB it changes nothing (that store cannot split a write
	// from its sync).
	LeaderWritesInParallel bool
	// BindAddr is the TCP address to listen on; "127.0.0.1:0" picks a free port.
	BindAddr string
	// AdvertiseAddr is the address peers dial; default: the bound address.
	AdvertiseAddr string
	// APIAddr, optional, is where clients reach the API this node serves
	// (for the raftlock agent, the URL of its HTTP API). Members tell each
	// other theirs, and Stats().Members shows them, so a client given one
	// node can find the others.
	APIAddr string

	// Bootstrap starts a new cluster on a fresh DataDir. Peers lists the
	// initial voters; empty means this node alone. Ignored when DataDir
	// already holds raft state (a restart never bootstraps again).
	Bootstrap bool
	Peers     []Peer
	// Join lists addresses of running members. A node with a fresh DataDir asks
	// them, in turn, to add it; one with existing state just restarts.
	Join []string

	// Gossip (package membership, gossip.go). GossipBindAddr, when set,
	// turns gossip on: serf on that address (UDP and TCP, the same port number), for
	// membership, failure detection and member metadata. Empty: off (a node
	// embedded in another program opens no port it was not asked for); the
	// agent sets it, to -bind's port + 1 by default, when given
	// -bootstrap-expect, -retry-join or -gossip-bind. GossipAdvertiseAddr
	// (ip:port) is what other members dial, when the bound address is not
	// (default: the bound address, or AdvertiseAddr's host when bound to a
	// wildcard).
	GossipBindAddr      string
	GossipAdvertiseAddr string
	// GossipKeys encrypt gossip (AES-GCM; each key 16, 24 or 32 bytes): the
	// first encrypts, every one decrypts, so a key can be rotated by
	// rolling restarts (install, use, remove: see README). Empty: plain.
	GossipKeys [][]byte
	// ClusterName separates clusters on one network: gossip of another
	// name is discarded, and a member of another name refused. Empty means
	// DefaultClusterName.
	ClusterName string
	// BootstrapExpect, on a fresh DataDir, bootstraps a new cluster once
	// this many members with the same BootstrapExpect see each other in
	// gossip, with all of them as voters; never while gossip shows a member
	// of a cluster, never on a DataDir with state (package membership's
	// bootstrap_expect.go says why it cannot make two clusters). Needs gossip; excludes
	// Bootstrap and Join.
	BootstrapExpect int
	// RetryJoin lists where other members gossip: IPs or DNS names, with
	// or without a port (default: this node's gossip port), resolved again
	// at every attempt; tried with backoff until one answers. Needs gossip.
	// A node in gossip but not in the raft configuration asks the members
	// that are to add it, so RetryJoin alone makes a fresh node a member.
	RetryJoin []string

	// Raft timings; see raft.Config. Shorter timeouts mean a dead leader is
	// replaced sooner (leases keep counting down meanwhile, on the new
	// leader's log clock).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration

	// Voters is how many members the leader keeps as voters: the members
	// that elect the leader and whose disks acknowledge every commit. Later
	// members join as non-voters: they replicate every lock and serve calls
	// like any node, but do not slow commits, so embedding a node in 30
	// replicas of a service does not make a 30-voter quorum. When a voter
	// leaves, or has been unhealthy for DeadVoterTimeout, the leader
	// promotes a healthy non-voter in its place (a dead voter is demoted
	// once its replacement votes: never fewer healthy voters). It must be
	// odd: 3 tolerates one failure, 5 two. Members listed in Peers at
	// bootstrap are all voters.
	Voters int
	// DeadVoterTimeout is how long a voter may be unhealthy (failed, out of
	// the leader's contact, or far behind) before a healthy non-voter
	// replaces it. Default 5s: longer than a healthy voter may go silent (an
	// election, a stalled host or disk, a restart on its data dir), short
	// because a 3-voter cluster with a dead voter tolerates no further
	// failure until it is replaced. Raise it with the raft timeouts.
	DeadVoterTimeout time.Duration
	// DeadMemberTimeout is how long a non-voter (including a demoted voter)
	// may be failed before the leader removes it from the cluster, like
	// Consul's reconnect_timeout: replicas of a service that crash rather
	// than leave, and come back under new names, would otherwise stay
	// members forever, each costing the leader a replication stream. A
	// member removed this way that returns must ask to join again (set
	// Join; the raftlock agent's -join): it is no longer sent entries. The
	// count starts again at each leader change. At least DeadVoterTimeout.
	DeadMemberTimeout time.Duration

	// Snapshotting; see raft.Config.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// SnapshotsRetained is how many snapshot files to keep in DataDir.
	SnapshotsRetained int

	// RequestTimeout bounds one lock command or read (finding the leader,
	// forwarding, committing, retrying across leader changes) when the
	// caller's context allows longer. A command that runs out of it fails
	// with lock.ErrUnavailable. A waiting Acquire's wait is not bounded by it.
	// It also bounds joining a cluster in New.
	RequestTimeout time.Duration
	// LeaderWait is how long a lock call goes on while this node knows no
	// leader (raft reports none: an election is running, or a majority of
	// the voters is down or cut off) before it fails with
	// lock.ErrUnavailable saying there is no leader, rather than after
	// RequestTimeout (which still bounds the whole call). A waiting Acquire
	// goes on at least for its own wait.
	// 0, the default, means four ElectionTimeouts (2s with DefaultConfig's):
	// raft's candidates time out after one to two ElectionTimeouts, so an
	// election normally ends within one or two, and four leave room for a
	// split vote and a second round; it follows ElectionTimeout when that
	// is raised. A leader that is known but does not answer is waited for
	// until raft gives up on it (HeartbeatTimeout), then this applies.
	LeaderWait time.Duration

	// MaxWatchers bounds the blocking queries (lock.Watcher) this node
	// serves at once; past it a query fails with lock.ErrTooManyWatchers.
	// 0 means lock.DefaultMaxWatchers (10,000). Each costs a goroutine of
	// its caller (over HTTP, a connection) and a little memory here.
	MaxWatchers int

	// Quotas bound the state clients can make every member hold in memory
	// (see quota.go): MaxLocks the locks (keys with a holder or waiters,
	// and each further hold of a semaphore or read/write key),
	// MaxSessions the sessions, MaxTotalWaiters the callers queued over
	// all keys (each key also takes at most lock.MaxWaiters). An acquire or
	// session create that would pass one fails with lock.ErrQuotaExceeded;
	// nothing that frees state, and no retry by an owner the key already
	// has, is ever refused. The leader checks them, before proposing, so
	// set them the same on every member. 0 means the default
	// (DefaultMaxLocks, 1,000,000: about 180 MB of plain locks, 1.25 GB if
	// every one carries 1 KiB of metadata; DefaultMaxSessions, 100,000;
	// DefaultMaxTotalWaiters, 100,000), Unlimited (-1) no limit.
	MaxLocks        int
	MaxSessions     int
	MaxTotalWaiters int

	// Logger receives the node's and raft's logs; nil means warnings and
	// errors to stderr. A repeated warning or error of raft or the transport
	// (a member down makes several a second) is written once, then counted:
	// one line per 30 s with repeated=N. raft's lines about normal events (a
	// cluster's first election, a node's stop, a member catching up) come at
	// info or debug, and those about an unreachable member say what to do
	// (what_to_do=…).
	Logger hclog.Logger

	// Clock is the node's source of time; nil means the host's clocks. See Clock.
	Clock Clock

	// ServerTLS and ClientTLS, when set, wrap every connection (raft and
	// forwarding alike). Both or neither.
	ServerTLS *tls.Config
	ClientTLS *tls.Config

	// TransportDial and TransportListen, when set, make the TCP connections
	// between nodes (raft's and forwarding's) and the node's listener in
	// place of net.Dialer and net.Listen; TLS runs over them. See
	// transport.Config's Dial and Listen. Nil: the plain network.
	TransportDial   func(ctx context.Context, network, addr string) (net.Conn, error)
	TransportListen func(network, addr string) (net.Listener, error)

	// levels, when set, replaces the build's command levels (levels.go):
	// the package's tests play members of older and newer builds with it.
	levels *commandLevels
	// version, when set, replaces the build's raftlock version (an empty
	// one: a build that tells none), and wrapRPC, when set, is given the
	// node's handler of other nodes' requests and serves them in its place:
	// tests play members of other builds with them (a build whose decoder
	// refuses what it does not know).
	version *string
	wrapRPC func(transport.Handler) transport.Handler
}

// DefaultConfig returns a Config with raft timings for a LAN (500ms
// heartbeat and election timeouts, half raft's defaults, so that a dead
// leader is replaced and locks are served again within about a second or
// two: while no leader serves, lock calls wait, up to LeaderWait) and
// snapshot settings suited to a lock service: the lock state is small, so
// snapshots are cheap and taken often. Across a WAN, or on hosts that stall
// for hundreds of milliseconds, raise the timeouts.
func DefaultConfig() Config {
	return Config{
		BindAddr:           "127.0.0.1:0",
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		CommitTimeout:      50 * time.Millisecond,
		Voters:             3,
		DeadVoterTimeout:   5 * time.Second,
		DeadMemberTimeout:  72 * time.Hour,
		SnapshotThreshold:  8192,
		SnapshotInterval:   2 * time.Minute,
		TrailingLogs:       10240,
		SnapshotsRetained:  2,
		RequestTimeout:     10 * time.Second,

		LeaderWritesInParallel: true,
	}
}

// Validate reports the first problem with c, as a *ConfigError (which
// matches ErrInvalidConfig). Whether a node with neither Bootstrap nor Join
// may start depends on its DataDir, so New checks that.
func (c Config) Validate() error {
	// bad names the field at fault; text names fields as {Field}.
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, format: format, args: args}
	}
	// badGo adds a hint for Go callers only (the agent sets these fields from flags).
	badGo := func(field, hint, format string, args ...any) error {
		return &ConfigError{Field: field, format: format, args: args, hint: hint}
	}
	if c.NodeID == "" {
		return bad("NodeID", "{NodeID} is empty")
	}
	if err := nodewire.CheckNodeID(c.NodeID); err != nil {
		return bad("NodeID", "{NodeID} %q: %v (a node that already has this ID must leave the cluster, then join with a new ID and an empty data dir)", c.NodeID, err)
	}
	switch {
	case c.DataDir == "":
		return bad("DataDir", "{DataDir} is empty")
	case c.BindAddr == "":
		return bad("BindAddr", "{BindAddr} is empty")
	case c.Bootstrap && len(c.Join) > 0:
		return bad("Join", "{Bootstrap} and {Join} are exclusive: bootstrap a new cluster or join a running one")
	case !c.Bootstrap && len(c.Peers) > 0:
		return bad("Peers", "{Peers} is only used with {Bootstrap}")
	case (c.ServerTLS == nil) != (c.ClientTLS == nil):
		return bad("ServerTLS", "set both {ServerTLS} and {ClientTLS}, or neither")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout},
		{"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout},
		{"CommitTimeout", c.CommitTimeout},
		{"SnapshotInterval", c.SnapshotInterval},
		{"RequestTimeout", c.RequestTimeout},
		{"DeadVoterTimeout", c.DeadVoterTimeout},
	} {
		if d.v <= 0 {
			return badGo(d.name, "start from DefaultConfig", "{"+d.name+"} must be positive, got %v", d.v)
		}
	}
	// raft.ValidateConfig's own rules, so that a bad value is reported in our terms.
	switch {
	case c.HeartbeatTimeout < 5*time.Millisecond:
		return bad("HeartbeatTimeout", "{HeartbeatTimeout} is too low (minimum 5ms), got %v", c.HeartbeatTimeout)
	case c.ElectionTimeout < 5*time.Millisecond:
		return bad("ElectionTimeout", "{ElectionTimeout} is too low (minimum 5ms), got %v", c.ElectionTimeout)
	case c.ElectionTimeout < c.HeartbeatTimeout:
		return bad("ElectionTimeout", "{ElectionTimeout} must be at least {HeartbeatTimeout}, got %v < %v", c.ElectionTimeout, c.HeartbeatTimeout)
	case c.LeaderLeaseTimeout < 5*time.Millisecond:
		return bad("LeaderLeaseTimeout", "{LeaderLeaseTimeout} is too low (minimum 5ms), got %v", c.LeaderLeaseTimeout)
	case c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return bad("LeaderLeaseTimeout", "{LeaderLeaseTimeout} must be at most {HeartbeatTimeout}, got %v > %v", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	case c.SnapshotInterval < 5*time.Millisecond:
		return bad("SnapshotInterval", "{SnapshotInterval} is too low (minimum 5ms), got %v", c.SnapshotInterval)
	case voterCountError("Voters", c.Voters) != nil:
		return voterCountError("Voters", c.Voters)
	case c.DeadMemberTimeout < c.DeadVoterTimeout:
		return bad("DeadMemberTimeout", "{DeadMemberTimeout} must be at least {DeadVoterTimeout}, got %v < %v", c.DeadMemberTimeout, c.DeadVoterTimeout)
	case c.LeaderWait < 0:
		return bad("LeaderWait", "{LeaderWait} must not be negative (0 means four {ElectionTimeout}s), got %v", c.LeaderWait)
	case c.MaxWatchers < 0:
		return bad("MaxWatchers", "{MaxWatchers} must not be negative (0 means %d), got %d", lock.DefaultMaxWatchers, c.MaxWatchers)
	case c.SnapshotThreshold == 0:
		return bad("SnapshotThreshold", "{SnapshotThreshold} must be positive")
	}
	for _, q := range []struct {
		field string
		v     int
	}{{"MaxLocks", c.MaxLocks}, {"MaxSessions", c.MaxSessions}, {"MaxTotalWaiters", c.MaxTotalWaiters}} {
		if q.v < Unlimited || q.v > maxQuota {
			return badGo(q.field, "0 means the default, Unlimited no limit", "{"+q.field+"} must be from 1 to %d (or unlimited), got %d", maxQuota, q.v)
		}
	}
	switch {
	case c.SnapshotsRetained < 1:
		return badGo("SnapshotsRetained", "start from DefaultConfig", "{SnapshotsRetained} must be at least 1")
	case c.WALSegmentSize != 0 && (c.WALSegmentSize < 4<<10 || c.WALSegmentSize > 1<<30):
		return bad("WALSegmentSize", "{WALSegmentSize} must be from 4 KiB to 1 GiB (or 0 for 64 MiB), got %d", c.WALSegmentSize)
	case c.LogStore != "" && c.LogStore != LogStoreWAL && c.LogStore != LogStoreBoltDB:
		return bad("LogStore", "{LogStore} must be %q or %q (or empty), got %q", LogStoreWAL, LogStoreBoltDB, c.LogStore)
	}
	seen := make(map[string]bool, len(c.Peers))
	self := false
	for i, p := range c.Peers {
		switch {
		case p.ID == "":
			return bad("Peers", "{Peers}[%d] has no ID", i)
		case nodewire.CheckNodeID(p.ID) != nil:
			return bad("Peers", "{Peers}[%d] %q: %v", i, p.ID, nodewire.CheckNodeID(p.ID))
		case p.Addr == "":
			return bad("Peers", "{Peers}[%d] (%s) has no Addr", i, p.ID)
		case seen[p.ID]:
			return bad("Peers", "{Peers} lists %s twice", p.ID)
		}
		seen[p.ID] = true
		self = self || p.ID == c.NodeID
	}
	if len(c.Peers) > 0 && !self {
		return bad("Peers", "{Peers} must include this node (%s, its {NodeID})", c.NodeID)
	}
	for i := range c.Join {
		if c.Join[i] == "" {
			return bad("Join", "{Join}[%d] is empty", i)
		}
	}
	return c.validateGossip()
}

// voterCountError checks a count of voters that field sets (Voters, and
// BootstrapExpect, whose members all vote): odd, from 1 to 9. An even
// count costs a member more for a quorum and survives no more failures
// than the odd count below it, and a network split in halves leaves no
// majority on either side.
func voterCountError(field string, n int) error {
	if n < 1 || n%2 == 0 || n > 9 {
		return configError(field, "{"+field+"} must be odd, from 1 to 9 (3 or 5 recommended; an even count survives no more failures than one less), got %d", n)
	}
	return nil
}

// ConfigError is a problem with a Config that its caller can fix: Validate
// and New return it. It matches ErrInvalidConfig. Field names the Config
// field at fault; Describe words the problem with other names for the
// fields, so that a program that fills a Config from its own flags (the
// raftlock agent) can report it in its users' terms.
type ConfigError struct {
	// Field is the Config field at fault, as spelled in Go ("HeartbeatTimeout").
	Field  string
	format string // the problem, for fmt with args, naming each field it mentions as {Field}
	args   []any
	hint   string // for Go callers only, such as "start from DefaultConfig"
}

// configError is a ConfigError whose text holds no fmt verbs besides its args'.
func configError(field, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, format: format, args: args}
}

// Error names the fields as in Go.
func (e *ConfigError) Error() string {
	msg := "cluster: invalid config: " + e.Describe(func(field string) string { return field })
	if e.hint != "" {
		msg += " (" + e.hint + ")"
	}
	return msg
}

// Is makes a ConfigError match ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Describe says what is wrong, naming each Config field as name(field)
// returns it, without the "cluster: invalid config" prefix or hints meant for
// Go callers.
func (e *ConfigError) Describe(name func(field string) string) string {
	// Fields are named in the format, before the values go in, so that a
	// value that looks like a reference ("{Voters}") stays as it is.
	format := configFieldRef.ReplaceAllStringFunc(e.format, func(ref string) string {
		field := ref[1 : len(ref)-1]
		if !configFields[field] {
			return ref
		}
		return strings.ReplaceAll(name(field), "%", "%%")
	})
	return fmt.Sprintf(format, e.args...)
}

// configFieldRef is how a ConfigError's text names a field.
var configFieldRef = regexp.MustCompile(`\{[A-Za-z]+\}`)

// configFields are Config's field names.
var configFields = func() map[string]bool {
	fields := map[string]bool{}
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		fields[t.Field(i).Name] = true
	}
	return fields
}()

// DefaultClusterName is the ClusterName of a Config that sets none.
const DefaultClusterName = "raftlock"

// validateGossip checks the gossip fields of c (Validate calls it).
func (c Config) validateGossip() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, format: format, args: args}
	}
	gossipOn := c.GossipBindAddr != ""
	switch {
	case c.BootstrapExpect < 0:
		return bad("BootstrapExpect", "{BootstrapExpect} must be odd, from 1 to 9 (or 0: off), got %d", c.BootstrapExpect)
	case c.BootstrapExpect > 0 && voterCountError("BootstrapExpect", c.BootstrapExpect) != nil:
		return voterCountError("BootstrapExpect", c.BootstrapExpect)
	case c.BootstrapExpect > 0 && c.Bootstrap:
		return bad("BootstrapExpect", "{BootstrapExpect} and {Bootstrap} are exclusive: {BootstrapExpect} bootstraps once that many nodes see each other")
	case c.BootstrapExpect > 0 && len(c.Join) > 0:
		return bad("BootstrapExpect", "{BootstrapExpect} and {Join} are exclusive: list the members in {RetryJoin}")
	case c.BootstrapExpect > 0 && !gossipOn:
		return bad("GossipBindAddr", "{BootstrapExpect} needs gossip: set {GossipBindAddr}")
	case len(c.RetryJoin) > 0 && !gossipOn:
		return bad("GossipBindAddr", "{RetryJoin} needs gossip: set {GossipBindAddr}")
	case len(c.ClusterName) > 200:
		return bad("ClusterName", "{ClusterName} is longer than 200 bytes")
	case len(c.GossipKeys) > 0 && !gossipOn:
		return bad("GossipKeys", "{GossipKeys} encrypt gossip: set {GossipBindAddr} too")
	}
	for i, k := range c.GossipKeys {
		if l := len(k); l != 16 && l != 24 && l != 32 {
			return bad("GossipKeys", "{GossipKeys}[%d] is %d bytes; an AES key is 16, 24 or 32 bytes (base64 of 16 random bytes: head -c16 /dev/urandom | base64)", i, l)
		}
	}
	for i, addr := range c.RetryJoin {
		if strings.TrimSpace(addr) == "" {
			return bad("RetryJoin", "{RetryJoin}[%d] is empty", i)
		}
	}
	if gossipOn {
		if _, _, err := membership.SplitGossipAddr(c.GossipBindAddr); err != nil {
			return bad("GossipBindAddr", "{GossipBindAddr} %q: %v", c.GossipBindAddr, err)
		}
	}
	if c.GossipAdvertiseAddr != "" {
		host, _, err := membership.SplitGossipAddr(c.GossipAdvertiseAddr)
		if err == nil && net.ParseIP(host) == nil {
			err = errors.New("the host must be an IP address")
		}
		if err != nil {
			return bad("GossipAdvertiseAddr", "{GossipAdvertiseAddr} %q: %v", c.GossipAdvertiseAddr, err)
		}
	}
	return nil
}

// clusterName is Config.ClusterName or its default.
func (c Config) clusterName() string {
	if c.ClusterName == "" {
		return DefaultClusterName
	}
	return c.ClusterName
}
