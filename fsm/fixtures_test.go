package fsm

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"
)

const ms = time.Millisecond

// owners used across tests. Their byte order (ownerC < ownerA < ownerB) is
// deliberately different from their letters, so tie tests show that order
// comes from the owner's bytes, not from the order of arrival.
var (
	ownerA = Owner{0x20, 15: 1}
	ownerB = Owner{0x30, 15: 2}
	ownerC = Owner{0x10, 15: 3}
	ownerD = Owner{0x40, 15: 4}
)

// numberedOwner is the i-th of many distinct owners.
func numberedOwner(i int) Owner {
	return Owner{0xff, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i), 15: 0xee}
}

func acquire(at time.Duration, key string, o Owner, ttl, wait time.Duration) Command {
	return Command{Op: OpAcquire, Stamp: at, Key: key, Owner: o, TTL: ttl, Wait: wait}
}

func release(at time.Duration, key string, o Owner) Command {
	return Command{Op: OpRelease, Stamp: at, Key: key, Owner: o}
}

func extend(at time.Duration, key string, o Owner, ttl time.Duration) Command {
	return Command{Op: OpExtend, Stamp: at, Key: key, Owner: o, TTL: ttl}
}

func cancelWait(at time.Duration, key string, o Owner) Command {
	return Command{Op: OpCancelWait, Stamp: at, Key: key, Owner: o}
}

func forceRelease(at time.Duration, key string) Command {
	return Command{Op: OpForceRelease, Stamp: at, Key: key}
}

func tick(at time.Duration) Command { return Command{Op: OpTick, Stamp: at} }

func createSession(at time.Duration, id Owner, ttl, delay time.Duration) Command {
	return Command{Op: OpSessionCreate, Stamp: at, Session: id, TTL: ttl, LockDelay: delay}
}

func renewSession(at time.Duration, id Owner) Command {
	return Command{Op: OpSessionRenew, Stamp: at, Session: id}
}

func destroySession(at time.Duration, id Owner) Command {
	return Command{Op: OpSessionDestroy, Stamp: at, Session: id}
}

// acquireIn acquires key for o bound to session id, with metadata meta.
func acquireIn(at time.Duration, key string, o, id Owner, wait time.Duration, meta string) Command {
	return Command{Op: OpAcquire, Stamp: at, Key: key, Owner: o, Session: id, Wait: wait, Meta: meta}
}

// acquireKind is acquire of a semaphore (limit > 0) or, with limit 0, of
// a read/write key (shared or not).
func acquireKind(at time.Duration, key string, o Owner, ttl, wait time.Duration, limit int, shared bool) Command {
	c := Command{Op: OpAcquire, Stamp: at, Key: key, Owner: o, TTL: ttl, Wait: wait, Kind: KindRW, Shared: shared}
	if limit > 0 {
		c.Kind, c.Limit, c.Shared = KindSemaphore, limit, false
	}
	return c
}

func newTerm(at time.Duration) Command { return Command{Op: OpNewTerm, Stamp: at} }

func dropUnclaimed(at time.Duration) Command { return Command{Op: OpDropUnclaimed, Stamp: at} }

// recorder is a machine with its events captured.
type recorder struct {
	*Machine
	events []Event
}

func newRecorder() *recorder {
	r := &recorder{}
	r.Machine = New(func(e Event) { r.events = append(r.events, e) })
	return r
}

// apply applies c and returns its result and the events it caused.
func (r *recorder) apply(c Command) (Result, []Event) {
	r.events = nil
	res := r.Apply(c)
	return res, r.events
}

