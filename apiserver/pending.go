package apiserver

import (
	"context"
	"errors"
	"sync"

	"github.com/raftlock/raftlock/lock"
)

// errGivenUp is the cause of an acquire's context ended by a release of the
// same owner.
var errGivenUp = errors.New("api: acquire given up by a release of the same owner")

// acquires tracks the acquires in progress on this node by key and owner, so
// that a release by the same owner can give them up and answer only once they
// have left the queue (and given back a grant that raced with it).
//
// This is what lets a remote caller's Acquire honour lock.Store's contract
// when its context ends: the HTTP client hangs up, which the node notices
// some time later, so api.Client follows with a release, and that release returns
// only after the node has taken the abandoned acquire out of the store.
type acquires struct {
	mu sync.Mutex // protects pending
	// pending: nearly always one acquire per key and owner, so a slice
	// (a map per key cost an allocation per acquire).
	pending map[acquireKey][]*pendingAcquire
}

type acquireKey struct {
	key   string
	owner lock.Owner
}

type pendingAcquire struct {
	giveUp context.CancelCauseFunc
	done   chan struct{} // closed when the acquire is over, clean-up included
}

// start registers an acquire whose context giveUp ends. The caller must call
// finish when the acquire, clean-up included, is over.
func (a *acquires) start(key string, owner lock.Owner, giveUp context.CancelCauseFunc) *pendingAcquire {
	p := &pendingAcquire{giveUp: giveUp, done: make(chan struct{})}
	k := acquireKey{key, owner}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = make(map[acquireKey][]*pendingAcquire)
	}
	a.pending[k] = append(a.pending[k], p)
	return p
}

func (a *acquires) finish(key string, owner lock.Owner, p *pendingAcquire) {
	k := acquireKey{key, owner}
	a.mu.Lock()
	ps := a.pending[k]
	for i, q := range ps {
		if q == p {
			last := len(ps) - 1
			ps[i], ps[last] = ps[last], nil
			ps = ps[:last]
			break
		}
	}
	if len(ps) == 0 {
		delete(a.pending, k)
	} else {
		a.pending[k] = ps
	}
	a.mu.Unlock()
	close(p.done)
}

// giveUp ends every acquire of key by owner in progress on this node and
// waits until they are over, or until ctx is done.
func (a *acquires) giveUp(ctx context.Context, key string, owner lock.Owner) error {
	a.mu.Lock()
	ps := append([]*pendingAcquire(nil), a.pending[acquireKey{key, owner}]...)
	a.mu.Unlock()
	for _, p := range ps {
		p.giveUp(errGivenUp)
	}
	for _, p := range ps {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
