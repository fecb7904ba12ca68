package testskip

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSkipWritesItDown(t *testing.T) {
	log := filepath.Join(t.TempDir(), "skips")
	t.Setenv(LogEnv, log)
	ran := false
	t.Run("needs root", func(t *testing.T) {
		Skip(t, "cannot mount on %s", "/x")
		ran = true
	})
	assert.False(t, ran, "Skip must end the test")
	got, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, "TestSkipWritesItDown/needs_root: cannot mount on /x\n", string(got))
}
