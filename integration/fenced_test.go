package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// The fenced-register workload. Clients take one lock and, while they hold
// it, increment a shared register by reading it and writing it back, passing
// their fencing token with every read and write. The register (the resource
// the lock protects) refuses a token lower than the highest it has seen, on
// reads and writes alike.
//
// Every holder notes its window: from the moment its acquire returned to
// the moment it let go (it sent its release) or its lease may have ended,
// whichever came first. The lease's end is the holder's own conservative
// figure, the time it sent the acquire (or last extend) plus the Remaining
// it was told. The checker then demands:
//
//   - no two windows of different tokens overlap: the lock was never held
//     twice at once, and no lease ended in the cluster before its holder's
//     own deadline: the time it sent the acquire plus the Remaining the
//     leader gave from its log clock when it answered;
//   - the register never refused a holder inside its window: a refusal
//     means a higher token reached the register while the lower one was
//     still valid;
//   - no update was lost: every accepted write is the previous accepted
//     value plus one.
//
// With TTLs longer than the run no lease expires, so nothing may ever be
// refused. With short TTLs (expiry mode) holders sometimes stall past their
// lease without noticing (a GC pause, simulated by sleeping, or a SIGSTOP of
// a client process) and then write anyway: the register must refuse them
// once the next holder has used it, and the checks above must still hold.

// register is the fenced resource.
type register struct {
	mu      sync.Mutex // protects the fields below
	highest uint64
	value   int64
	events  []regEvent
}

// regEvent is one read or write the register saw; at is wall-clock
// nanoseconds, comparable with the windows of client processes on this host.
type regEvent struct {
	at     int64
	client int
	token  uint64
	write  bool
	value  int64 // read: the value returned; write: the value written
	ok     bool
}

// read returns the value if token is not stale.
func (r *register) read(client int, token uint64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := token >= r.highest
	if ok {
		r.highest = token
	}
	r.events = append(r.events, regEvent{at: time.Now().UnixNano(), client: client, token: token, value: r.value, ok: ok})
	return r.value, ok
}

// write stores value if token is not stale.
func (r *register) write(client int, token uint64, value int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := token >= r.highest
	if ok {
		r.highest, r.value = token, value
	}
	r.events = append(r.events, regEvent{at: time.Now().UnixNano(), client: client, token: token, write: true, value: value, ok: ok})
	return ok
}

// ServeHTTP lets client processes use the register:
// GET /read?client=C&token=T and GET /write?client=C&token=T&value=V
// answer {"value":V,"ok":B}.
func (r *register) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	client, err1 := strconv.Atoi(q.Get("client"))
	token, err2 := strconv.ParseUint(q.Get("token"), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ans regAnswer
	switch req.URL.Path {
	case "/read":
		ans.Value, ans.OK = r.read(client, token)
	case "/write":
		v, err := strconv.ParseInt(q.Get("value"), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ans.Value, ans.OK = v, r.write(client, token, v)
	default:
		http.NotFound(w, req)
		return
	}
	json.NewEncoder(w).Encode(ans)
}

type regAnswer struct {
	Value int64 `json:"value"`
	OK    bool  `json:"ok"`
}

// registerAPI is the register as a holder uses it: directly, or over HTTP
// from a client process.
type registerAPI interface {
	read(client int, token uint64) (int64, bool, error)
	write(client int, token uint64, value int64) (bool, error)
}

type localRegister struct{ r *register }

func (l localRegister) read(client int, token uint64) (int64, bool, error) {
	v, ok := l.r.read(client, token)
	return v, ok, nil
}

func (l localRegister) write(client int, token uint64, value int64) (bool, error) {
	return l.r.write(client, token, value), nil
}

type httpRegister struct {
	base string
	hc   *http.Client
}

func (h httpRegister) get(path string, q url.Values) (regAnswer, error) {
	resp, err := h.hc.Get(h.base + path + "?" + q.Encode())
	if err != nil {
		return regAnswer{}, err
	}
	defer resp.Body.Close()
	var ans regAnswer
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return ans, fmt.Errorf("register: %s: %s", resp.Status, body)
	}
	return ans, json.NewDecoder(resp.Body).Decode(&ans)
}

