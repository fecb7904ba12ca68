package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"

	"github.com/raftlock/raftlock/internal/watchhub"
	"github.com/raftlock/raftlock/lock"
)

// Watches (lock.Watcher): blocking queries served from this node's own
// state machine.
//
// The index is the raft log index of the last entry this node has applied.
// It is the same entry on every member, so a caller may take an index from
// one node to another. The adapter records, while it applies an entry, the
// entry's index with every key whose reader-visible state the entry changes
// (fsm.Machine.OnChange: grants, releases, hand-offs, queue changes,
// extends, expiries, session ends) in a ring of the last watchRingSize
// changes (internal/watchhub), and wakes the watchers of those keys and of
// their prefixes. A query with index I:
//
//   - answers at once for I = 0, for an I older than the ring remembers
//     (more than watchRingSize changes ago), and for an I from before the
//     last snapshot restore (including the one at start, and one installed
//     by the leader on a lagging follower): those wakes are spurious;
//   - on a node that has not yet applied I (the caller came from a node
//     ahead of it), first waits until it has, so that an answer never goes
//     back in time;
//   - otherwise answers at once if the ring holds a change in scope after I,
//     and else blocks until one is applied, or the wait ends.
//
// The state read afterwards, and the index answered, are this node's: a
// follower's answer may be behind the leader by its replication lag (the
// answer's index says how far it got; a follower hears of a commit with
// the leader's next message, which raft sends within CommitTimeout to twice
// it), and, since a follower's log clock
// advances only with the entries it applies, its Remaining may overstate,
// as InspectStale's. With lock.WatchQuery.Consistent the state is read
// through the leader (a linearizable Inspect or List) once the local wake
// came; the index answered is the local one read before, so a change the
// leader had and this node had not yet applied wakes the next query
// (spuriously), and none is missed. Expiries are changes too: the leader
// applies them as tick entries when they fall due, and that entry wakes the
// key's watchers on every node.
//
// Config.MaxWatchers bounds the queries blocked at once (default
// lock.DefaultMaxWatchers); past it a query fails with
// lock.ErrTooManyWatchers. A watcher costs a map entry until it is woken
// or its ctx ends. Recording a change costs, in the apply path, one map
// lookup for the key's watchers and at most min(distinct watched prefixes,
// len(key)+1) for the prefix watchers, and no allocation.

// watchRingSize is how many recent (index, key) changes a node remembers.
const watchRingSize = 4096

// startWatches makes the hub (before raft starts); maxWatchers 0 means
// lock.DefaultMaxWatchers.
func (s *stateMachine) startWatches(maxWatchers int) {
	if maxWatchers <= 0 {
		maxWatchers = lock.DefaultMaxWatchers
	}
	s.hub, s.maxWatchers = watchhub.New(watchRingSize, maxWatchers, 0), maxWatchers
}

// WatchKey implements lock.Watcher; see "Watches" above.
func (n *Node) WatchKey(ctx context.Context, key string, q lock.WatchQuery) (lock.KeyInfo, uint64, error) {
	if err := lock.ValidateKey(key); err != nil {
		return lock.KeyInfo{}, 0, err
	}
	if err := n.block(ctx, key, false, q); err != nil {
		return lock.KeyInfo{}, 0, err
	}
	// The index is read before the state: the state then reflects every
	// change up to it (and perhaps later ones, which wake the next query).
	index, _ := n.sm.appliedIndex()
	if q.Consistent {
		info, err := n.Inspect(ctx, key)
		return info, index, err
	}
	st, setKeys, now := n.sm.read(key, n.leaderClock())
	return keyInfo(toReadResult(st, setKeys, now, &nodewire.Read{Key: key})), index, nil
}

// WatchList implements lock.Watcher; see "Watches" above.
func (n *Node) WatchList(ctx context.Context, req lock.ListRequest, q lock.WatchQuery) ([]lock.LockInfo, uint64, error) {
	if err := req.Validate(); err != nil {
		return nil, 0, err
	}
	if err := n.block(ctx, req.Prefix, true, q); err != nil {
		return nil, 0, err
	}
	index, _ := n.sm.appliedIndex()
	var locks []lock.LockInfo
	if q.Consistent {
		var err error
		if locks, err = n.List(ctx, req); err != nil {
			return nil, 0, err
		}
	} else {
		locks = n.sm.list(req.Prefix, req.After, req.Limit, n.leaderClock()).Locks
	}
	if locks == nil {
		locks = []lock.LockInfo{}
	}
	return locks, index, nil
}

// block waits, for a query with an index, until this node has applied that
// index and a change to scope after it is recorded, or the wait ends.
func (n *Node) block(ctx context.Context, scope string, prefix bool, q lock.WatchQuery) error {
	if err := q.Validate(); err != nil {
		return err
	}
	if n.closed() {
		return n.closedError(false)
	}
	if q.Index == 0 {
		return ctx.Err()
	}
	wait := q.BlockFor()
	deadline := time.Now().Add(wait)
	// Catch up with a caller that saw a later index elsewhere.
	if applied, changed := n.sm.appliedIndex(); applied < q.Index {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for applied < q.Index {
			select {
			case <-changed:
			case <-timer.C:
				return nil // the wait ended: answer what this node has
			case <-ctx.Done():
				return fmt.Errorf("cluster: watching %q: %w", scope, ctx.Err())
			case <-n.closing:
				return lock.ErrClosed
			}
			applied, changed = n.sm.appliedIndex()
		}
	}
	err := n.sm.hub.Wait(ctx, scope, prefix, q.Index, max(time.Until(deadline), 0))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, watchhub.ErrClosed):
		return lock.ErrClosed
	case errors.Is(err, watchhub.ErrFull):
		return fmt.Errorf("%w: watching %q: this node serves its maximum of blocking queries (%d, Config.MaxWatchers)", lock.ErrTooManyWatchers, scope, n.sm.maxWatchers)
	}
	return fmt.Errorf("cluster: watching %q: %w", scope, err)
}
