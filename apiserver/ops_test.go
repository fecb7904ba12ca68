package apiserver

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/streamwire"
	"github.com/raftlock/raftlock/lock/memstore"
)

// The table of operations names each operation, route, batch name and
// stream code once, and the batch and the stream carry exactly the
// operations their wire forms name.
func TestOpsTableListsEachOperationOnce(t *testing.T) {
	names, paths := map[string]bool{}, map[string]bool{}
	for _, op := range ops {
		assert.False(t, names[op.name], "operation %q listed twice", op.name)
		assert.False(t, paths[op.path], "route %s listed twice", op.path)
		names[op.name], paths[op.path] = true, true
		assert.Contains(t, []string{http.MethodGet, http.MethodPost}, op.method, op.name)
		assert.NotNil(t, op.run, op.name)
		if op.sessionUse != "" {
			assert.Equal(t, rightLock, op.right, "%s: a session is of use only to a caller that may lock", op.name)
		}
	}
	assert.Equal(t, map[string]string{api.BatchAcquire: opAcquire, api.BatchRelease: opRelease, api.BatchExtend: opExtend}, opNames(batchOps))
	streamed := map[byte]string{}
	for code, op := range streamOps {
		streamed[code] = op.name
	}
	assert.Equal(t, map[byte]string{streamwire.OpAcquire: opAcquire, streamwire.OpRelease: opRelease, streamwire.OpExtend: opExtend}, streamed)
}

func opNames(m map[string]*operation) map[string]string {
	out := map[string]string{}
	for k, op := range m {
		out[k] = op.name
	}
	return out
}

// Every operation of the table is served on its route, with its method.
func TestOpsTableRoutesServeEachOperation(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	h := NewHandler(store, Config{})
	for _, op := range ops {
		rt, ok := h.routes[op.path]
		require.True(t, ok, "no route for %s", op.path)
		assert.Equal(t, op.method, rt.method, op.path)
	}
}
