package memstore_test

import (
	"testing"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/locktest"
	"github.com/raftlock/raftlock/lock/memstore"
)

func newMemoryStore(t *testing.T) lock.Store {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestMemoryStore(t *testing.T) {
	locktest.TestStore(t, newMemoryStore)
}
