package quietlog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The first event is told at once; the next within the interval are
// counted, and told with their count by the first event after it.
func TestEveryTellsOncePerInterval(t *testing.T) {
	e := NewEvery(time.Hour)
	n, tell := e.Note()
	assert.True(t, tell, "the first is told at once")
	assert.Equal(t, 1, n)
	for range 5 {
		_, tell = e.Note()
		assert.False(t, tell, "within the interval")
	}
	e.mu.Lock()
	e.told = e.told.Add(-time.Hour) // the interval has passed
	e.mu.Unlock()
	n, tell = e.Note()
	assert.True(t, tell)
	assert.Equal(t, 6, n, "the five counted and this one")
}
