package fsm

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// observer rebuilds, from Results and Events alone, who holds and who waits
// for each key, and checks every outcome against the rules: one holder per
// key, tokens strictly increasing, hand-offs in FIFO order, no owner both
// holding and waiting for a key.
type observer struct {
	holder    map[string]Owner
	token     map[string]uint64
	queue     map[string][]Owner
	lastToken uint64

	// Sessions: live ones with their end and lock-delay, the session each
	// holder and waiter is bound to, keys kept by a lock-delay, and the
	// session being ended by the command or event at hand.
	sessEnd    map[Owner]time.Duration
	sessDelay  map[Owner]time.Duration
	holderSess map[string]Owner
	waiterSess map[string]map[Owner]Owner
	delayed    map[string]bool
	expiring   Owner
	destroying *Owner
	released   int

	groups groupObserver // the semaphore and read/write keys
	cmd    Command       // the command at hand

	// remembered is the releases a repeat answers released: an owner's
	// release that ended its hold (a session's destroy, key ""), until the
	// owner acquires the key (creates the session) again.
	remembered map[releaseID]bool
}

func newObserver() *observer {
	return &observer{holder: map[string]Owner{}, token: map[string]uint64{}, queue: map[string][]Owner{},
		sessEnd: map[Owner]time.Duration{}, sessDelay: map[Owner]time.Duration{}, holderSess: map[string]Owner{},
		waiterSess: map[string]map[Owner]Owner{}, delayed: map[string]bool{}, remembered: map[releaseID]bool{}}
}

func (o *observer) newToken(tok uint64) error {
	if tok <= o.lastToken {
		return fmt.Errorf("token %d not above %d", tok, o.lastToken)
	}
	o.lastToken = tok
	return nil
}

func (o *observer) event(e Event) error {
	if e.Kind != EventSessionExpired && isGroupKey(e.Key) {
		return o.groups.event(o, o.cmd, e)
	}
	switch e.Kind {
	case EventWaitExpired, EventUnclaimed:
		i := slices.Index(o.queue[e.Key], e.Owner)
		if i < 0 {
			return fmt.Errorf("%v for %x, not queued on %q", e.Kind, e.Owner[:1], e.Key)
		}
		o.queue[e.Key] = slices.Delete(o.queue[e.Key], i, i+1)
		delete(o.waiterSess[e.Key], e.Owner)
	case EventSessionExpired:
		if _, ok := o.sessEnd[e.Owner]; !ok || e.At != e.ExpiresAt || o.sessEnd[e.Owner] != e.ExpiresAt {
			return fmt.Errorf("session %x expired at %v, observed end %v", e.Owner[:2], e.At, o.sessEnd[e.Owner])
		}
		o.endSession(e.Owner, false)
	case EventExpired:
		h, ok := o.holder[e.Key]
		if !ok || h != e.Owner || o.token[e.Key] != e.Token {
			return fmt.Errorf("expired %x:%d on %q, holder is %x:%d", e.Owner[:1], e.Token, e.Key, h[:1], o.token[e.Key])
		}
		if e.At != e.ExpiresAt {
			return fmt.Errorf("expiry at %v of a lease ending at %v", e.At, e.ExpiresAt)
		}
		if s, bound := o.holderSess[e.Key]; bound {
			if s != o.expiring {
				return fmt.Errorf("%q of session %x expired while %x ends", e.Key, s[:2], o.expiring[:2])
			}
			if o.sessDelay[s] > 0 {
				o.delayed[e.Key] = true
			}
			delete(o.holderSess, e.Key)
		}
		delete(o.holder, e.Key)
	case EventGranted:
		if h, ok := o.holder[e.Key]; ok {
			if s, bound := o.holderSess[e.Key]; !bound || o.destroying == nil || s != *o.destroying {
				return fmt.Errorf("granted %q to %x while %x holds it", e.Key, e.Owner[:1], h[:1])
			}
			o.released++ // a destroy's hand-off
			delete(o.holder, e.Key)
			delete(o.holderSess, e.Key)
		}
		delete(o.delayed, e.Key)
		q := o.queue[e.Key]
		if len(q) == 0 || q[0] != e.Owner {
			return fmt.Errorf("granted %q to %x, queue is %x", e.Key, e.Owner[:1], q)
		}
		o.queue[e.Key] = q[1:]
		o.holder[e.Key], o.token[e.Key] = e.Owner, e.Token
		if s, ok := o.waiterSess[e.Key][e.Owner]; ok {
			o.holderSess[e.Key] = s
			if e.ExpiresAt != o.sessEnd[s] {
				return fmt.Errorf("session grant ends at %v, session at %v", e.ExpiresAt, o.sessEnd[s])
			}
		}
		delete(o.waiterSess[e.Key], e.Owner)
		return o.newToken(e.Token)
	default:
		return fmt.Errorf("unknown event %v", e.Kind)
	}
	return nil
}

