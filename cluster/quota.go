package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodestatus"
	"github.com/raftlock/raftlock/lock"
)

// Quotas: bounds on the state clients can make every member hold in
// memory. Every member keeps the whole lock table, so a client that takes
// unique keys in a loop, or opens sessions in a loop, would otherwise grow
// every member at once until all of them run out of memory together (the
// service, and the application each one is embedded in, with it).
// Config.MaxLocks bounds the locks: the keys with any state (a holder, a
// lock-delay, or waiters) and each further hold of a semaphore or
// read/write key (fsm.Machine.ExtraHolds). Config.MaxSessions bounds the
// sessions, Config.MaxTotalWaiters the callers queued over all keys (a
// multi-key wait counts once per key; each key also has at most
// lock.MaxWaiters). A waiter granted a semaphore or read/write key by a
// hand-off becomes a hold: admitted as a waiter, it is never refused then.
//
// Where: the leader checks each command as it admits it, before it is
// proposed (admitQuota, called by the forwarding RPC's serve for commands
// and waiting acquires, which every call goes through, local or
// forwarded), against its own applied state: fsm.Machine.Growth says how
// much the command could add, and the command is refused with
// lock.ErrQuotaExceeded if that would pass a limit. Nothing refused is
// proposed, so no log entry, no state, nothing half-done.
//
// Why not in the state machine, with the limits carried in the log (exact,
// the same decision on every member): a quota is a memory guard, not a
// safety property. Being exact would put each limit and each change of it
// in the log (a new entry kind, a snapshot field, every member's version
// able to read them), for a bound that may be off by a batch either way
// without harm. Checked at admission it costs a few map lookups under the
// state machine's lock, a member's limits are its own configuration (set
// the same on every member: whoever leads enforces its own), and a leader
// change or a restart with other limits needs nothing. The price: commands
// admitted but not yet applied are not counted, so the state may pass a
// limit by the commands in flight at once (each caller has at most one),
// and an acquire admitted now may, applied a moment later, find its
// owner's hold ended and queue where it would have been answered "held".
// Both are bounded by the callers in flight.
//
// What is never refused: whatever frees or keeps state — release, extend,
// cancel-wait, force-release, session renew and destroy, ticks and
// expiries (the leader's own commands do not pass admission) — and an
// acquire repeated by the key's holder or by a caller queued for it (a
// waiting acquire sent again after a leader change claims its place), or a
// session create repeated for a session that exists: Growth is zero for all
// of them. A waiter already queued is never dropped by a limit, and a
// state that passed a limit (the limit was lowered, or a burst overshot)
// stays until it is freed; only new state waits for room.

// Default quotas: generous for a lock service, and a bound a default-sized
// host survives. Measured on the state machine alone
// (fsm.BenchmarkStateBytes, 16-byte keys, Go heap after a GC): a held lock
// costs about 180 bytes, 290 with 64 bytes of metadata, 1.25 KB with the
// most metadata (lock.MaxMetadataLen, 1 KiB); a semaphore key with one
// holder 640, each further hold 185; a session 185, and a lock bound to a
// session about 400 more;
// a queued waiter 205 (plus its metadata). So the defaults cost about
// 180 MB of locks (290 MB with 64-byte metadata; 1.25 GB in the worst case,
// every lock with 1 KiB of metadata), 18 MB of sessions and 20 MB of
// waiters (125 MB with the most metadata) per member, plus raft's log and
// a snapshot being restored. Raise them (or make them unlimited) on hosts
// sized for more.
const (
	DefaultMaxLocks        = 1_000_000
	DefaultMaxSessions     = 100_000
	DefaultMaxTotalWaiters = 100_000

	// Unlimited, as a quota of Config, turns it off.
	Unlimited = -1

	// maxQuota bounds a quota's value: past it (a few hundred GB of state
	// per member), a limit protects nothing; Unlimited says so.
	maxQuota = 1_000_000_000
)

// quota is one limit in force on a node and its refusals.
type quota struct {
	name    string // what it counts, for people: "sessions"
	field   string // its Config field
	flag    string // the agent's flag
	free    string // how clients free some
	max     int    // the limit, when limited
	limited bool
	refused atomic.Uint64
	// The refusals' warning is written once per quotaLogEvery per limit,
	// with the refusals since the last one.
	mu         sync.Mutex
	lastLog    time.Time
	unreported uint64
}

// quotaLogEvery spaces a limit's warnings: a client in a loop is refused
// thousands of times a second.
const quotaLogEvery = 30 * time.Second

// quotas are a node's limits.
type quotas struct {
	locks, sessions, waiters quota
}

