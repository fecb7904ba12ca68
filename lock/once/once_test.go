package once_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
	"github.com/raftlock/raftlock/lock/memstore"
	"github.com/raftlock/raftlock/lock/once"
)

const patience = 10 * time.Second

// 04:30:00 UTC is a multiple of 5 minutes and of 1 minute.
var base = time.Date(2026, 11, 30, 4, 30, 0, 0, time.UTC)

func newStore(t *testing.T) *memstore.Store {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// runs records which replica ran which tick.
type runs struct {
	mu     sync.Mutex
	byTick map[time.Time][]int
	ticks  []once.Tick
	ran    chan struct{} // receives after each run
}

func newRuns() *runs {
	return &runs{byTick: make(map[time.Time][]int), ran: make(chan struct{}, 100)}
}

func (r *runs) add(replica int, t once.Tick) {
	r.mu.Lock()
	r.byTick[t.Time] = append(r.byTick[t.Time], replica)
	r.ticks = append(r.ticks, t)
	r.mu.Unlock()
	r.ran <- struct{}{}
}

func (r *runs) of(t time.Time) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.byTick[t]...)
}

// replicas runs n PerTick loops and, at cleanup, stops them and checks that
// each returned ctx's error.
func replicas(t *testing.T, n int, run func(ctx context.Context, i int) error) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- run(ctx, i) }()
	}
	t.Cleanup(func() {
		cancel()
		for range n {
			select {
			case err := <-errs:
				assert.ErrorIs(t, err, context.Canceled)
			case <-time.After(patience):
				t.Error("a PerTick loop did not return after its context was canceled")
				return
			}
		}
	})
	return cancel
}

func failOnError(t *testing.T) once.Option {
	return once.OnError(func(tick once.Tick, err error) { t.Errorf("tick %s: %v", tick.Key, err) })
}