// checkInternals verifies the machine's internal invariants: the deadline
// index is a heap whose positions are mirrored in entries and waiters, holds
// exactly the pending deadlines, and nothing pending is already due; the key
// order holds exactly the map's entries, in ascending key order.
func checkInternals(m *Machine) error {
	if err := checkReleases(m); err != nil {
		return err
	}
	want, unclaimed, waiters := 0, 0, 0
	refs := map[*session]map[string]int{}
	for id, s := range m.sessions {
		if s.id != id || s.refs == nil {
			return fmt.Errorf("session %x: bad record", id)
		}
		if s.expiresAt <= m.now {
			return fmt.Errorf("session %x: ended at %v but now is %v", id, s.expiresAt, m.now)
		}
		if i := s.end.index; i < 0 || i >= len(m.deadlines.others) || m.deadlines.others[i].session() != s || m.deadlines.others[i].at != s.expiresAt || s.end.owner != s.id {
			return fmt.Errorf("session %x: not at its index %d", id, i)
		}
		refs[s] = map[string]int{}
		want++
	}
	ref := func(s *session, key string) error {
		if s == nil {
			return nil
		}
		if m.sessions[s.id] != s {
			return fmt.Errorf("key %q: bound to session %x that has ended", key, s.id)
		}
		refs[s][key]++
		return nil
	}
	withMore := 0
	for k, e := range m.keys.all() {
		if e.key() != k {
			return fmt.Errorf("entry under %q has key %q", k, e.key())
		}
		if m.vacant(e) {
			// Reserved: a multi-key waiter heads its queue and waits for
			// another of its keys.
			if w := m.waitQueue(e).first(); w == nil || w.set == nil {
				return fmt.Errorf("key %q: vacant but not reserved for a multi-key waiter", k)
			}
		} else if g := m.group(e); g != nil {
			n, err := checkGroup(m, e, g, ref)
			if err != nil {
				return err
			}
			want += n
		} else if e.token == 0 || e.token > m.lastToken || (e.owner.IsZero() && m.extras(e) != nil) || (m.extras(e) != nil && m.extras(e).session == nil && m.extras(e).meta == "" && m.extras(e).set == nil) {
			return fmt.Errorf("key %q: bad holder %x token %d (last %d)", k, e.owner, e.token, m.lastToken)
		}
		if err := ref(m.sess(e), k); err != nil {
			return err
		}
		if m.leaseEnd(e) <= m.now && !m.vacant(e) {
			return fmt.Errorf("key %q: lease ended at %v but now is %v", k, m.leaseEnd(e), m.now)
		}
		if m.vacant(e) {
			// no hold, no deadline
		} else if m.sess(e) != nil || m.group(e) != nil {
			if e.index != -1 {
				return fmt.Errorf("key %q: session-bound holder (or group) has a lease index %d", k, e.index)
			}
		} else {
			if e.index < 0 || int(e.index) >= m.deadlines.leases.len() || m.deadlines.leases.at(int(e.index)).e.get() != e || m.deadlines.leases.at(int(e.index)).at != e.expiresAt {
				return fmt.Errorf("key %q: lease not at its index %d", k, e.index)
			}
			want++
		}
		if e.more != 0 {
			withMore++
			if m.extras(e) == nil && m.waitQueue(e) == nil {
				return fmt.Errorf("key %q: empty entryMore kept", k)
			}
		}
		if m.waitQueue(e) == nil {
			continue
		}
		if m.waitQueue(e).len() == 0 {
			return fmt.Errorf("key %q: empty queue kept", k)
		}
		n := 0
		var prev *waiter
		for w := m.waitQueue(e).head; w != nil; w = w.next {
			n++
			if w.prev != prev {
				return fmt.Errorf("key %q: broken back link", k)
			}
			prev = w
			if w.owner == e.owner || (m.group(e) != nil && m.group(e).holders.find(w.owner) != nil) {
				return fmt.Errorf("key %q: holder %x also waits", k, w.owner)
			}
			if w.held || (w.shared && (m.group(e) == nil || m.group(e).kind != KindRW)) {
				return fmt.Errorf("key %q: waiter %x marked held, or shared on a key that is not read/write", k, w.owner)
			}
			if err := ref(w.session, k); err != nil {
				return err
			}
			waiters++
			if m.waitQueue(e).byOwner[w.owner] != w {
				return fmt.Errorf("key %q: waiter %x missing from index", k, w.owner)
			}
			if w.epoch > m.epoch {
				return fmt.Errorf("key %q: waiter %x of epoch %d, machine's is %d", k, w.owner, w.epoch, m.epoch)
			}
			if w.epoch != m.epoch {
				unclaimed++
			}
			if w.deadline <= m.now {
				return fmt.Errorf("key %q: waiter %x past its deadline", k, w.owner)
			}
			if w.index < 0 || w.index >= len(m.deadlines.others) || m.deadlines.others[w.index].w != w || m.deadlines.others[w.index].e != e || m.deadlines.others[w.index].at != w.deadline {
				return fmt.Errorf("key %q: waiter %x not at its index", k, w.owner)
			}
			want++
		}
		if m.waitQueue(e).tail != prev || n != m.waitQueue(e).len() {
			return fmt.Errorf("key %q: queue length %d, index %d", k, n, m.waitQueue(e).len())
		}
	}
	// Every place in use in the table of extras and queues is a key's: a
	// key that went without giving its place back would keep it, and what
	// it points to, for good.
	if m.inUse() != withMore {
		return fmt.Errorf("%d places of extras and queues in use, %d keys have one", m.inUse(), withMore)
	}
	// The key order holds exactly the map's entries, strictly ascending.
	if m.order.len() != m.keys.len() {
		return fmt.Errorf("key order holds %d keys, the map %d", m.order.len(), m.keys.len())
	}
	var orderErr error
	prev := ""
	m.order.ascend("", func(e *entry) bool {
		switch {
		case m.keys.get(e.key()) != e:
			orderErr = fmt.Errorf("key order holds %q, which is not the map's entry", e.key())
		case e.key() <= prev:
			orderErr = fmt.Errorf("key order not ascending: %q after %q", e.key(), prev)
		}
		prev = e.key()
		return orderErr == nil
	})
	if orderErr != nil {
		return orderErr
	}
	if m.deadlines.len() != want {
		return fmt.Errorf("deadline index holds %d, want %d", m.deadlines.len(), want)
	}
	if m.Unclaimed() != unclaimed {
		return fmt.Errorf("Unclaimed is %d, but %d are", m.Unclaimed(), unclaimed)
	}
	if m.Waiters() != waiters {
		return fmt.Errorf("Waiters is %d, but %d wait", m.Waiters(), waiters)
	}
	if err := checkSets(m); err != nil {
		return err
	}
	for s, want := range refs {
		if !maps.Equal(s.refs, want) {
			return fmt.Errorf("session %x: refs %v, want %v", s.id, s.refs, want)
		}
	}
	for i := 1; i < len(m.deadlines.others); i++ {
		if m.deadlines.others[i].before(&m.deadlines.others[(i-1)/2]) {
			return fmt.Errorf("deadline index not a heap at %d", i)
		}
	}
	for i := 1; i < m.deadlines.leases.len(); i++ {
		if m.deadlines.leases.at(i).before(m.deadlines.leases.at((i - 1) / 2)) {
			return fmt.Errorf("lease ends not a heap at %d", i)
		}
	}
	return nil
}

