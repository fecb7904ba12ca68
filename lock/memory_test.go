package lock_test

import (
	"testing"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/locktest"
)

func newMemoryStore(t *testing.T) lock.Store {
	s := lock.NewMemoryStore()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestMemoryStore(t *testing.T) {
	locktest.TestStore(t, newMemoryStore)
}
