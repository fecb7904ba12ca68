package lockhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster/clustertest"
	"github.com/raftlock/raftlock/lock"
)

// Two replicas of a service, each embedding a node of one cluster: the same
// resource requested on both at once runs on one, and the other is refused.
func TestOneRequestPerResourceAcrossClusterNodes(t *testing.T) {
	c := clustertest.Start(t, 3, nil)
	f, other := c.Follower(t), c.Leader(t)
	g := newGate()
	replicaA := accountMux(lock.New(f), g)
	replicaB := accountMux(lock.New(other), g)

	onA := serve(replicaA, post("/accounts/42"))
	onB := serve(replicaB, post("/accounts/42"))
	// gate.entered is unbuffered: a second request in the handler would block
	// there and never answer, so the refusal below would time out.
	token := receive(t, g.entered, "one request to run")

	var refused *httptest.ResponseRecorder
	var ran <-chan *httptest.ResponseRecorder
	select {
	case refused = <-onA:
		ran = onB
	case refused = <-onB:
		ran = onA
	case <-time.After(patience):
		require.FailNow(t, "the second request was neither run nor refused")
	}
	assert.Equal(t, http.StatusConflict, refused.Code)
	assert.Equal(t, response{Error: "locked", Key: "account:42", Token: token}, decode(t, refused))

	close(g.release)
	rec := receive(t, ran, "the running request's response")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, fmt.Sprintf("done %d", token), rec.Body.String())
	info, err := f.Inspect(t.Context(), "account:42")
	require.NoError(t, err)
	assert.False(t, info.Locked, "released after the handler")
}