// checkGroup checks a semaphore or read/write key's holders and returns
// how many deadlines they have in the index: within the kind's bound,
// tokens ascending in grant order, each lease or lock-delay at its index,
// session-bound ones bound to a live session, and the head waiter not
// fitting (strict FIFO: whoever fits is granted at once).
func checkGroup(m *Machine, e *entry, g *group, ref func(*session, string) error) (int, error) {
	k := e.key()
	if !e.owner.IsZero() || e.token != 0 || m.extras(e).session != nil || m.extras(e).meta != "" {
		return 0, fmt.Errorf("key %q: group entry with holder fields set", k)
	}
	n := g.holders.len()
	switch {
	case n == 0:
		return 0, fmt.Errorf("key %q: group without holders", k)
	case g.kind == KindSemaphore && (g.limit < 1 || g.limit > MaxHolders || n > g.limit || g.exclusive):
		return 0, fmt.Errorf("key %q: semaphore of %d with %d holders (exclusive %v)", k, g.limit, n, g.exclusive)
	case g.kind == KindRW && (g.limit != 0 || (g.exclusive && n != 1) || n > MaxHolders):
		return 0, fmt.Errorf("key %q: read/write key with %d holders, exclusive %v", k, n, g.exclusive)
	case g.kind != KindSemaphore && g.kind != KindRW:
		return 0, fmt.Errorf("key %q: group of kind %v", k, g.kind)
	}
	if w := m.waitQueue(e).first(); w != nil && g.fits(w.shared) {
		return 0, fmt.Errorf("key %q: head waiter %x fits but waits", k, w.owner)
	}
	deadlines, count := 0, 0
	var prev *waiter
	var prevToken uint64
	for h := g.holders.head; h != nil; h = h.next {
		count++
		if h.prev != prev || !h.held || g.holders.byOwner[h.owner] != h {
			return 0, fmt.Errorf("key %q: holder %x badly linked", k, h.owner)
		}
		prev = h
		if h.token <= prevToken || h.token > m.lastToken {
			return 0, fmt.Errorf("key %q: holder token %d after %d (last %d)", k, h.token, prevToken, m.lastToken)
		}
		prevToken = h.token
		if g.kind == KindRW && h.shared == g.exclusive {
			return 0, fmt.Errorf("key %q: holder mode differs from the key's", k)
		}
		if h.end() <= m.now {
			return 0, fmt.Errorf("key %q: holder %x ended at %v, now %v", k, h.owner, h.end(), m.now)
		}
		if h.session != nil {
			if h.delayed || h.index != -1 {
				return 0, fmt.Errorf("key %q: session-bound holder delayed or indexed", k)
			}
			if err := ref(h.session, k); err != nil {
				return 0, err
			}
			continue
		}
		if h.index < 0 || h.index >= len(m.deadlines.others) || m.deadlines.others[h.index].w != h || m.deadlines.others[h.index].e != e || m.deadlines.others[h.index].at != h.deadline {
			return 0, fmt.Errorf("key %q: holder %x not at its index", k, h.owner)
		}
		deadlines++
	}
	if count != n || g.holders.tail != prev {
		return 0, fmt.Errorf("key %q: holder list of %d, index %d", k, count, n)
	}
	return deadlines, nil
}

