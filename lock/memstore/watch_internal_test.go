package memstore

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/internal/watchhub"
	"github.com/raftlock/raftlock/lock"
)

// Watchers whose ctx ends leave neither a goroutine nor a registration.
func TestMemoryWatchersLeaveNothingBehind(t *testing.T) {
	s := New()
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	_, index, err := s.WatchKey(ctx, "k", lock.WatchQuery{})
	require.NoError(t, err)

	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				_, _, err := s.WatchKey(ctx, "k", lock.WatchQuery{Index: index})
				errs <- err
			} else {
				_, _, err := s.WatchList(ctx, lock.ListRequest{Prefix: "k"}, lock.WatchQuery{Index: index})
				errs <- err
			}
		}()
	}
	require.Eventually(t, func() bool { return s.hub.Watchers() == n }, 10*time.Second, time.Millisecond)
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.ErrorIs(t, err, context.Canceled)
	}
	assert.Zero(t, s.hub.Watchers(), "no registration left")
	// Goroutine counts are unreliable (the runtime starts its own); stacks are not.
	assert.Eventually(t, func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "watchhub.(*Hub).Wait")
	}, 10*time.Second, time.Millisecond, "no goroutine left waiting")
}

// Past the maximum of watchers a query fails at once with lock.ErrTooManyWatchers.
func TestMemoryWatchersAreBounded(t *testing.T) {
	s := New()
	t.Cleanup(func() { _ = s.Close() })
	const maxWatchers = 50 // DefaultMaxWatchers goroutines exceed the race detector's limit
	s.hub, s.maxWatchers = watchhub.New(watchRingSize, maxWatchers, 0), maxWatchers
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, index, err := s.WatchKey(ctx, "k", lock.WatchQuery{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range maxWatchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = s.WatchKey(ctx, "k", lock.WatchQuery{Index: index})
		}()
	}
	require.Eventually(t, func() bool { return s.hub.Watchers() == maxWatchers }, 30*time.Second, time.Millisecond)
	_, _, err = s.WatchKey(ctx, "k", lock.WatchQuery{Index: index})
	assert.ErrorIs(t, err, lock.ErrTooManyWatchers)
	assert.Contains(t, err.Error(), `"k"`)
	cancel()
	wg.Wait()
}

// An index the store never answered (another store's, from before a
// restart) answers at once, with the store's own index.
func TestMemoryWatchOfAnUnknownIndexAnswersAtOnce(t *testing.T) {
	s := New()
	t.Cleanup(func() { _ = s.Close() })
	info, index, err := s.WatchKey(context.Background(), "k", lock.WatchQuery{Index: 1 << 40, Wait: time.Hour})
	require.NoError(t, err)
	assert.False(t, info.Locked)
	assert.Less(t, index, uint64(1<<40))
	_, index, err = s.WatchList(context.Background(), lock.ListRequest{}, lock.WatchQuery{Index: 1 << 40, Wait: time.Hour})
	require.NoError(t, err)
	assert.Less(t, index, uint64(1<<40))
}
