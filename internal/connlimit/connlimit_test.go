package connlimit

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A place is given back once per connection, however often it is closed;
// a Take that has to wait warns once for a burst, and gives up when done
// closes.
func TestLimiterPlaces(t *testing.T) {
	var warned []int
	l := New(1, func(waits int) { warned = append(warned, waits) })
	require.True(t, l.Take(nil))
	a, b := net.Pipe()
	t.Cleanup(func() { b.Close() })
	c := l.Conn(a)

	done := make(chan struct{})
	close(done)
	assert.False(t, l.Take(done), "all places taken: Take waits, and gives up when done closes")
	assert.False(t, l.Take(done))
	assert.Equal(t, []int{1}, warned, "one warning for the burst")
	assert.Equal(t, uint64(2), l.Waits(), "every wait counted")

	require.NoError(t, c.Close())
	_ = c.Close()
	assert.True(t, l.Take(done), "Close gave the place back")
	assert.False(t, l.Take(done), "a second Close gave back nothing more")
	l.Give()
	assert.Equal(t, 1, l.Max())
}