// earliestDeadline finds the next deadline by brute force.
func earliestDeadline(m *Machine) (time.Duration, bool) {
	var best time.Duration
	found := false
	for _, s := range m.sessions {
		if !found || s.expiresAt < best {
			best, found = s.expiresAt, true
		}
	}
	for _, e := range m.keys.all() {
		if g := m.group(e); g != nil {
			for h := g.holders.head; h != nil; h = h.next {
				if h.session == nil && (!found || h.deadline < best) {
					best, found = h.deadline, true
				}
			}
		} else if m.sess(e) == nil && !m.vacant(e) && (!found || e.expiresAt < best) {
			best, found = e.expiresAt, true
		}
		if m.waitQueue(e) != nil {
			for w := m.waitQueue(e).head; w != nil; w = w.next {
				if !found || w.deadline < best {
					best, found = w.deadline, true
				}
			}
		}
	}
	return best, found
}

// holders lists, in key order, the key=owner:token of every held key.
func holders(m *Machine) []string {
	var out []string
	for k, e := range m.keys.all() {
		out = append(out, fmt.Sprintf("%s=%x:%d", k, e.owner[:1], e.token))
	}
	sort.Strings(out)
	return out
}

// commandLog generates random command logs from a seed: a few keys and
// owners so that contention, queues, expiry and retries are common; stamps
// that mostly advance and sometimes step back a little (as batched commands
// stamped on a leader do); and a sprinkle of invalid commands.
type commandLog struct {
	r        *rand.Rand
	clock    time.Duration
	keys     []string // mutexes
	groups   []string // semaphores and read/write keys: groupKeys
	owners   []Owner
	sessions []Owner
}

// groupKeys are the keys the command log takes as semaphores ("sem", of 2,
// sometimes asked with 3: a mismatch, or a semaphore of 3 when it creates
// the key) and read/write keys ("rw", sometimes asked as a semaphore).
var groupKeys = []string{"rw", "sem"}

