package waiting

import (
	"strconv"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// BenchmarkAck is the leader's cost of noting an answered grant, which
// every immediate grant's answer does: each to a key not answered lately
// (the worst case for the processor's caches), the registry full.
func BenchmarkAck(b *testing.B) {
	r := newRegistry(time.Minute, func() time.Duration { return 0 })
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = "key/" + strconv.Itoa(i)
	}
	owner := fsm.Owner{1}
	for i := 0; b.Loop(); i++ {
		r.ack(keys[i&(len(keys)-1)], owner, uint64(i+1))
	}
}