func TestFiveReplicasRunEachTickOnce(t *testing.T) {
	c := lock.New(newStore(t))
	clock := newFakeClock(base.Add(time.Second))
	r := newRuns()
	const n = 5
	replicas(t, n, func(ctx context.Context, i int) error {
		return once.PerTick(ctx, c, "report", once.Every(5*time.Minute), func(ctx context.Context, tick once.Tick) error {
			r.add(i, tick)
			return nil
		}, once.WithClock(clock), failOnError(t))
	})

	for k := 1; k <= 4; k++ {
		clock.waitForSleepers(t, n) // every replica waits for the next tick
		tick := base.Add(time.Duration(k) * 5 * time.Minute)
		clock.AdvanceTo(tick)
		clock.waitForSleepers(t, n) // every replica has tried it
		assert.Len(t, r.of(tick), 1, "tick %v ran on replicas %v", tick, r.of(tick))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Len(t, r.ticks, 4)
	assert.Equal(t, "job:report:2026-11-30T04:35:00Z", r.ticks[0].Key)
	for i := 1; i < len(r.ticks); i++ {
		assert.Greater(t, r.ticks[i].Token, r.ticks[i-1].Token, "each tick's lock has a higher token")
	}
}

// switchableStore is one replica's view of the shared store: it can be cut off.
type switchableStore struct {
	lock.Store
	down atomic.Bool
}

func (s *switchableStore) Acquire(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	if s.down.Load() {
		return lock.Lease{}, lock.ErrUnavailable
	}
	return s.Store.Acquire(ctx, req)
}

func (s *switchableStore) Release(ctx context.Context, key string, owner lock.Owner) (bool, error) {
	if s.down.Load() {
		return false, lock.ErrUnavailable
	}
	return s.Store.Release(ctx, key, owner)
}

func (s *switchableStore) Extend(ctx context.Context, key string, owner lock.Owner, ttl time.Duration) (lock.Lease, error) {
	if s.down.Load() {
		return lock.Lease{}, lock.ErrUnavailable
	}
	return s.Store.Extend(ctx, key, owner, ttl)
}

func TestCrashedReplicaDoesNotBlockTheNextTick(t *testing.T) {
	shared := newStore(t)
	clock := newFakeClock(base.Add(time.Second))
	r := newRuns()
	hung := make(chan struct{}) // the crashed replica's run never returns until cleanup
	var crashed atomic.Int32
	crashed.Store(-1)
	const n = 5
	stores := make([]*switchableStore, n)
	for i := range stores {
		stores[i] = &switchableStore{Store: shared}
	}
	replicas(t, n, func(ctx context.Context, i int) error {
		c := lock.New(stores[i])
		return once.PerTick(ctx, c, "report", once.Every(5*time.Minute), func(ctx context.Context, tick once.Tick) error {
			r.add(i, tick)
			if crashed.CompareAndSwap(-1, int32(i)) {
				stores[i].down.Store(true) // its keep-alive cannot reach the store any more
				<-hung                     // and its run never ends
			}
			return nil
		}, once.WithClock(clock), once.OnError(func(once.Tick, error) {}))
	})
	t.Cleanup(func() { close(hung) }) // runs before the replicas' cleanup

	clock.waitForSleepers(t, n)
	first := base.Add(5 * time.Minute)
	clock.AdvanceTo(first)
	receive(t, r.ran, "the first tick to run")
	clock.waitForSleepers(t, n-1) // the crashed one is stuck in its run
	require.Len(t, r.of(first), 1)
	crashedReplica := int(crashed.Load())

	for k := 2; k <= 4; k++ {
		tick := base.Add(time.Duration(k) * 5 * time.Minute)
		clock.AdvanceTo(tick)
		clock.waitForSleepers(t, n-1)
		ran := r.of(tick)
		if assert.Len(t, ran, 1, "tick %v", tick) {
			assert.NotEqual(t, crashedReplica, ran[0])
		}
	}
	locked, err := lock.New(shared).Lock("job:report:" + first.Format(time.RFC3339)).IsLocked(context.Background())
	require.NoError(t, err)
	assert.True(t, locked, "the crashed run still holds its own tick, and nobody needs it")
}

func TestLaggingClockDoesNotRunATickTwice(t *testing.T) {
	store := newStore(t)
	var contended []string
	var mu sync.Mutex
	c := lock.New(store, lock.WithHooks(lock.Hooks{OnContended: func(_ context.Context, e lock.ContendedEvent) {
		mu.Lock()
		contended = append(contended, e.Key)
		mu.Unlock()
	}}))
	clock := newFakeClock(base.Add(30 * time.Second))
	r := newRuns()
	lag := []time.Duration{0, -2 * time.Second} // replica 1's clock is 2s behind
	replicas(t, 2, func(ctx context.Context, i int) error {
		return once.PerTick(ctx, c, "report", once.Every(time.Minute), func(ctx context.Context, tick once.Tick) error {
			r.add(i, tick)
			return nil
		}, once.WithClock(skewedClock{clock, lag[i]}), failOnError(t))
	})

	clock.waitForSleepers(t, 2)
	tick := base.Add(time.Minute)
	clock.AdvanceTo(tick) // replica 0 wakes; replica 1 still reads 04:30:58
	receive(t, r.ran, "replica 0 to run the tick")
	clock.waitForSleepers(t, 2)
	assert.Equal(t, []int{0}, r.of(tick))

	info, err := store.Inspect(context.Background(), "job:report:2026-11-30T04:31:00Z")
	require.NoError(t, err)
	assert.True(t, info.Locked, "the tick's lock outlives the fast run")
	assert.Greater(t, info.Remaining, time.Minute, "held to the end of the window plus the skew tolerance")
	assert.LessOrEqual(t, info.Remaining, time.Minute+once.DefaultSkew)

	clock.Advance(2 * time.Second) // replica 1 reaches the same tick, 2s late
	clock.waitForSleepers(t, 2)
	assert.Equal(t, []int{0}, r.of(tick), "the late replica found the tick taken")
	mu.Lock()
	assert.Equal(t, []string{"job:report:2026-11-30T04:31:00Z"}, contended)
	mu.Unlock()
}

func TestLockReleasedOnceTheWindowHasPassed(t *testing.T) {
	store := newStore(t)
	c := lock.New(store)
	clock := newFakeClock(base.Add(30 * time.Second))
	started := make(chan once.Tick)
	finish := make(chan struct{})
	replicas(t, 1, func(ctx context.Context, _ int) error {
		return once.PerTick(ctx, c, "slow", once.Every(time.Minute), func(ctx context.Context, tick once.Tick) error {
			started <- tick
			<-finish
			return nil
		}, once.WithClock(clock), once.Skew(5*time.Second), failOnError(t))
	})

	clock.waitForSleepers(t, 1)
	clock.AdvanceTo(base.Add(time.Minute))
	tick := receive(t, started, "the run to start")
	clock.Advance(time.Minute + 5*time.Second) // past the window and the skew tolerance
	close(finish)
	clock.waitForSleepers(t, 1)
	locked, err := c.Lock(tick.Key).IsLocked(context.Background())
	require.NoError(t, err)
	assert.False(t, locked, "nobody can take the tick any more: its lock is given back")
}

func TestOversleptTickIsSkipped(t *testing.T) {
	c := lock.New(newStore(t))
	clock := newFakeClock(base.Add(30 * time.Second))
	r := newRuns()
	replicas(t, 1, func(ctx context.Context, i int) error {
		return once.PerTick(ctx, c, "report", once.Every(time.Minute), func(ctx context.Context, tick once.Tick) error {
			r.add(i, tick)
			return nil
		}, once.WithClock(clock), failOnError(t))
	})
	clock.waitForSleepers(t, 1)
	clock.AdvanceTo(base.Add(2*time.Minute + time.Second)) // woke after the 04:31 tick's window
	clock.waitForSleepers(t, 1)
	assert.Empty(t, r.of(base.Add(time.Minute)), "a tick whose window passed is not run late")
	assert.Empty(t, r.of(base.Add(2*time.Minute)), "nor one whose start was missed")
	clock.AdvanceTo(base.Add(3 * time.Minute))
	clock.waitForSleepers(t, 1)
	assert.Equal(t, []int{0}, r.of(base.Add(3*time.Minute)))
}

func TestErrorsAreReportedAndTheLoopGoesOn(t *testing.T) {
	c := lock.New(newStore(t))
	clock := newFakeClock(base.Add(time.Second))
	reported := make(chan error, 10)
	var ticks []time.Time
	var mu sync.Mutex
	replicas(t, 1, func(ctx context.Context, _ int) error {
		return once.PerTick(ctx, c, "report", once.Every(time.Minute), func(ctx context.Context, tick once.Tick) error {
			return fmt.Errorf("report for %v failed", tick.Time.Format("15:04"))
		}, once.WithClock(clock), once.OnError(func(tick once.Tick, err error) {
			mu.Lock()
			ticks = append(ticks, tick.Time)
			mu.Unlock()
			reported <- err
		}))
	})
	for k := 1; k <= 2; k++ {
		clock.waitForSleepers(t, 1)
		clock.AdvanceTo(base.Add(time.Duration(k) * time.Minute))
		err := receive(t, reported, "the error to be reported")
		assert.EqualError(t, err, fmt.Sprintf("report for 04:3%d failed", k))
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []time.Time{base.Add(time.Minute), base.Add(2 * time.Minute)}, ticks)
}

// replicaOnADownStore runs one replica of a job every minute on a store that
// is down, and moves its clock to the first tick.
func replicaOnADownStore(t *testing.T) (s *switchableStore, clock *fakeClock, reported chan error, ran chan once.Tick) {
	s = &switchableStore{Store: newStore(t)}
	s.down.Store(true)
	clock = newFakeClock(base.Add(time.Second))
	reported, ran = make(chan error, 100), make(chan once.Tick, 1)
	replicas(t, 1, func(ctx context.Context, _ int) error {
		return once.PerTick(ctx, lock.New(s), "report", once.Every(time.Minute), func(ctx context.Context, tick once.Tick) error {
			ran <- tick
			return nil
		}, once.WithClock(clock), once.OnError(func(_ once.Tick, err error) { reported <- err }))
	})
	clock.waitForSleepers(t, 1)
	clock.AdvanceTo(base.Add(time.Minute))
	return s, clock, reported, ran
}

// A store that is down at tick time is retried: the tick runs once it is
// back, within the tick's window.
func TestStoreErrorIsRetriedWithinTheWindow(t *testing.T) {
	s, clock, reported, ran := replicaOnADownStore(t)
	err := receive(t, reported, "the first store error")
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.ErrorContains(t, err, "retrying")
	clock.waitForSleepers(t, 1) // the retry's wait
	assert.Empty(t, ran, "not run without its lock")

	s.down.Store(false)
	clock.Advance(time.Second)
	assert.Equal(t, base.Add(time.Minute), receive(t, ran, "the tick, late but within its window").Time)
	assert.Empty(t, reported, "one report for the outage")
}

// A store that stays down for the whole window makes the replica give up
// the tick (reported), and the next tick runs once the store is back.
func TestStoreDownForTheWholeWindowSkipsTheTick(t *testing.T) {
	s, clock, reported, ran := replicaOnADownStore(t)
	assert.ErrorContains(t, receive(t, reported, "the first store error"), "retrying")
	// Each retry fails; once the replica sleeps again, what it reported is
	// in the channel. It gives up before its clock reaches the next tick.
	var last error
	clock.waitForSleepers(t, 1)
	for last == nil {
		clock.Advance(5 * time.Second)
		clock.waitForSleepers(t, 1)
		select {
		case last = <-reported:
		default:
		}
	}
	assert.ErrorContains(t, last, "gave up")
	assert.ErrorIs(t, last, lock.ErrUnavailable)
	assert.Less(t, clock.Now(), base.Add(2*time.Minute))
	assert.Empty(t, ran, "not run without its lock")

	s.down.Store(false)
	clock.AdvanceTo(base.Add(2 * time.Minute))
	assert.Equal(t, base.Add(2*time.Minute), receive(t, ran, "the next tick").Time)
}

// extendFailingStore answers every extend with err.
type extendFailingStore struct {
	lock.Store
	err error
}

func (s extendFailingStore) Extend(context.Context, string, lock.Owner, time.Duration) (lock.Lease, error) {
	return lock.Lease{}, s.err
}

func TestLostLeaseCancelsTheRun(t *testing.T) {
	tests := []struct {
		name   string
		extend error
	}{
		{"extend says the lease is gone", fmt.Errorf("%w (key %q)", lock.ErrNotHeld, "k")},
		{"no extend gets through before the lease ends", lock.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := lock.New(extendFailingStore{newStore(t), tt.extend})
			clock := newFakeClock(base.Add(time.Second))
			reported := make(chan error, 1)
			cause := make(chan error, 1)
			replicas(t, 1, func(ctx context.Context, _ int) error {
				// With 50ms windows, no skew and a 30ms TTL, the lease is short and
				// the keep-alive has to extend it within 30ms.
				return once.PerTick(ctx, c, "report", once.Every(50*time.Millisecond), func(ctx context.Context, tick once.Tick) error {
					<-ctx.Done()
					cause <- context.Cause(ctx)
					return errors.New("interrupted")
				}, once.WithClock(clock), once.Skew(0), once.TTL(30*time.Millisecond),
					once.OnError(func(_ once.Tick, err error) { reported <- err }))
			})
			clock.waitForSleepers(t, 1)
			clock.Advance(50 * time.Millisecond)
			assert.ErrorIs(t, receive(t, cause, "the run's context to end"), lock.ErrNotHeld)
			err := receive(t, reported, "the report")
			assert.ErrorIs(t, err, lock.ErrNotHeld)
			assert.ErrorContains(t, err, "interrupted", "the function's own error too")
		})
	}
}