// otherBinding reports whether c's owner holds (h, held) or waits (pos) for
// c's key under another session, or a lease, than c names.
func (o *observer) otherBinding(c Command, h Owner, held bool, pos int) bool {
	if held && h == c.Owner {
		return o.holderSess[c.Key] != c.Session
	}
	if pos >= 0 {
		return o.waiterSess[c.Key][c.Owner] != c.Session
	}
	return false
}

// endSession marks s as ending: by its destroy command, or by expiry.
func (o *observer) endSession(s Owner, byCmd bool) {
	if byCmd {
		// Kept live until the result: deadlines due before the destroy may
		// still grant a key to one of its waiters.
		o.destroying, o.released = &s, 0
	} else {
		delete(o.sessEnd, s)
		o.expiring = s
	}
}

// releaseResult checks a release against the releases remembered: a
// repeat (released, Token zero) only of one, not held never for one; and
// records a release that ended a hold.
func (o *observer) releaseResult(c Command, r Result) error {
	id := releaseID{c.Key, c.Owner}
	switch {
	case r.Status == StatusReleased && r.Token == 0:
		if !o.remembered[id] {
			return fmt.Errorf("a release that ended nothing answered released, and it repeats none")
		}
		if h, held := o.holder[c.Key]; held && h == c.Owner || o.groups.holds(c.Key, c.Owner) {
			return fmt.Errorf("a repeated release answered to the holder")
		}
	case r.Status == StatusReleased:
		o.remembered[id] = true
	case r.Status == StatusNotHeld && o.remembered[id]:
		return fmt.Errorf("a repeated release answered not held")
	}
	return nil
}

// sessionResult checks the session ops' results.
func (o *observer) sessionResult(c Command, r Result) error {
	end, live := o.sessEnd[c.Session]
	switch {
	case r.Status == StatusNoSession:
		if live && c.Op != OpSessionDestroy {
			return fmt.Errorf("no-session for a live session")
		}
	case c.Op == OpSessionCreate && r.Status == StatusGranted:
		if live && r.ExpiresAt != end {
			return fmt.Errorf("a create retry moved the end")
		}
		if !live {
			if r.ExpiresAt != r.Now+c.TTL {
				return fmt.Errorf("session ends at %v, want now+ttl", r.ExpiresAt)
			}
			o.sessEnd[c.Session], o.sessDelay[c.Session] = r.ExpiresAt, c.LockDelay
		}
	case c.Op == OpSessionRenew && r.Status == StatusExtended:
		if !live {
			return fmt.Errorf("renewed a session not live")
		}
		o.sessEnd[c.Session] = r.ExpiresAt
	case c.Op == OpSessionDestroy && r.Status == StatusReleased && !live:
		if !o.remembered[releaseID{owner: c.Session}] || r.Waiters != 0 {
			return fmt.Errorf("a destroy of a session not live answered released (%d locks), not a repeat", r.Waiters)
		}
	case c.Op == OpSessionDestroy && r.Status == StatusReleased:
		o.remembered[releaseID{owner: c.Session}] = true
		// endSession ran before the events (see the test loop); what is
		// still bound to the session was released without a hand-off.
		delete(o.sessEnd, c.Session)
		o.released += o.groups.endSession(c.Session)
		for k, s := range o.holderSess {
			if s == c.Session {
				delete(o.holder, k)
				delete(o.holderSess, k)
				o.released++
			}
		}
		if r.Waiters != o.released {
			return fmt.Errorf("destroy released %d, observed %d", r.Waiters, o.released)
		}
	default:
		return fmt.Errorf("unexpected %v for %v", r.Status, c.Op)
	}
	return nil
}

