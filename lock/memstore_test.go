package lock_test

import (
	"testing"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// newMemoryStore is the store most of this package's tests run on,
// closed when the test ends.
func newMemoryStore(t *testing.T) lock.Store {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	return s
}