func TestCancelWaitsForTheRun(t *testing.T) {
	c := lock.New(newStore(t))
	clock := newFakeClock(base.Add(time.Second))
	started := make(chan struct{})
	var returned atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- once.PerTick(ctx, c, "report", once.Every(time.Minute), func(ctx context.Context, tick once.Tick) error {
			close(started)
			<-ctx.Done()
			returned.Store(true)
			return nil
		}, once.WithClock(clock), failOnError(t))
	}()
	clock.waitForSleepers(t, 1)
	clock.AdvanceTo(base.Add(time.Minute))
	receive(t, started, "the run to start")
	cancel()
	assert.ErrorIs(t, receive(t, done, "PerTick to return"), context.Canceled)
	assert.True(t, returned.Load(), "PerTick returned after the run did")
}

func TestScheduleWithoutMoreTicksEnds(t *testing.T) {
	c := lock.New(newStore(t))
	clock := newFakeClock(base)
	last := base.Add(time.Minute)
	sched := func(after time.Time) time.Time {
		if after.Before(last) {
			return last
		}
		return time.Time{} // no more ticks
	}
	ran := make(chan once.Tick, 1)
	done := make(chan error, 1)
	go func() {
		done <- once.PerTick(context.Background(), c, "migrate", sched, func(ctx context.Context, tick once.Tick) error {
			ran <- tick
			return nil
		}, once.WithClock(clock), failOnError(t))
	}()
	clock.waitForSleepers(t, 1)
	clock.AdvanceTo(last)
	assert.Equal(t, last, receive(t, ran, "the last tick").Time)
	assert.NoError(t, receive(t, done, "PerTick to return"))
}

