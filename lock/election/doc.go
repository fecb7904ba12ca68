// Package election elects one leader among the replicas that campaign for
// the same name, on top of package lock, as etcd's concurrency.Election does
// on etcd.
//
//	e := election.New(c, "scheduler")
//	lead, err := e.Campaign(ctx, "10.0.0.7:8080") // blocks until elected
//	if err != nil { ... }
//	defer lead.Resign(context.Background())
//	for {
//		select {
//		case <-lead.Done(): // leadership lost: stop acting as leader at once
//			return
//		case job := <-jobs:
//			schedule(lead.Context(), job, lead.Term()) // the term fences the leader's writes
//		}
//	}
//
// # Leadership is a lease
//
// Leadership is a kept-alive lease on the key "election:<name>": Campaign
// takes it with a blocking acquire (lock.Lock.Run), so campaigners queue in
// the store in arrival order, and when the leader resigns or its lease runs
// out the store hands the key to the next campaigner in the same step. Nobody
// polls. Run then keeps the lease alive (an extend every TTL/3).
//
// The term is the lease's fencing token: strictly greater for every new
// leader. A leader should pass it with every write to what it controls, and
// the resource should refuse a term lower than the highest it has seen: a
// leader that stalled (a GC pause, a partition) and lost its lease without
// knowing yet is then refused, not obeyed. Done and Context end as soon as
// the lease is or may be lost, as counted on the leader's own monotonic clock
// from when it sent its last successful extend, which is never later than
// the store's expiry: the old leader hears that it lost no later than the
// moment the store can elect its successor.
//
// A leader that crashes keeps the name for at most TTL (DefaultTTL, 15
// seconds, as Consul's sessions; etcd's default session is 60): the failover
// time. A shorter TTL fails over faster and costs more extends.
//
// Campaign's ctx bounds the campaign only, as in etcd: once elected, the
// leadership lasts until Resign, or until the lease is lost. To tie it to a
// process's lifetime, resign when the process stops.
//
// # Observing
//
// Leader reports who leads now without campaigning: whether the name is held
// (ErrNoLeader if not), the term, the lease left, and the value the leader
// published. Observe follows the leadership as it changes (an iterator of
// Leader values; Term 0 when nobody leads), built on the store's watches
// (lock.Watcher): it blocks until the store applies a change to the
// election's key, so nobody polls, and a hand-over is seen as soon as it is
// applied. Only on a store that cannot watch does Observe poll Leader
// (every PollInterval). A watch never misses a change, but changes that
// follow each other faster than the loop reads may be seen as one, and a
// cluster follower's view lags the leader's by its replication delay.
//
// # The leader's value
//
// A leader that campaigns with a value (an address, a replica name) keeps it
// as the metadata of the election's key (lock.Metadata), which Leader and
// Observe read with the term. For readers of leaders that campaigned with an
// older version, it is also published as the name of a second key the
// leader holds with the same TTL while it leads:
//
//	election-leader:<term>:<name>:<value>
//
// An observer that finds no metadata reads the term from the election's
// key, then lists the keys under "election-leader:<term>:<name>:". Since
// tokens are unique across all keys of a store, only the leader of that very
// term can hold such a key, so a value is never attributed to the wrong term,
// even while an old leader's key has not yet run out. The name and value
// together must fit in a key (lock.MaxKeyLen bytes).
//
// A memory store (package lock/memstore) elects one leader per PROCESS, not
// per cluster: replicas that each use their own memory store all become
// leaders. Use a cluster node or the API client as the store across
// replicas.
package election