func (h httpRegister) read(client int, token uint64) (int64, bool, error) {
	ans, err := h.get("/read", url.Values{"client": {strconv.Itoa(client)}, "token": {strconv.FormatUint(token, 10)}})
	return ans.Value, ans.OK, err
}

func (h httpRegister) write(client int, token uint64, value int64) (bool, error) {
	ans, err := h.get("/write", url.Values{"client": {strconv.Itoa(client)}, "token": {strconv.FormatUint(token, 10)}, "value": {strconv.FormatInt(value, 10)}})
	return ans.OK, err
}

// window is a span of wall-clock time in which a holder knew it held the lock.
type window struct {
	Client int    `json:"client"`
	Token  uint64 `json:"token"`
	Start  int64  `json:"start"` // its acquire returned
	End    int64  `json:"end"`   // it sent its release, or its own deadline passed
	// Sent is when its acquire was sent, and Shared says it was a read
	// hold of a read/write lock (kinds runs only).
	Sent   int64 `json:"sent,omitempty"`
	Shared bool  `json:"shared,omitempty"`
	// Keys is a multi-key run's set held (Multi runs only); Partial, when
	// not empty, is what the holder's reads found wrong with its grant:
	// a key of its set not held with its token while it held the set.
	Keys    []string `json:"keys,omitempty"`
	Partial string   `json:"partial,omitempty"`
	// GrantOnly: a grant its holder never used (its own deadline, counted
	// from the first attempt's send, had passed when the acquire returned
	// after retries across an outage), Start = End = when it returned. It
	// holds no span of time; it is kept so that the token-order check
	// knows the grant: the lease lives on in the cluster (a holding left
	// to run out), and the holder's next acquire, with the same owner, is
	// answered with it again, legitimately, with its lower token.
	GrantOnly bool `json:"grant_only,omitempty"`
}

// fencedConfig is how holders behave.
type fencedConfig struct {
	Key    string        `json:"key"`
	TTL    time.Duration `json:"ttl"`
	Wait   time.Duration `json:"wait"`
	Expiry bool          `json:"expiry"` // short TTLs: leases run out, holders stall and write late
	Stall  bool          `json:"stall"`  // holders simulate their own stalls (a sleep past the TTL)
	Work   time.Duration `json:"work"`   // between reading and writing the register, at most
	Writes int           `json:"writes"` // increments per holding, at most
	// Session: each holding creates a session of TTL, acquires under it
	// (the lock has no lease of its own), renews the session instead of
	// extending, and ends with a release, a destroy of the session, or (in
	// expiry mode) the session left to expire. Wait must be under TTL: a
	// waiting holder does not renew its session.
	Session bool `json:"session"`
	// Limit makes the key a semaphore of Limit holders, and RW a
	// read/write lock (a holding reads, shared, three times in four).
	// Several holders then hold at once, so they do not use the register
	// (whose fencing admits one holder); checkKindWindows checks their
	// windows instead: never more than Limit at once, never a writer with
	// anyone else, tokens growing.
	Limit int  `json:"limit,omitempty"`
	RW    bool `json:"rw,omitempty"`
	// Multi: each holding takes a random set of one to three of
	// multiKeys (under Key) all at once, or, one time in four, one key of
	// them alone; checkMultiWindows checks, key by key, one holder at a
	// time and tokens growing, and that no holder found a key of its set
	// not held with its token (never a partial grant).
	Multi bool `json:"multi,omitempty"`
}

// multiKeys are the keys, under fencedConfig.Key, that a Multi run's
// holdings take sets of.
var multiKeys = []string{"a", "b", "c", "d"}

// kinds reports whether the workload's key is a semaphore or a read/write
// lock, or a Multi run's sets: several holders at once (of different
// keys), so the register is not used.
func (c fencedConfig) kinds() bool { return c.Limit > 0 || c.RW || c.Multi }

