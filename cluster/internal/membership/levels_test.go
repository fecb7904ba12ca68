package membership

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/raftlock/raftlock/fsm"
)

// An advertised level reads as the level, or 0 when none is told or it is
// garbage (the member then reads the baseline).
func TestParseLevel(t *testing.T) {
	assert.Zero(t, parseLevel(""), "none told")
	assert.Zero(t, parseLevel("junk"))
	assert.Zero(t, parseLevel("0"))
	assert.Equal(t, fsm.BaselineLevel, parseLevel("1"))
	assert.Equal(t, 4, parseLevel("4"))
}
