package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster/nodewire"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// A listing of keys held in multi-key sets of the longest keys (each
// entry names its whole set) ends its page early, within listPageBudget,
// and the pages together list every key with its set's keys.
func TestListPageEndsWithinItsByteBudget(t *testing.T) {
	sm := newStateMachine(hclog.NewNullLogger(), nil)
	const sets = 5
	for s := range sets {
		keys := make([]string, fsm.MaxKeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("%d/%0*d", s, fsm.MaxKeyLen-2, i)
		}
		owner := fsm.Owner{byte(s + 1)}
		res := sm.m.Apply(fsm.Command{Op: fsm.OpAcquireAll, Stamp: time.Millisecond, Owner: owner, TTL: time.Hour, Keys: keys})
		require.Equal(t, fsm.StatusGranted, res.Status)
	}
	var all []lock.LockInfo
	after, pages := "", 0
	for {
		page := sm.list("", after, nodewire.MaxListPage, 0)
		pages++
		require.NotEmpty(t, page.Locks)
		b := nodewire.Reply{Code: nodewire.CodeOK, Kind: nodewire.KindList, Answer: &page}.AppendBinary(nil)
		assert.LessOrEqual(t, len(b), nodewire.ListPageBudget, "page %d", pages)
		all = append(all, page.Locks...)
		if !page.More {
			break
		}
		after = page.Locks[len(page.Locks)-1].Key
	}
	assert.Greater(t, pages, 1, "the sets' keys do not fit one page")
	require.Len(t, all, sets*fsm.MaxKeys, "every key listed once")
	for _, l := range all {
		require.Len(t, l.SetKeys, fsm.MaxKeys, l.Key)
		assert.Equal(t, l.Key[:2], l.SetKeys[0][:2], "a key names its own set")
	}
}