// holderStats counts what one holder did.
type holderStats struct {
	Holds         int `json:"holds"`
	Writes        int `json:"writes"`         // accepted writes
	StaleRefused  int `json:"stale_refused"`  // reads or writes refused after the holder's window
	StaleAccepted int `json:"stale_accepted"` // late reads or writes nobody had overtaken yet
	Stalls        int `json:"stalls"`
	Unsure        int `json:"unsure"` // acquires whose outcome was unknown (released to be sure)
}

func (a *holderStats) add(b holderStats) {
	a.Holds += b.Holds
	a.Writes += b.Writes
	a.StaleRefused += b.StaleRefused
	a.StaleAccepted += b.StaleAccepted
	a.Stalls += b.Stalls
	a.Unsure += b.Unsure
}

// holder is one client of the fenced-register workload.
type holder struct {
	*workClient
	reg     registerAPI
	cfg     fencedConfig
	windows func(window)
	stats   holderStats
	key     string // the key its release and extend name: cfg.Key, or its set's first key
}

// safetyMargin: a careful holder stops using the lock this long before its
// deadline, to leave time for the write in flight.
const safetyMargin = 50 * time.Millisecond

// run takes the lock again and again until run ends.
func (h *holder) run(run, budget context.Context) {
	for run.Err() == nil {
		h.holdOnce(budget)
	}
}

func (h *holder) holdOnce(budget context.Context) {
	if h.cfg.Session {
		h.holdOnceInSession(budget)
		return
	}
	sent := time.Now()
	var lease lock.Lease
	var res callResult
	req := h.acquireRequest()
	h.key = req.Key
	if h.cfg.Wait > 0 && h.rng.IntN(6) == 0 {
		res = h.impatientAcquire(req, &lease)
	} else {
		res = h.call(budget, func(ctx context.Context, s lock.Store) error {
			var err error
			lease, err = acquireWith(ctx, s, req)
			return err
		})
	}
	if !res.known || res.err != nil {
		if res.unsure && (!res.known || !errors.Is(res.err, lock.ErrLocked)) {
			// It may hold the lock: give it back rather than block everyone
			// until the TTL.
			h.stats.Unsure++
			h.release(budget)
		}
		time.Sleep(time.Duration(h.rng.IntN(20)) * time.Millisecond)
		return
	}
	start := time.Now()
	deadline := sent.Add(lease.Remaining)
	h.stats.Holds++
	var partial string
	if req.Keys != nil {
		partial = h.checkSet(budget, req.Keys, lease.Token, deadline)
	}
	for i := 0; i < 1+h.rng.IntN(h.cfg.Writes); i++ {
		late := false
		if h.cfg.Stall && h.rng.IntN(8) == 0 {
			// Stall past the lease without noticing, then carry on.
			h.stats.Stalls++
			time.Sleep(h.cfg.TTL + between(h.rng, 0, h.cfg.TTL))
			late = true
		} else if time.Until(deadline) < safetyMargin {
			break // a careful holder stops when its lease may be over
		}
		if !h.work(lease.Token, deadline, late) {
			break
		}
		if h.rng.IntN(3) == 0 {
			extSent := time.Now()
			var ext lock.Lease
			res := h.call(budget, func(ctx context.Context, s lock.Store) error {
				var err error
				ext, err = s.Extend(ctx, h.key, h.owner, h.cfg.TTL)
				return err
			})
			if res.known && res.err == nil {
				deadline = extSent.Add(ext.Remaining)
			} else if res.known {
				break // lost it
			}
		}
	}
	end := time.Now()
	if end.After(deadline) {
		end = deadline
	}
	if end.After(start) || partial != "" {
		h.windows(window{Client: h.id, Token: lease.Token, Start: start.UnixNano(), End: max(end.UnixNano(), start.UnixNano()), Sent: sent.UnixNano(), Shared: req.Shared,
			Keys: multiWindowKeys(req), Partial: partial})
	} else {
		h.windows(window{Client: h.id, Token: lease.Token, Start: start.UnixNano(), End: start.UnixNano(), Sent: sent.UnixNano(), Shared: req.Shared,
			Keys: multiWindowKeys(req), GrantOnly: true})
	}
	if !h.cfg.Expiry || h.rng.IntN(4) != 0 {
		h.release(budget) // in expiry mode, one holding in four is left to run out
	}
}

