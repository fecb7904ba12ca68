package fsm

import (
	"fmt"
	"slices"
	"time"
)

// groupObserver rebuilds, from Results and Events alone, the holders and
// waiters of the command log's semaphore and read/write keys (groupKeys),
// checking each outcome: grants only to the head of the queue, in order,
// and to a newcomer only when nobody waits (strict FIFO); every grant with
// a fresh token; releases and expiries only of holders; a mismatch only
// against the kind the key was created with. After every step the test
// compares it with the machine (sameAs), and checkInternals checks the
// bounds (never more than N holders, a writer alone, the head waiter never
// one that fits).
type groupObserver struct {
	keys map[string]*groupKeyObs
}

type groupKeyObs struct {
	kind     Kind
	limit    int
	holders  map[Owner]groupHold
	queue    []groupWait
	canceled Owner // a waiter taken out by the command at hand (a cancel-wait) before its result
}

type groupHold struct {
	token        uint64
	session      Owner
	delayedUntil time.Duration // not zero: a lock-delay slot until then
}

type groupWait struct {
	owner, session Owner
	shared         bool
}

func isGroupKey(key string) bool { return slices.Contains(groupKeys, key) }

func (g *groupObserver) key(k string) *groupKeyObs {
	if g.keys == nil {
		g.keys = map[string]*groupKeyObs{}
	}
	if g.keys[k] == nil {
		g.keys[k] = &groupKeyObs{holders: map[Owner]groupHold{}}
	}
	return g.keys[k]
}

// purge ends the lock-delay slots over by t.
func (k *groupKeyObs) purge(t time.Duration) {
	for o, h := range k.holders {
		if h.delayedUntil != 0 && h.delayedUntil <= t {
			delete(k.holders, o)
		}
	}
}

func (k *groupKeyObs) position(o Owner) int {
	return slices.IndexFunc(k.queue, func(w groupWait) bool { return w.owner == o })
}

// endSession removes the holders bound to s (destroyed) and counts them.
func (g *groupObserver) endSession(s Owner) int {
	n := 0
	for _, k := range g.keys {
		for o, h := range k.holders {
			if h.session == s && h.delayedUntil == 0 {
				delete(k.holders, o)
				n++
			}
		}
	}
	return n
}

func (g *groupObserver) event(o *observer, c Command, e Event) error {
	k := g.key(e.Key)
	switch e.Kind {
	case EventWaitExpired, EventUnclaimed:
		i := k.position(e.Owner)
		if i < 0 {
			return fmt.Errorf("%v for %x, not queued on %q", e.Kind, e.Owner[:1], e.Key)
		}
		k.queue = slices.Delete(k.queue, i, i+1)
	case EventExpired:
		h, ok := k.holders[e.Owner]
		if !ok || h.token != e.Token || h.delayedUntil != 0 {
			return fmt.Errorf("expired %x:%d on %q, not a live holder", e.Owner[:1], e.Token, e.Key)
		}
		if e.At != e.ExpiresAt {
			return fmt.Errorf("expiry at %v of a hold ending at %v", e.At, e.ExpiresAt)
		}
		delete(k.holders, e.Owner)
		if !h.session.IsZero() {
			if h.session != o.expiring {
				return fmt.Errorf("%q of session %x expired while %x ends", e.Key, h.session[:2], o.expiring[:2])
			}
			if d := o.sessDelay[h.session]; d > 0 {
				// The slot stays, nobody's: its owner may come again as a
				// newcomer.
				h.delayedUntil = e.At + d
				k.holders[delayedSlotOwner(h.token)] = h
			}
		}
	case EventGranted:
		k.purge(e.At)
		if o.destroying != nil {
			for ow, h := range k.holders {
				if h.session == *o.destroying && h.delayedUntil == 0 {
					delete(k.holders, ow)
					o.released++
				}
			}
		}
		if c.Op == OpCancelWait && c.Key == e.Key && len(k.queue) > 0 && k.queue[0].owner == c.Owner && e.Owner != c.Owner {
			k.queue, k.canceled = k.queue[1:], c.Owner // the cancel took the head out, then the next was granted
		}
		if len(k.queue) == 0 || k.queue[0].owner != e.Owner {
			return fmt.Errorf("granted %q to %x, not the head of the queue", e.Key, e.Owner[:1])
		}
		w := k.queue[0]
		k.queue = k.queue[1:]
		if _, holds := k.holders[e.Owner]; holds {
			return fmt.Errorf("granted %q to %x, which holds it", e.Key, e.Owner[:1])
		}
		if !w.session.IsZero() && e.ExpiresAt != o.sessEnd[w.session] {
			return fmt.Errorf("session grant ends at %v, session at %v", e.ExpiresAt, o.sessEnd[w.session])
		}
		k.holders[e.Owner] = groupHold{token: e.Token, session: w.session}
		return o.newToken(e.Token)
	default:
		return fmt.Errorf("unknown event %v on %q", e.Kind, e.Key)
	}
	return nil
}

