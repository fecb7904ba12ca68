package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
)

// raftlock lock's refusal says what is true of the key: its holder's
// token, or that nobody holds it but a waiting multi-key lock keeps it.
func TestHeldMessageTellsHolderOrReservation(t *testing.T) {
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lease, err := st.Acquire(ctx, lock.AcquireRequest{Key: "b", Owner: lock.NewOwner(), TTL: time.Minute})
	require.NoError(t, err)
	go func() {
		_, _ = st.AcquireAll(ctx, lock.AcquireRequest{Key: "a", Keys: []string{"a", "b"}, Owner: lock.NewOwner(), TTL: time.Minute, Wait: time.Minute})
	}()
	require.Eventually(t, func() bool {
		info, err := st.Inspect(ctx, "a")
		return err == nil && info.Reserved
	}, 10*time.Second, time.Millisecond)

	assert.Contains(t, heldMessage(st, "a", nil), "reserved for an earlier multi-key lock")
	assert.Contains(t, heldMessage(st, "a", &lock.HeldError{Key: "a", Reserved: true}), "reserved for an earlier multi-key lock")
	assert.NotContains(t, heldMessage(st, "a", nil), "token")
	assert.Contains(t, heldMessage(st, "b", nil), "fencing token "+itoa(lease.Token))
}
