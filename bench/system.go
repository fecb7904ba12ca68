package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
)

// The systems under test, in the order they run and appear in the table.
const (
	sysRaftlock = "raftlock"
	sysEtcd     = "etcd"
	sysRedis    = "redis"     // persistence off
	sysRedisAOF = "redis-aof" // appendonly yes, appendfsync always
	// sysRedisStore is raftlock's Redis store on a redis server like sysRedis's.
	sysRedisStore = "raftlock-redis"
	// sysRaftlockHTTP is sysRaftlock with clients over the HTTP API.
	sysRaftlockHTTP = "raftlock-http"
)

var allSystems = []string{sysRaftlock, sysRaftlockHTTP, sysEtcd, sysRedis, sysRedisAOF, sysRedisStore}

// The workloads; see README.md.
const (
	wlSeq      = "seq"
	wlPar      = "par64"
	wlContend  = "contend16"
	wlHeld     = "held"
	wlFailover = "failover"
	wlSem      = "sem8"

	wlWatch     = "watch"     // raftlock only: watch fan-out
	wlKeepalive = "keepalive" // raftlock only: sessions kept alive
)

var allWorkloads = []string{wlSeq, wlPar, wlContend, wlSem, wlHeld, wlWatch, wlKeepalive, wlFailover}

// system is one lock service under test. start brings up the cluster the
// throughput workloads and failover share; held brings up its own.
type system interface {
	name() string
	start(ctx context.Context) error
	// stop tears down whatever start brought up. It is safe to call after a
	// failed start.
	stop()
	// members is how many endpoints clients may talk to (3, or 1 for Redis).
	members() int
	// leader is the index of the member that leads now; errNotApplicable
	// for a system without one.
	leader(ctx context.Context) (int, error)
	// kill stops member i as abruptly as the system allows in-process,
	// without handing over leadership.
	kill(i int) error
	// client is one lock user (a process, in real life) talking to member i.
	client(ctx context.Context, member int) (client, error)
	// held runs the held workload with n locks on a fresh cluster; atPeak is
	// called while the n locks are held (for -memprofile).
	held(ctx context.Context, n int, atPeak func()) (map[string]float64, error)
	// notes are caveats to print under the table.
	notes() []string
}

// raftIndexer is implemented by systems that can tell their raft commit
// index, to count the log entries a workload wrote.
type raftIndexer interface{ commitIndex() uint64 }

// client is one lock user: a lock.Client on a node, an etcd session, a
// go-redis client.
type client interface {
	locker(key string) locker
	close()
}

// locker takes and gives back one key. A locker is used by one goroutine.
type locker interface {
	// tryAcquire takes the key if it is free, and reports false if another
	// owner holds it.
	tryAcquire(ctx context.Context) (bool, error)
	// acquire takes the key, waiting while another owner holds it.
	acquire(ctx context.Context) error
	// release gives the key back; an error if it was not held.
	release(ctx context.Context) error
}

// semaphoreClient is implemented by clients of systems with a semaphore
// of their own (raftlock's Client.Semaphore); the others get n/a in sem8.
type semaphoreClient interface {
	// semaphore is a locker of one of n slots of key.
	semaphore(key string, n int) locker
}

// notApplicable is a figure a system cannot give, with the reason.
type notApplicable struct{ reason string }

func (e *notApplicable) Error() string { return "n/a: " + e.reason }

var errNotApplicable = &notApplicable{}

func (e *notApplicable) Is(target error) bool { return target == errNotApplicable }

func newSystem(name string, p params) (system, error) {
	switch name {
	case sysRaftlock:
		return newRaftlock(p), nil
	case sysRaftlockHTTP:
		return newRaftlockHTTP(p), nil
	case sysEtcd:
		return newEtcd(p), nil
	case sysRedis:
		return newRedis(p, false)
	case sysRedisAOF:
		return newRedis(p, true)
	case sysRedisStore:
		return newRedisStore(p)
	}
	return nil, fmt.Errorf("unknown system %q", name)
}

// freePort asks the kernel for a free loopback port. Another process may take
// it before we bind it again; on a bench machine that is unlikely enough.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// heapInUse is the heap in use after a full collection: the live state of
// every node in this process, plus fragmentation.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// perLock turns a heap growth into bytes per lock per node.
func perLock(before, after uint64, nodes, locks int) float64 {
	if after < before {
		return 0
	}
	return float64(after-before) / float64(nodes) / float64(locks)
}

func isNotApplicable(err error) bool { return errors.Is(err, errNotApplicable) }
