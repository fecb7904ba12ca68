package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/locktest"
	"github.com/raftlock/raftlock/lock/memstore"
)

// TestClientConformance: the HTTP client over a node over a memory store is
// a lock.Store like any other.
func TestClientConformance(t *testing.T) {
	locktest.TestStore(t, func(t *testing.T) lock.Store {
		return newTestNode(t, Config{}).client
	})
}

// handOff takes key with one handle, has a second one try (refused) and
// then wait for it, releases the first, and checks that the second was
// handed the lock with a greater token.
func handOff(t *testing.T, locks *lock.Client, store *memstore.Store, key string) (first, second *lock.Lock) {
	t.Helper()
	ctx := context.Background()
	first = locks.Lock(key, lock.TTL(time.Minute))
	require.NoError(t, first.Acquire(ctx))
	second = locks.Lock(key, lock.TTL(time.Minute))
	ok, err := second.TryAcquire(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "held by the first handle")

	acquired := make(chan error, 1)
	go func() { acquired <- second.Acquire(ctx, lock.Wait(time.Minute)) }()
	require.Eventually(t, func() bool { return waitersOf(t, store, key) == 1 }, patience, time.Millisecond)
	released, err := first.Release(ctx)
	require.NoError(t, err)
	require.True(t, released)
	select {
	case err := <-acquired:
		require.NoError(t, err)
	case <-time.After(patience):
		t.Fatal("the waiting handle was not handed the lock")
	}
	assert.Greater(t, second.Token(), first.Token())
	return first, second
}

// TestLockPackageOverHTTP: package lock runs unchanged against a remote node.
func TestLockPackageOverHTTP(t *testing.T) {
	n := newTestNode(t, Config{})
	locks := lock.New(n.client)
	ctx := context.Background()

	_, second := handOff(t, locks, n.store, "jobs/nightly")
	remaining, held := second.Remaining()
	assert.True(t, held)
	assert.LessOrEqual(t, remaining, time.Minute)

	ran, err := locks.Lock("jobs/other").Run(ctx, func(context.Context) error { return nil })
	require.NoError(t, err)
	assert.True(t, ran)
}

func TestClientLeaseAndHeldError(t *testing.T) {
	n := newTestNode(t, Config{})
	ctx := context.Background()
	owner := lock.NewOwner()

	lease, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: 10 * time.Second})
	require.NoError(t, err)
	assert.Positive(t, lease.Token)
	assert.LessOrEqual(t, lease.Remaining, 10*time.Second, "never more than the TTL")
	assert.Greater(t, lease.Remaining, 9*time.Second)

	_, err = n.client.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Second})
	var held *lock.HeldError
	require.ErrorAs(t, err, &held)
	assert.ErrorIs(t, err, lock.ErrLocked)
	assert.Equal(t, "k", held.Key)
	assert.Equal(t, lease.Token, held.Token)
	assert.Greater(t, held.Remaining, 9*time.Second)

	_, err = n.client.Extend(ctx, "k", lock.NewOwner(), time.Second)
	assert.ErrorIs(t, err, lock.ErrNotHeld)
	var se *api.ServerError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, api.CodeNotHeld, se.Code)
	assert.Equal(t, http.StatusConflict, se.StatusCode)

	ok, err := n.client.Release(ctx, "k", lock.NewOwner())
	require.NoError(t, err)
	assert.False(t, ok, "not held is false, not an error")
}