// acquireRequest is the request of one holding: for the workload's kind of
// key (a read or a write, at random, of a read/write lock).
func (h *holder) acquireRequest() lock.AcquireRequest {
	req := lock.AcquireRequest{Key: h.cfg.Key, Owner: h.owner, TTL: h.cfg.TTL, Wait: h.cfg.Wait}
	switch {
	case h.cfg.Multi:
		// A fresh owner per holding: one owner is one set, and a holding
		// left to run out keeps its owner's set until then.
		h.owner = lock.NewOwner()
		req.Owner = h.owner
		var keys []string
		for _, k := range multiKeys {
			if h.rng.IntN(2) == 0 {
				keys = append(keys, h.cfg.Key+"/"+k)
			}
		}
		if len(keys) == 0 {
			keys = []string{h.cfg.Key + "/" + multiKeys[h.rng.IntN(len(multiKeys))]}
		}
		if len(keys) > 3 {
			keys = keys[h.rng.IntN(2):][:3]
		}
		req.Key = keys[0]
		if len(keys) > 1 || h.rng.IntN(4) != 0 {
			req.Keys = keys // else a single key's plain acquire, among the sets
		}
	case h.cfg.Limit > 0:
		req.Kind, req.Limit = lock.KindSemaphore, h.cfg.Limit
	case h.cfg.RW:
		req.Kind, req.Shared = lock.KindRWLock, h.rng.IntN(4) != 0
	}
	return req
}

// work uses the lock once while holding it with token: reads the register
// and writes it back incremented (or, in a kinds run, only spends the
// time). It reports whether the holding goes on.
func (h *holder) work(token uint64, deadline time.Time, late bool) bool {
	if h.cfg.kinds() {
		time.Sleep(between(h.rng, 0, h.cfg.Work))
		h.stats.Writes++
		return true
	}
	v, ok, err := h.reg.read(h.id, token)
	if err != nil {
		return false
	}
	h.countLate(late || time.Now().After(deadline), ok)
	if !ok {
		return false
	}
	time.Sleep(between(h.rng, 0, h.cfg.Work))
	ok, err = h.reg.write(h.id, token, v+1)
	if err != nil {
		return false
	}
	h.countLate(late || time.Now().After(deadline), ok)
	if !ok {
		return false
	}
	h.stats.Writes++
	return true
}

// impatientAcquire queues for the lock but gives up (its ctx ends) before
// its wait is over, as a caller with a deadline of its own does: the store
// must take it out of the queue, and give back a grant that raced with the
// cancel. One attempt, on the holder's current node.
func (h *holder) impatientAcquire(req lock.AcquireRequest, lease *lock.Lease) callResult {
	s := h.stores.store(h.node)
	if s == nil {
		return callResult{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), between(h.rng, h.cfg.Wait/10, h.cfg.Wait))
	defer cancel()
	var err error
	*lease, err = acquireWith(ctx, s, req)
	if !expectedError(err) && !errors.Is(err, context.Canceled) {
		h.unexpected.add(fmt.Errorf("client %d on node %d: %w", h.id, h.node, err))
	}
	res := callResult{err: err, known: err == nil || errors.Is(err, lock.ErrLocked), unsure: errors.Is(err, lock.ErrUnknownOutcome)}
	h.count(res)
	return res
}

func (h *holder) countLate(late, ok bool) {
	switch {
	case late && ok:
		h.stats.StaleAccepted++
	case late:
		h.stats.StaleRefused++
	}
}

func (h *holder) release(budget context.Context) {
	h.call(budget, func(ctx context.Context, s lock.Store) error {
		_, err := s.Release(ctx, h.key, h.owner)
		return err
	})
}