func newCommandLog(seed uint64) *commandLog {
	g := &commandLog{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	g.keys = []string{"a", "jobs/1", "jobs/2"}
	g.groups = groupKeys
	for i := range 5 {
		g.owners = append(g.owners, Owner{byte(0x10 * (5 - i)), 15: byte(i + 1)})
	}
	for i := range 3 {
		g.sessions = append(g.sessions, Owner{0xee, byte(i + 1)})
	}
	return g
}

func (g *commandLog) next() Command {
	g.clock += time.Duration(g.r.IntN(1000)) * time.Microsecond
	stamp := g.clock
	if g.r.IntN(5) == 0 {
		stamp = max(0, stamp-time.Duration(g.r.IntN(2000))*time.Microsecond)
	}
	key := g.keys[g.r.IntN(len(g.keys))]
	o := g.owners[g.r.IntN(len(g.owners))]
	ttl := time.Duration(1+g.r.IntN(20)) * ms
	var wait time.Duration
	if g.r.IntN(2) == 0 {
		wait = time.Duration(1+g.r.IntN(30000)) * time.Microsecond
	}
	sess := g.sessions[g.r.IntN(len(g.sessions))]
	var meta string
	if g.r.IntN(4) == 0 {
		meta = "m" + strconv.Itoa(g.r.IntN(3))
	}
	switch n := g.r.IntN(160); {
	case n >= 120:
		return g.groupCommand(stamp, o, ttl, wait, sess, meta)
	case n >= 100:
		switch n {
		case 100, 101, 102:
			return createSession(stamp, sess, time.Duration(1+g.r.IntN(30))*ms, time.Duration(g.r.IntN(3))*ms)
		case 103, 104, 105, 106, 107:
			return renewSession(stamp, sess)
		case 108:
			return destroySession(stamp, sess)
		default:
			return acquireIn(stamp, key, o, sess, wait, meta)
		}
	case n < 45:
		if meta != "" {
			c := acquire(stamp, key, o, ttl, wait)
			c.Meta = meta
			return c
		}
		return acquire(stamp, key, o, ttl, wait)
	case n < 65:
		return release(stamp, key, o)
	case n < 75:
		return extend(stamp, key, o, ttl)
	case n < 85:
		return cancelWait(stamp, key, o)
	case n < 93:
		return tick(stamp)
	case n < 94:
		return newTerm(stamp)
	case n < 95:
		return dropUnclaimed(stamp)
	case n < 97:
		if g.r.IntN(4) == 0 {
			// A key nobody takes, so that a force-release of a free key
			// is in every log, however busy sessions keep the others.
			return forceRelease(stamp, "free")
		}
		return forceRelease(stamp, key)
	default:
		return acquire(stamp, key, o, 0, wait) // invalid: no TTL
	}
}

// groupCommand is a command on a semaphore or read/write key.
func (g *commandLog) groupCommand(stamp time.Duration, o Owner, ttl, wait time.Duration, sess Owner, meta string) Command {
	key := g.groups[g.r.IntN(len(g.groups))]
	limit, shared := 0, g.r.IntN(3) > 0
	if key == "sem" {
		limit = 2
		if g.r.IntN(10) == 0 {
			limit = 3
		}
	} else if g.r.IntN(15) == 0 {
		limit = 2
	}
	var c Command
	switch n := g.r.IntN(20); {
	case n < 10:
		c = acquireKind(stamp, key, o, ttl, wait, limit, shared)
		c.Meta = meta
		if g.r.IntN(5) == 0 {
			c.TTL, c.Session = 0, sess
		}
		return c
	case n < 14:
		return release(stamp, key, o)
	case n < 16:
		return extend(stamp, key, o, ttl)
	case n < 19:
		return cancelWait(stamp, key, o)
	default:
		return forceRelease(stamp, key)
	}
}

func (g *commandLog) take(n int) []Command {
	cmds := make([]Command, n)
	for i := range cmds {
		cmds[i] = g.next()
	}
	return cmds
}

// randomSeeds returns the seeds a randomized test runs: a few by default,
// FSM_SEEDS=n for a longer run, FSM_SEED=s to replay one reported seed.
func randomSeeds(t *testing.T, short int) []uint64 {
	if s := os.Getenv("FSM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FSM_SEED: %v", err)
		}
		return []uint64{v}
	}
	n := short
	if s := os.Getenv("FSM_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("FSM_SEEDS: %v", err)
		}
		n = v
	}
	base := uint64(time.Now().UnixNano())
	seeds := []uint64{1, 2, 3}
	for i := 0; len(seeds) < n; i++ {
		seeds = append(seeds, base+uint64(i))
	}
	return seeds[:n]
}

