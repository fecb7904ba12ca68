package fsm

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// A node writes the newest snapshot version the lowest member level reads:
// version 5, which every build with levels restores, until every member
// reads ReleasesLevel. What it writes for a level, a build of that level
// restores; a version this build does not know needs a newer build.
func TestSnapshotVersionForLevel(t *testing.T) {
	assert.Equal(t, 5, SnapshotVersionFor(0), "a member that told no level")
	assert.Equal(t, 5, SnapshotVersionFor(BaselineLevel))
	assert.Equal(t, 6, SnapshotVersionFor(ReleasesLevel))
	assert.Equal(t, 6, SnapshotVersionFor(MaxCommandLevel+1), "a newer member reads it too")
	m := New(nil)
	for level := BaselineLevel; level <= MaxCommandLevel; level++ {
		b, err := m.SnapshotIn(SnapshotVersionFor(level))
		require.NoError(t, err, "level %d", level)
		assert.LessOrEqual(t, SnapshotLevel(b), level, "level %d restores what it is written", level)
	}
	for v := 1; v <= 5; v++ {
		assert.Equal(t, BaselineLevel, SnapshotLevel([]byte{byte(v)}), "version %d", v)
	}
	assert.Equal(t, ReleasesLevel, SnapshotLevel(m.Snapshot()))
	assert.Greater(t, SnapshotLevel([]byte{snapshotVersion + 1}), MaxCommandLevel)
	assert.Equal(t, BaselineLevel, SnapshotLevel(nil), "Restore refuses it")
}