func (g *groupObserver) result(o *observer, c Command, r Result) error {
	k := g.key(c.Key)
	k.purge(r.Now)
	h, holds := k.holders[c.Owner]
	live := holds && h.delayedUntil == 0
	pos := k.position(c.Owner)
	defer func() { k.canceled = Owner{} }()
	switch r.Status {
	case StatusInvalid:
		if c.Validate() == nil {
			return fmt.Errorf("valid command answered invalid")
		}
	case StatusTicked:
	case StatusKindMismatch:
		if len(k.holders) == 0 || (r.Kind == c.Kind && r.Limit == c.Limit) || r.Kind != k.kind || r.Limit != k.limit {
			return fmt.Errorf("kind mismatch %v/%d for %v/%d; key is %v/%d with %d holders", r.Kind, r.Limit, c.Kind, c.Limit, k.kind, k.limit, len(k.holders))
		}
	case StatusGranted:
		if pos >= 0 {
			return fmt.Errorf("granted to an owner still queued")
		}
		if live {
			if r.Token != h.token || h.session != c.Session {
				return fmt.Errorf("retry granted %d under %x, holds %d under %x", r.Token, c.Session[:1], h.token, h.session[:1])
			}
			return nil
		}
		if holds || len(k.queue) > 0 {
			return fmt.Errorf("granted %x while %d wait (or it has a lock-delay slot)", c.Owner[:1], len(k.queue))
		}
		if len(k.holders) == 0 {
			k.kind, k.limit = c.Kind, c.Limit
		} else if k.kind != c.Kind || k.limit != c.Limit {
			return fmt.Errorf("granted as %v/%d a key of %v/%d", c.Kind, c.Limit, k.kind, k.limit)
		}
		if !c.Session.IsZero() {
			if r.ExpiresAt != o.sessEnd[c.Session] {
				return fmt.Errorf("session grant ends at %v, session at %v", r.ExpiresAt, o.sessEnd[c.Session])
			}
		} else if r.ExpiresAt != r.Now+c.TTL {
			return fmt.Errorf("grant ends at %v, want now+ttl", r.ExpiresAt)
		}
		k.holders[c.Owner] = groupHold{token: r.Token, session: c.Session}
		return o.newToken(r.Token)
	case StatusQueued:
		if len(k.holders) == 0 || live {
			return fmt.Errorf("queued on a free key, or a holder queued")
		}
		if pos < 0 {
			if c.Wait == 0 {
				return fmt.Errorf("queued an acquire without wait")
			}
			k.queue = append(k.queue, groupWait{owner: c.Owner, session: c.Session, shared: c.Shared})
			pos = len(k.queue) - 1
		}
		if r.Waiters != pos+1 {
			return fmt.Errorf("queued at %d, observed %d", r.Waiters, pos+1)
		}
	case StatusHeld:
		if len(k.holders) == 0 {
			return fmt.Errorf("held answered for a free key")
		}
		if !live && pos < 0 && c.Wait != 0 {
			return fmt.Errorf("held answered to a newcomer that may wait")
		}
	case StatusExtended:
		if !live || r.Token != h.token {
			return fmt.Errorf("extended by a non-holder")
		}
	case StatusReleased:
		if c.Op == OpForceRelease {
			// The grants after it (tokens above the newest it ended) came
			// first in the events: they stay.
			found := false
			for _, h := range k.holders {
				found = found || h.token == r.Token
			}
			if !found {
				return fmt.Errorf("force-release answered token %d, no such hold", r.Token)
			}
			for ow, h := range k.holders {
				if h.token <= r.Token {
					delete(k.holders, ow)
				}
			}
			return nil
		}
		if !live || r.Token != h.token {
			return fmt.Errorf("released %x:%d, not a holder", c.Owner[:1], r.Token)
		}
		delete(k.holders, c.Owner)
	case StatusCanceled:
		if pos >= 0 {
			k.queue = slices.Delete(k.queue, pos, pos+1)
		} else if k.canceled != c.Owner {
			return fmt.Errorf("canceled an owner not queued")
		}
	case StatusNotHeld:
		if live || (c.Op == OpCancelWait && pos >= 0) || (c.Op == OpForceRelease && len(k.holders) > 0) {
			return fmt.Errorf("not held answered to a holder or waiter")
		}
	default:
		return fmt.Errorf("unexpected status %v", r.Status)
	}
	return nil
}

// sameAs compares the observed keys with the machine's.
func (g *groupObserver) sameAs(m *Machine) error {
	for _, key := range groupKeys {
		k := g.key(key)
		k.purge(m.Now())
		e := m.keys.get(key)
		if e == nil {
			if len(k.holders) > 0 || len(k.queue) > 0 {
				return fmt.Errorf("key %q gone, observed %d holders %d waiters", key, len(k.holders), len(k.queue))
			}
			continue
		}
		gr := m.group(e)
		if gr == nil {
			return fmt.Errorf("key %q is a mutex", key)
		}
		if gr.kind != k.kind || gr.limit != k.limit || gr.holders.len() != len(k.holders) {
			return fmt.Errorf("key %q: %v/%d with %d holders, observed %v/%d with %d", key, gr.kind, gr.limit, gr.holders.len(), k.kind, k.limit, len(k.holders))
		}
		for h := gr.holders.head; h != nil; h = h.next {
			oh, ok := k.holders[h.owner]
			if !ok || oh.token != h.token || (oh.delayedUntil != 0) != h.delayed {
				return fmt.Errorf("key %q: holder %x:%d (delayed %v) not as observed", key, h.owner[:1], h.token, h.delayed)
			}
		}
		i := 0
		for w := m.waitQueue(e).first(); w != nil; w = w.next {
			if i >= len(k.queue) || k.queue[i].owner != w.owner {
				return fmt.Errorf("key %q: queue order differs", key)
			}
			i++
		}
		if i != len(k.queue) {
			return fmt.Errorf("key %q: queue of %d, observed %d", key, i, len(k.queue))
		}
	}
	return nil
}

// holds reports whether owner has a live hold of group key key.
func (g *groupObserver) holds(key string, owner Owner) bool {
	k := g.keys[key]
	if k == nil {
		return false
	}
	h, ok := k.holders[owner]
	return ok && h.delayedUntil == 0
}