func (o *observer) result(c Command, r Result) error {
	if r.Status != StatusInvalid {
		switch c.Op {
		case OpAcquire:
			delete(o.remembered, releaseID{c.Key, c.Owner})
		case OpAcquireAll:
			for _, k := range c.Keys {
				delete(o.remembered, releaseID{k, c.Owner})
			}
		case OpSessionCreate:
			delete(o.remembered, releaseID{owner: c.Session})
		case OpRelease:
			if err := o.releaseResult(c, r); err != nil || r.Status == StatusReleased && r.Token == 0 {
				return err
			}
		}
	}
	if c.Op == OpSessionCreate || c.Op == OpSessionRenew || c.Op == OpSessionDestroy {
		if r.Status != StatusInvalid {
			return o.sessionResult(c, r)
		}
	}
	if r.Status == StatusNoSession {
		if _, live := o.sessEnd[c.Session]; live || c.Op != OpAcquire {
			return fmt.Errorf("no-session for a live session")
		}
		return nil
	}
	if isGroupKey(c.Key) {
		return o.groups.result(o, c, r)
	}
	h, held := o.holder[c.Key]
	q := o.queue[c.Key]
	pos := slices.Index(q, c.Owner)
	switch r.Status {
	case StatusInvalid:
		if c.Validate() == nil {
			return fmt.Errorf("valid command answered invalid")
		}
		return nil
	case StatusTicked:
		return nil
	case StatusGranted:
		if pos >= 0 {
			return fmt.Errorf("granted to an owner still queued")
		}
		if held && o.holderSess[c.Key] != c.Session {
			return fmt.Errorf("granted a retry under another binding")
		}
		if held {
			if h != c.Owner || r.Token != o.token[c.Key] {
				return fmt.Errorf("granted %x:%d while %x:%d holds", c.Owner[:1], r.Token, h[:1], o.token[c.Key])
			}
			return nil
		}
		if !c.Session.IsZero() {
			if r.ExpiresAt != o.sessEnd[c.Session] {
				return fmt.Errorf("session grant ends at %v, session at %v", r.ExpiresAt, o.sessEnd[c.Session])
			}
			o.holderSess[c.Key] = c.Session
		} else if r.ExpiresAt != r.Now+c.TTL {
			return fmt.Errorf("grant ends at %v, want now+ttl %v", r.ExpiresAt, r.Now+c.TTL)
		}
		o.holder[c.Key], o.token[c.Key] = c.Owner, r.Token
		return o.newToken(r.Token)
	case StatusQueued, StatusHeld:
		if r.Status == StatusHeld && o.otherBinding(c, h, held, pos) {
			return nil // the owner holds or waits under another binding: nothing changed
		}
		if o.delayed[c.Key] && !held {
			held, h = true, Owner{}
		}
		if !held || h == c.Owner || r.Token != o.token[c.Key] {
			return fmt.Errorf("%s while holder is %x (held %v)", r.Status, h[:1], held)
		}
		if r.Status == StatusHeld {
			if pos >= 0 || c.Wait != 0 {
				return fmt.Errorf("held answered to a waiter or a waiting acquire")
			}
			return nil
		}
		if pos < 0 {
			if c.Wait == 0 {
				return fmt.Errorf("queued an acquire without wait")
			}
			o.queue[c.Key] = append(q, c.Owner)
			pos = len(q)
			if !c.Session.IsZero() {
				if o.waiterSess[c.Key] == nil {
					o.waiterSess[c.Key] = map[Owner]Owner{}
				}
				o.waiterSess[c.Key][c.Owner] = c.Session
			}
		}
		if r.Waiters != pos+1 {
			return fmt.Errorf("queued at %d, observed %d", r.Waiters, pos+1)
		}
	case StatusExtended:
		want := r.Now + c.TTL
		if s, bound := o.holderSess[c.Key]; bound {
			want = o.sessEnd[s]
		}
		if !held || h != c.Owner || r.Token != o.token[c.Key] || r.ExpiresAt != want {
			return fmt.Errorf("bad extend")
		}
	case StatusReleased:
		if c.Op == OpForceRelease {
			// Ends the lease whoever holds it (or a lock-delay); the answer
			// names its token.
			if o.delayed[c.Key] && !held {
				held = true
				delete(o.delayed, c.Key)
			}
			delete(o.holderSess, c.Key)
			if !held || r.Token != o.token[c.Key] {
				return fmt.Errorf("force-released token %d, holder %x:%d (held %v)", r.Token, h[:1], o.token[c.Key], held)
			}
			delete(o.holder, c.Key)
			return nil
		}
		if !held || h != c.Owner || r.Token != o.token[c.Key] {
			return fmt.Errorf("released %x:%d, holder %x:%d", c.Owner[:1], r.Token, h[:1], o.token[c.Key])
		}
		delete(o.holder, c.Key)
		delete(o.holderSess, c.Key)
	case StatusCanceled:
		if pos < 0 {
			return fmt.Errorf("canceled an owner not queued")
		}
		o.queue[c.Key] = slices.Delete(q, pos, pos+1)
		delete(o.waiterSess[c.Key], c.Owner)
	case StatusNotHeld:
		if c.Op == OpForceRelease && held {
			return fmt.Errorf("force-release of a held key answered not held")
		}
		if held && h == c.Owner {
			return fmt.Errorf("not held answered to the holder")
		}
		if c.Op == OpCancelWait && pos >= 0 {
			return fmt.Errorf("cancel-wait of a queued owner answered not held")
		}
	default:
		return fmt.Errorf("unexpected status %v", r.Status)
	}
	return nil
}

