package redis

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/raftlock/raftlock/fsm"
)

// The store remembers a release as long as the cluster's state machine
// does, so that a repeated release is answered alike by both.
func TestReleaseMemoryIsTheMachines(t *testing.T) {
	assert.Equal(t, fsm.ReleaseMemory, releaseMemory)
	assert.Equal(t, fsm.MaxRememberedReleases, maxRememberedReleases)
}