// TestClientValidatesLocally: bad input never leaves the process, and gets
// the same sentinels as from a local store.
func TestClientValidatesLocally(t *testing.T) {
	c, err := api.NewClient(unusedAddr(t), api.ClientConfig{})
	require.NoError(t, err)
	ctx := context.Background()
	owner := lock.NewOwner()

	_, err = c.Acquire(ctx, lock.AcquireRequest{Key: "k", TTL: time.Second})
	assert.ErrorIs(t, err, lock.ErrInvalidOwner)
	_, err = c.Acquire(ctx, lock.AcquireRequest{Key: "", Owner: owner, TTL: time.Second})
	assert.ErrorIs(t, err, lock.ErrInvalidKey)
	_, err = c.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: -time.Second})
	assert.ErrorIs(t, err, lock.ErrInvalidTTL)
	_, err = c.Acquire(ctx, lock.AcquireRequest{Key: "k", Owner: owner, TTL: time.Second, Wait: -1})
	assert.ErrorIs(t, err, lock.ErrInvalidWait)
	_, err = c.Release(ctx, "k", lock.Owner{})
	assert.ErrorIs(t, err, lock.ErrInvalidOwner)
	_, err = c.Extend(ctx, "k", owner, 0)
	assert.ErrorIs(t, err, lock.ErrInvalidTTL)
	_, err = c.Inspect(ctx, string(make([]byte, lock.MaxKeyLen+1)))
	assert.ErrorIs(t, err, lock.ErrInvalidKey)
	_, err = c.List(ctx, lock.ListRequest{Limit: -1})
	assert.ErrorIs(t, err, lock.ErrInvalidList)
}

// TestServerErrorsMapToSentinels: every code a node answers comes back as the
// lock sentinel it stands for.
func TestServerErrorsMapToSentinels(t *testing.T) {
	cases := []struct {
		storeErr error
		want     []error
		notWant  []error
	}{
		{fmt.Errorf("%w: 65536 wait", lock.ErrQueueFull), []error{lock.ErrQueueFull}, nil},
		{fmt.Errorf("cluster: no leader: %w", lock.ErrUnavailable), []error{lock.ErrUnavailable}, []error{lock.ErrUnknownOutcome}},
		{fmt.Errorf("%w: leadership lost", lock.ErrUnknownOutcome), []error{lock.ErrUnknownOutcome, lock.ErrUnavailable}, nil},
		{lock.ErrClosed, []error{lock.ErrClosed}, nil},
		{fmt.Errorf("%w: zero", lock.ErrInvalidOwner), []error{lock.ErrInvalidOwner}, nil},
		{errors.New("disk on fire"), []error{api.ErrInternal}, []error{lock.ErrUnavailable, api.ErrUnexpectedResponse}},
	}
	for _, tc := range cases {
		t.Run(tc.storeErr.Error(), func(t *testing.T) {
			n := newTestNodeOver(t, failingStore{tc.storeErr}, Config{}, nil)
			_, err := n.client.Acquire(context.Background(), lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Second})
			for _, w := range tc.want {
				assert.ErrorIs(t, err, w)
			}
			for _, w := range tc.notWant {
				assert.NotErrorIs(t, err, w)
			}
		})
	}
}

// unusedAddr is a 127.0.0.1 address nothing listens on.
func unusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestClientNetworkErrors(t *testing.T) {
	ctx := context.Background()
	req := lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Second}

	t.Run("connection refused: unavailable, certainly not done", func(t *testing.T) {
		c, err := api.NewClient("http://"+unusedAddr(t), api.ClientConfig{})
		require.NoError(t, err)
		_, err = c.Acquire(ctx, req)
		assert.ErrorIs(t, err, lock.ErrUnavailable)
		assert.NotErrorIs(t, err, lock.ErrUnknownOutcome)
		_, err = c.Inspect(ctx, "k")
		assert.ErrorIs(t, err, lock.ErrUnavailable)
		_, err = c.Health(ctx)
		assert.ErrorIs(t, err, lock.ErrUnavailable)
	})

	t.Run("connection lost after sending: outcome unknown", func(t *testing.T) {
		var hits atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close() // read the request, then hang up without a word
			}
		}))
		t.Cleanup(srv.Close)
		c, err := api.NewClient(srv.URL, api.ClientConfig{})
		require.NoError(t, err)

		_, err = c.Acquire(ctx, req)
		assert.ErrorIs(t, err, lock.ErrUnknownOutcome)
		assert.ErrorIs(t, err, lock.ErrUnavailable)
		_, err = c.Release(ctx, "k", req.Owner)
		assert.ErrorIs(t, err, lock.ErrUnknownOutcome)
		_, err = c.Inspect(ctx, "k")
		assert.ErrorIs(t, err, lock.ErrUnavailable)
		assert.NotErrorIs(t, err, lock.ErrUnknownOutcome, "a read has no outcome to lose")
		assert.Positive(t, hits.Load())
	})

	t.Run("answers that are not ours", func(t *testing.T) {
		// The client's background requests (its stream's upgrade, a batch)
		// may still be answered while the test changes the status.
		var status atomic.Int64
		status.Store(http.StatusBadGateway)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "<html>proxy trouble</html>", int(status.Load()))
		}))
		t.Cleanup(srv.Close)
		c, err := api.NewClient(srv.URL, api.ClientConfig{})
		require.NoError(t, err)

		_, err = c.Acquire(ctx, req)
		assert.ErrorIs(t, err, lock.ErrUnknownOutcome, "a gateway may have passed the acquire on")
		_, err = c.Inspect(ctx, "k")
		assert.ErrorIs(t, err, lock.ErrUnavailable)
		assert.NotErrorIs(t, err, lock.ErrUnknownOutcome)

		status.Store(http.StatusNotFound)
		_, err = c.Acquire(ctx, req)
		assert.ErrorIs(t, err, api.ErrUnexpectedResponse)
		assert.NotErrorIs(t, err, lock.ErrUnavailable)
		_, err = c.Health(ctx)
		assert.ErrorIs(t, err, api.ErrUnexpectedResponse)
	})
}