func newQuotas(cfg Config) *quotas {
	limit := func(v, def int) (int, bool) {
		switch {
		case v == Unlimited:
			return 0, false
		case v == 0:
			return def, true
		}
		return v, true
	}
	q := &quotas{
		locks: quota{name: "locks (keys with a holder or waiters, and each further hold of a semaphore or read/write key)", field: "MaxLocks", flag: "-max-locks",
			free: "release locks, or destroy the sessions that hold them"},
		sessions: quota{name: "sessions", field: "MaxSessions", flag: "-max-sessions",
			free: "destroy sessions no longer used"},
		waiters: quota{name: "callers queued over all keys", field: "MaxTotalWaiters", flag: "-max-total-waiters",
			free: "stop waiting callers, or release the keys they wait for"},
	}
	q.locks.max, q.locks.limited = limit(cfg.MaxLocks, DefaultMaxLocks)
	q.sessions.max, q.sessions.limited = limit(cfg.MaxSessions, DefaultMaxSessions)
	q.waiters.max, q.waiters.limited = limit(cfg.MaxTotalWaiters, DefaultMaxTotalWaiters)
	return q
}

// admitQuota refuses, with lock.ErrQuotaExceeded, a command that could
// add state past one of the node's limits by its applied state; see
// "Quotas" above. It is called at the leader of term t, before proposing.
// It first waits for the term to be ready: until then the state machine
// may not have applied what earlier leaders committed, and a retry whose
// first attempt did commit (a waiter's place, a grant) would be counted as
// new. Its other errors are until's.
func (n *Node) admitQuota(ctx context.Context, t *leaderTerm, cmd fsm.Command) error {
	switch cmd.Op {
	case fsm.OpAcquire, fsm.OpAcquireAll, fsm.OpSessionCreate:
	default:
		return nil // frees or keeps state
	}
	q := n.quotas
	if !q.locks.limited && !q.sessions.limited && !q.waiters.limited {
		return nil
	}
	// Far from every limit (the usual case), no command can reach one:
	// admitted without waiting for the term or taking the machine's lock,
	// which every apply holds.
	if quotasFit(q, fsm.MaxGrowth(cmd), n.sm.usage()) {
		return nil
	}
	if err := n.until(ctx, t, t.ready); err != nil {
		return err
	}
	g, used := n.sm.growth(cmd)
	for _, c := range []struct {
		q    *quota
		adds int
		used int
	}{
		{&q.locks, g.Keys + g.Holds, used.locks},
		{&q.waiters, g.Waiters, used.waiters},
		{&q.sessions, g.Sessions, used.sessions},
	} {
		if c.adds > 0 && c.q.limited && c.used+c.adds > c.q.max {
			err := fmt.Errorf("%w: this cluster keeps at most %d %s (%s, the agent's %s), and holds %d: %s, or raise the limit on every member",
				lock.ErrQuotaExceeded, c.q.max, c.q.name, c.q.field, c.q.flag, c.used, c.q.free)
			c.q.refused.Add(1)
			c.q.warn(n, err, cmd)
			return err
		}
	}
	return nil
}

// quotasFit says whether growth g on top of used stays within every limit.
func quotasFit(q *quotas, g fsm.Growth, used quotaUse) bool {
	fits := func(q *quota, adds, used int) bool { return adds == 0 || !q.limited || used+adds <= q.max }
	return fits(&q.locks, g.Keys+g.Holds, used.locks) && fits(&q.waiters, g.Waiters, used.waiters) &&
		fits(&q.sessions, g.Sessions, used.sessions)
}

// warn logs a refusal, at most once per quotaLogEvery.
func (q *quota) warn(n *Node, err error, cmd fsm.Command) {
	now := time.Now()
	q.mu.Lock()
	q.unreported++
	if !q.lastLog.IsZero() && now.Sub(q.lastLog) < quotaLogEvery {
		q.mu.Unlock()
		return
	}
	refused := q.unreported
	q.lastLog, q.unreported = now, 0
	q.mu.Unlock()
	key := cmd.Key
	if cmd.Op == fsm.OpAcquireAll && len(cmd.Keys) > 0 {
		key = cmd.Keys[0]
	}
	n.log.Warn("refusing new state: a quota is reached", "quota", q.field, "limit", q.max, "refused", refused,
		"op", cmd.Op.String(), "key", key, "error", err.Error(), "every", quotaLogEvery)
}

// QuotaUsage is one quota of a node: its limit and its use.
type QuotaUsage = nodestatus.Quota

// Quotas is a node's quotas: see Config.MaxLocks, MaxSessions and
// MaxTotalWaiters.
type Quotas = nodestatus.Quotas

func (q *quota) usage(used int) QuotaUsage {
	u := QuotaUsage{Used: used, Refused: q.refused.Load()}
	if q.limited {
		u.Limit = q.max
	}
	return u
}
