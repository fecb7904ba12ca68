package fsm

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every op this build knows has a level it reads; an op it does not know
// needs a newer build. An op added without a level fails here.
func TestCommandLevelCoversEveryKnownOp(t *testing.T) {
	known := 0
	for op := 0; op < 256; op++ {
		c := Command{Op: Op(op)}
		level := CommandLevel(c)
		if errors.Is(c.Validate(), ErrUnknownOp) {
			assert.Greater(t, level, MaxCommandLevel, "op %d is unknown: only a newer build reads it", op)
			continue
		}
		known++
		assert.GreaterOrEqual(t, level, BaselineLevel, "op %v", c.Op)
		assert.LessOrEqual(t, level, MaxCommandLevel, "op %v: this build decodes it", c.Op)
	}
	assert.Equal(t, 12, known, "ops known to Validate")
}