func TestNewClientURLs(t *testing.T) {
	for _, good := range []string{"127.0.0.1:8080", "http://127.0.0.1:8080", "https://locks.example:443/raftlock/"} {
		_, err := api.NewClient(good, api.ClientConfig{})
		assert.NoError(t, err, good)
	}
	for _, bad := range []string{"", "ftp://host", "http://", "http://host/?q=1", "http://host/#frag", "http://%zz"} {
		_, err := api.NewClient(bad, api.ClientConfig{})
		assert.Error(t, err, bad)
	}
}

func TestClientBinaryKeys(t *testing.T) {
	n := newTestNode(t, Config{})
	ctx := context.Background()
	keys := []string{"a/b/../c", "\xff\xfe/raw", "x\x00y", "with space & ?query=1#frag", "ключ"}
	for _, key := range keys {
		owner := lock.NewOwner()
		_, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute})
		require.NoError(t, err, "%q", key)
		info, err := n.store.Inspect(ctx, key)
		require.NoError(t, err)
		assert.True(t, info.Locked, "the store holds exactly %q", key)
		info, err = n.client.Inspect(ctx, key)
		require.NoError(t, err)
		assert.True(t, info.Locked, "%q", key)
	}
	listed, err := n.client.List(ctx, lock.ListRequest{})
	require.NoError(t, err)
	var got []string
	for _, l := range listed {
		got = append(got, l.Key)
	}
	assert.ElementsMatch(t, keys, got)
}

// TestClientListFollowsPages: the client reads the node's pages until done.
func TestClientListFollowsPages(t *testing.T) {
	n := newTestNode(t, Config{ListPageSize: 2})
	ctx := context.Background()
	for _, key := range []string{"a/1", "a/2", "a/3", "a/4", "a/5", "b/1"} {
		_, err := n.client.Acquire(ctx, lock.AcquireRequest{Key: key, Owner: lock.NewOwner(), TTL: time.Minute})
		require.NoError(t, err)
	}
	keysOf := func(ls []lock.LockInfo) []string {
		var ks []string
		for _, l := range ls {
			ks = append(ks, l.Key)
			assert.True(t, l.Locked)
			assert.Positive(t, l.Token)
		}
		return ks
	}

	all, err := n.client.List(ctx, lock.ListRequest{})
	require.NoError(t, err)
	assert.Equal(t, []string{"a/1", "a/2", "a/3", "a/4", "a/5", "b/1"}, keysOf(all))

	prefixed, err := n.client.List(ctx, lock.ListRequest{Prefix: "a/", After: "a/1", Limit: 3})
	require.NoError(t, err)
	assert.Equal(t, []string{"a/2", "a/3", "a/4"}, keysOf(prefixed))

	none, err := n.client.List(ctx, lock.ListRequest{Prefix: "zzz"})
	require.NoError(t, err)
	assert.Empty(t, none)

	store := memstore.New()
	plain := newTestNodeOver(t, storeOnly{store}, Config{}, func() { _ = store.Close() })
	_, err = plain.client.List(ctx, lock.ListRequest{})
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}