// acquireWith is req's acquire on s: a multi-key one when req has Keys.
func acquireWith(ctx context.Context, s lock.Store, req lock.AcquireRequest) (lock.Lease, error) {
	if req.Keys == nil {
		return s.Acquire(ctx, req)
	}
	ms, ok := s.(lock.MultiKeyStore)
	if !ok {
		return lock.Lease{}, fmt.Errorf("%T takes no multi-key locks: %w", s, errors.ErrUnsupported)
	}
	return ms.AcquireAll(ctx, req)
}

// multiWindowKeys is the keys a window of req covers: its set, or its key.
func multiWindowKeys(req lock.AcquireRequest) []string {
	if req.Keys != nil {
		return req.Keys
	}
	return []string{req.Key}
}

// checkSet reads every key of a set just granted with token: each must be
// held with that token (never a partial grant). A read that returns after
// the holder's deadline proves nothing (the lease may have ended) and a
// read that fails is skipped; it returns what it found wrong, or "".
func (h *holder) checkSet(budget context.Context, keys []string, token uint64, deadline time.Time) string {
	for _, k := range keys {
		var info lock.KeyInfo
		res := h.call(budget, func(ctx context.Context, s lock.Store) error {
			var err error
			info, err = s.Inspect(ctx, k)
			return err
		})
		if !res.known || res.err != nil || time.Now().After(deadline) {
			return ""
		}
		if !info.Locked || info.Token != token {
			return fmt.Sprintf("%q read as locked=%v token %d while its set %q was held with token %d", k, info.Locked, info.Token, keys, token)
		}
	}
	return ""
}

// checkMultiWindows checks a Multi run's windows: key by key, the windows
// that cover it as checkKindWindows checks a semaphore of 1 (one holder at
// a time, tokens growing), and no window with a partial grant.
func checkMultiWindows(windows []window) []string {
	var trouble []string
	byKey := map[string][]window{}
	for _, w := range windows {
		if w.Partial != "" {
			trouble = append(trouble, fmt.Sprintf("client %d: partial grant: %s", w.Client, w.Partial))
		}
		if w.End <= w.Start || w.GrantOnly {
			continue
		}
		for _, k := range w.Keys {
			byKey[k] = append(byKey[k], w)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range checkKindWindows(fencedConfig{Limit: 1}, byKey[k]) {
			trouble = append(trouble, fmt.Sprintf("key %q: %s", k, v))
		}
	}
	return trouble
}

// checkFenced checks the windows and the register's events (see the
// workload's comment) and returns what it found wrong.
func checkFenced(windows []window, events []regEvent) []string {
	var trouble []string
	windows = heldWindows(windows)
	ws := append([]window(nil), windows...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].Start < ws[j].Start })
	// Sweep: a window overlaps an earlier one if it starts before the
	// furthest end so far.
	var reach window
	for i, b := range ws {
		if i > 0 && b.Start < reach.End && b.Token != reach.Token {
			trouble = append(trouble, fmt.Sprintf("client %d (token %d) held the lock from %s while client %d (token %d) held it until %s",
				b.Client, b.Token, wallString(b.Start), reach.Client, reach.Token, wallString(reach.End)))
		}
		if i == 0 || b.End > reach.End {
			reach = b
		}
	}
	byHolding := map[[2]uint64][]window{}
	for _, w := range windows {
		k := [2]uint64{uint64(w.Client), w.Token}
		byHolding[k] = append(byHolding[k], w)
	}
	var last int64
	for _, e := range events {
		if !e.ok {
			for _, w := range byHolding[[2]uint64{uint64(e.client), e.token}] {
				if e.at >= w.Start && e.at < w.End {
					trouble = append(trouble, fmt.Sprintf("the register refused client %d's %s with token %d at %s, inside its window (until %s)",
						e.client, map[bool]string{true: "write", false: "read"}[e.write], e.token, wallString(e.at), wallString(w.End)))
				}
			}
			continue
		}
		if e.write {
			if e.value != last+1 {
				trouble = append(trouble, fmt.Sprintf("lost update: client %d (token %d) wrote %d after the register held %d", e.client, e.token, e.value, last))
			}
			last = e.value
		}
	}
	return trouble
}