// checkSets verifies the multi-key acquisitions: each is in the index by
// its owner; a held one holds every one of its keys (never a partial
// grant) with one token, one lease end and one holderExtra, and holds no
// other key through that holderExtra; a waiting one has one record in
// each of its keys' queues, all alike, and cannot be granted (some key is
// held or another waiter is ahead of it); every set record or set holder
// found in the keys belongs to an indexed set.
func checkSets(m *Machine) error {
	for o, s := range m.sets {
		if s.owner != o || len(s.entries) == 0 || len(s.entries) > MaxKeys {
			return fmt.Errorf("set of %x: bad record", o[:2])
		}
		for i, e := range s.entries {
			if m.keys.get(e.key()) != e {
				return fmt.Errorf("set of %x: key %q not in the machine", o[:2], e.key())
			}
			if i > 0 && e.key() <= s.entries[i-1].key() {
				return fmt.Errorf("set of %x: keys not ascending", o[:2])
			}
		}
		if s.waits == nil {
			first := s.entries[0]
			for _, e := range s.entries {
				if e.owner != o || m.extras(e) != s.extra || s.extra.set != s || e.token != first.token || e.expiresAt != first.expiresAt || m.group(e) != nil {
					return fmt.Errorf("set of %x: partial or inconsistent grant at %q", o[:2], e.key())
				}
			}
			continue
		}
		if len(s.waits) != len(s.entries) {
			return fmt.Errorf("set of %x: %d records for %d keys", o[:2], len(s.waits), len(s.entries))
		}
		for i, w := range s.waits {
			e := s.entries[i]
			if m.waitQueue(e).find(o) != w || w.set != s || w.ttl != s.waits[0].ttl || w.deadline != s.waits[0].deadline || w.epoch != s.waits[0].epoch || w.meta != s.waits[0].meta {
				return fmt.Errorf("set of %x: record on %q missing or unlike the others", o[:2], e.key())
			}
		}
		if s.ready(&m.moreTable) {
			return fmt.Errorf("set of %x: could be granted but waits", o[:2])
		}
	}
	for k, e := range m.keys.all() {
		if st := m.set(e); st != nil && (m.sets[st.owner] != st || st.waits != nil) {
			return fmt.Errorf("key %q: held by a set not in the index", k)
		}
		for w := m.waitQueue(e).first(); w != nil; w = w.next {
			if w.set != nil && m.sets[w.owner] != w.set {
				return fmt.Errorf("key %q: set waiter %x not in the index", k, w.owner[:2])
			}
		}
	}
	return nil
}

// checkReleases verifies the remembered releases: the list and the index
// agree, times are in order and within ReleaseMemory, at most
// MaxRememberedReleases, and none is for an owner that holds or waits for
// the key again (or a session that is live again).
func checkReleases(m *Machine) error {
	r := &m.released
	n := 0
	var prev *releaseRecord
	for rec := r.head; rec != nil; rec = rec.next {
		n++
		switch {
		case rec.prev != prev:
			return fmt.Errorf("release %q: broken back link", rec.id.key)
		case r.byID[rec.id] != rec:
			return fmt.Errorf("release %q: missing from the index", rec.id.key)
		case prev != nil && rec.at < prev.at, rec.at > m.now, rec.at+ReleaseMemory <= m.now:
			return fmt.Errorf("release %q at %v: out of order or kept too long (now %v)", rec.id.key, rec.at, m.now)
		}
		if rec.id.key == "" {
			if m.sessions[rec.id.owner] != nil {
				return fmt.Errorf("destroy of session %x remembered while it is live", rec.id.owner)
			}
		} else if e := m.keys.get(rec.id.key); e != nil && (e.owner == rec.id.owner || m.waitQueue(e).find(rec.id.owner) != nil || m.group(e) != nil && m.group(e).holders.find(rec.id.owner) != nil) {
			return fmt.Errorf("release %q by %x remembered while it holds or waits for the key", rec.id.key, rec.id.owner)
		}
		prev = rec
	}
	if prev != r.tail || n != len(r.byID) || n > MaxRememberedReleases {
		return fmt.Errorf("releases: list of %d, index of %d", n, len(r.byID))
	}
	return nil
}