func TestInvalidArguments(t *testing.T) {
	c := lock.New(newStore(t))
	fn := func(context.Context, once.Tick) error { return nil }
	every := once.Every(time.Minute)
	tests := []struct {
		name  string
		c     *lock.Client
		job   string
		sched once.Schedule
		fn    func(context.Context, once.Tick) error
		opts  []once.Option
		want  []error
	}{
		{name: "nil client", job: "j", sched: every, fn: fn, want: []error{once.ErrInvalid}},
		{name: "nil function", c: c, job: "j", sched: every, want: []error{once.ErrInvalid}},
		{name: "empty job", c: c, sched: every, fn: fn, want: []error{once.ErrInvalid}},
		{name: "job too long", c: c, job: strings.Repeat("j", lock.MaxKeyLen), sched: every, fn: fn,
			want: []error{once.ErrInvalid, lock.ErrInvalidKey}},
		{name: "nil schedule", c: c, job: "j", fn: fn, want: []error{once.ErrSchedule}},
		{name: "zero period", c: c, job: "j", sched: once.Every(0), fn: fn, want: []error{once.ErrSchedule}},
		{name: "schedule going back", c: c, job: "j", fn: fn, want: []error{once.ErrSchedule},
			sched: func(after time.Time) time.Time { return after.Add(-time.Second) }},
		{name: "ttl", c: c, job: "j", sched: every, fn: fn, opts: []once.Option{once.TTL(0)},
			want: []error{once.ErrInvalid, lock.ErrInvalidTTL}},
		{name: "negative skew", c: c, job: "j", sched: every, fn: fn, opts: []once.Option{once.Skew(-time.Second)},
			want: []error{once.ErrInvalid}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := once.PerTick(context.Background(), tt.c, tt.job, tt.sched, tt.fn, tt.opts...)
			for _, want := range tt.want {
				assert.ErrorIs(t, err, want)
			}
			assert.True(t, strings.HasPrefix(err.Error(), "once: "), "message %q", err)
		})
	}
}