func TestRandomSequencesKeepInvariants(t *testing.T) {
	const steps = 3000
	for _, seed := range randomSeeds(t, 8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			g := newCommandLog(seed)
			m := newRecorder()
			obs := newObserver()
			for i := range steps {
				c := g.next()
				r, events := m.apply(c)
				fail := func(err error) {
					t.Fatalf("seed %d step %d %s %+v -> %+v events %+v: %v", seed, i, c.Op, c, r, events, err)
				}
				// Events from deadlines come before the command; a release
				// (or cancel-wait of a holder, or force-release) adds one
				// grant after it, with a token above the one it ended (a
				// grant by expiry just before has the ended token itself).
				var after []Event
				obs.destroying, obs.cmd = nil, c
				if c.Op == OpSessionDestroy && r.Status == StatusReleased {
					// The deadlines due first cannot end this session (it
					// was still live for its destroy), but may grant it a
					// key: it is marked as ending, and ends at its result.
					obs.endSession(c.Session, true)
				} else if r.Status == StatusReleased && r.Token != 0 && len(events) > 0 && !isGroupKey(c.Key) {
					if last := events[len(events)-1]; last.Kind == EventGranted && last.Key == c.Key && last.Owner != c.Owner && last.Token > r.Token {
						events, after = events[:len(events)-1], events[len(events)-1:]
					}
				}
				for _, e := range events {
					if e.At > r.Now {
						fail(fmt.Errorf("event in the future"))
					}
					if err := obs.event(e); err != nil {
						fail(err)
					}
				}
				if err := obs.result(c, r); err != nil {
					fail(err)
				}
				for _, e := range after {
					if err := obs.event(e); err != nil {
						fail(err)
					}
				}
				if err := checkInternals(m.Machine); err != nil {
					fail(err)
				}
				if err := obs.groups.sameAs(m.Machine); err != nil {
					fail(err)
				}
				// The observer's view is the machine's view.
				for _, k := range g.keys {
					st := m.Lookup(k, 0)
					h, held := obs.holder[k]
					if st.Delayed && obs.delayed[k] && !held {
						held = true
					} else if obs.delayed[k] && !st.Delayed {
						delete(obs.delayed, k) // the delay ran out with nobody waiting
					}
					if st.Held != held || st.Owner != h || st.Waiters != len(obs.queue[k]) {
						fail(fmt.Errorf("key %q: machine %+v, observed holder %x queue %d", k, st, h[:1], len(obs.queue[k])))
					}
					if e := m.keys.get(k); e != nil && m.waitQueue(e) != nil {
						var order []Owner
						for w := m.waitQueue(e).head; w != nil; w = w.next {
							order = append(order, w.owner)
						}
						if !slices.Equal(order, obs.queue[k]) {
							fail(fmt.Errorf("key %q: queue order differs", k))
						}
					}
				}
				want, wantOK := earliestDeadline(m.Machine)
				got, ok := m.NextDeadline()
				if got != want || ok != wantOK {
					fail(fmt.Errorf("next deadline %v,%v want %v,%v", got, ok, want, wantOK))
				}
				if m.LastToken() != obs.lastToken {
					fail(fmt.Errorf("last token %d, observed %d", m.LastToken(), obs.lastToken))
				}
			}
			require.Positive(t, obs.lastToken)
		})
	}
}