// checkKindWindows checks the windows of a semaphore or read/write run:
// never more than cfg.Limit holders at once (a semaphore), never a writer
// with anyone else (a read/write lock), and tokens growing: a grant whose
// acquire was sent after another grant had returned has a higher token.
// Windows of one token (a holder's retry got its own grant back) count
// once.
func checkKindWindows(cfg fencedConfig, windows []window) []string {
	var trouble []string
	type edge struct {
		at    int64
		start bool
		w     window
	}
	var edges []edge
	for _, w := range mergeByToken(heldWindows(windows)) {
		edges = append(edges, edge{w.Start, true, w}, edge{w.End, false, w})
	}
	// Ends before starts at the same instant: a window is [Start, End).
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return !edges[i].start && edges[j].start
	})
	holders, writers := 0, 0
	for _, e := range edges {
		d := 1
		if !e.start {
			d = -1
		}
		holders += d
		if !e.w.Shared {
			writers += d
		}
		if !e.start {
			continue
		}
		switch {
		case cfg.Limit > 0 && holders > cfg.Limit:
			trouble = append(trouble, fmt.Sprintf("%d holders at once of a semaphore of %d at %s (client %d, token %d, joined)",
				holders, cfg.Limit, wallString(e.at), e.w.Client, e.w.Token))
		case cfg.RW && writers > 0 && holders > 1:
			trouble = append(trouble, fmt.Sprintf("a writer held the read/write lock with %d others at %s (client %d, token %d, joined)",
				holders-1, wallString(e.at), e.w.Client, e.w.Token))
		}
	}
	byStart := append([]window(nil), windows...)
	sort.Slice(byStart, func(i, j int) bool { return byStart[i].Start < byStart[j].Start })
	bySent := append([]window(nil), windows...)
	sort.Slice(bySent, func(i, j int) bool { return bySent[i].Sent < bySent[j].Sent })
	first := map[uint64]int64{} // each token's first window's start
	for _, w := range windows {
		if s, ok := first[w.Token]; !ok || w.Start < s {
			first[w.Token] = w.Start
		}
	}
	var highest window
	next := 0
	for _, b := range bySent {
		if first[b.Token] < b.Start {
			continue // a retry that got its own earlier grant back
		}
		for next < len(byStart) && byStart[next].Start < b.Sent {
			if byStart[next].Token > highest.Token {
				highest = byStart[next]
			}
			next++
		}
		if b.Token < highest.Token {
			trouble = append(trouble, fmt.Sprintf("client %d got token %d for an acquire sent at %s, after client %d was granted token %d",
				b.Client, b.Token, wallString(b.Sent), highest.Client, highest.Token))
		}
	}
	return trouble
}

// heldWindows is windows without the grants their holders never used
// (window.GrantOnly): the spans in which someone held the lock.
func heldWindows(windows []window) []window {
	held := make([]window, 0, len(windows))
	for _, w := range windows {
		if !w.GrantOnly {
			held = append(held, w)
		}
	}
	return held
}

// mergeByToken joins the windows of each token into one, from its first
// start to its last end.
func mergeByToken(windows []window) []window {
	byToken := map[uint64]window{}
	for _, w := range windows {
		m, ok := byToken[w.Token]
		if !ok {
			byToken[w.Token] = w
			continue
		}
		m.Start, m.End = min(m.Start, w.Start), max(m.End, w.End)
		byToken[w.Token] = m
	}
	out := make([]window, 0, len(byToken))
	for _, w := range byToken {
		out = append(out, w)
	}
	return out
}

func wallString(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000000") }

// newHolder makes a holder on stores.
func newHolder(id int, stores storeSet, reg registerAPI, cfg fencedConfig, rng *rand.Rand, unexpected *errorLog, windows func(window)) *holder {
	return &holder{
		workClient: &workClient{id: id, owner: lock.NewOwner(), stores: stores, node: id % stores.size(), rng: rng, unexpected: unexpected},
		reg:        reg,
		cfg:        cfg,
		windows:    windows,
		key:        cfg.Key,
	}
}