func TestEvery(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	tests := []struct {
		period time.Duration
		after  time.Time
		want   time.Time
	}{
		{5 * time.Minute, base.Add(2*time.Minute + 10*time.Second), base.Add(5 * time.Minute)},
		{5 * time.Minute, base, base.Add(5 * time.Minute)},
		{5 * time.Minute, base.Add(-time.Nanosecond), base},
		{5 * time.Minute, base.Add(time.Minute).In(paris), base.Add(5 * time.Minute)},
		{24 * time.Hour, base, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{100 * time.Millisecond, base.Add(50 * time.Millisecond), base.Add(100 * time.Millisecond)},
	}
	for _, tt := range tests {
		got := once.Every(tt.period)(tt.after)
		assert.True(t, got.Equal(tt.want), "Every(%v)(%v) = %v, want %v", tt.period, tt.after, got, tt.want)
	}
}

// The real clock, short ticks: five replicas, and no tick runs twice.
func TestFiveReplicasOnTheSystemClock(t *testing.T) {
	c := lock.New(newStore(t))
	r := newRuns()
	replicas(t, 5, func(ctx context.Context, i int) error {
		return once.PerTick(ctx, c, "beat", once.Every(50*time.Millisecond), func(ctx context.Context, tick once.Tick) error {
			r.add(i, tick)
			return nil
		}, failOnError(t))
	})
	for range 4 {
		receive(t, r.ran, "a tick to run")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for tick, ran := range r.byTick {
		assert.Len(t, ran, 1, "tick %v ran on replicas %v", tick, ran)
	}
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		require.FailNow(t, "timed out waiting for "+what)
		panic("unreachable")
	}
}
