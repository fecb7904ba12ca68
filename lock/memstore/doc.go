// Package memstore is the memory store: a lock.Store that keeps locks in
// this process's memory, with the same semantics as a cluster (it runs the
// same state machine), for tests, examples and single-process programs.
//
//	store := memstore.New()
//	defer store.Close()
//	c := lock.New(store)
//
// It excludes callers in THIS PROCESS ONLY. Two replicas of a service that
// each use a memory store both take every lock, and nothing warns them: a
// cluster node (package cluster), the API client (package api) or the Redis
// store (module github.com/raftlock/raftlock/stores/redis) is the store
// that excludes across processes.
//
// It implements every optional ability of package lock: lock.Lister,
// lock.SessionStore, lock.AdminStore, lock.Watcher and lock.MultiKeyStore.
// Quotas bounds the state it keeps, for tests of how a program handles
// lock.ErrQuotaExceeded.
package memstore
