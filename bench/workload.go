package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// cycle is one try-acquire + release, the unit of seq and par64.
func cycle(ctx context.Context, l locker) error {
	ok, err := l.tryAcquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if !ok {
		return errors.New("acquire: key held by another owner, though no one else uses it")
	}
	if err := l.release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// runSeq: one client, one key, try-acquire + release in a loop, through a
// member that does not lead.
func runSeq(ctx context.Context, sys system, p params) (map[string]float64, error) {
	member := 0
	if sys.members() > 1 {
		leader, err := sys.leader(ctx)
		if err != nil {
			return nil, err
		}
		member = (leader + 1) % sys.members()
	}
	c, err := sys.client(ctx, member)
	if err != nil {
		return nil, err
	}
	defer c.close()
	l := c.locker("bench-seq")
	warm := 0
	for t0 := time.Now(); time.Since(t0) < p.warmup; warm++ {
		if err := cycle(ctx, l); err != nil {
			return nil, err
		}
	}
	lat := make([]time.Duration, 0, 1<<14)
	start := time.Now()
	for time.Since(start) < p.duration {
		t := time.Now()
		if err := cycle(ctx, l); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t))
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	return map[string]float64{
		"seq_cycles_per_s": float64(len(lat)) / elapsed.Seconds(),
		"seq_p50_ms":       ms(percentile(lat, 0.50)),
		"seq_p99_ms":       ms(percentile(lat, 0.99)),
		"seq_cycles_total": float64(warm + len(lat)),
	}, nil
}

// window is the measured part of a run: cycles that end inside it count.
type window struct{ from, to time.Time }

func newWindow(p params) window {
	from := time.Now().Add(p.warmup)
	return window{from, from.Add(p.duration)}
}

func (w window) inside(t time.Time) bool { return !t.Before(w.from) && t.Before(w.to) }
func (w window) over(t time.Time) bool   { return !t.Before(w.to) }

// runPar: p.parClients clients, each on its own key, try-acquire + release
// as fast as they can; clients spread round-robin over the members.
func runPar(ctx context.Context, sys system, p params) (map[string]float64, error) {
	clients, err := openClients(ctx, sys, p.parClients)
	if err != nil {
		return nil, err
	}
	defer closeClients(clients)
	var counted, total atomic.Int64
	w := newWindow(p)
	err = parallel(ctx, len(clients), func(ctx context.Context, i int) error {
		l := clients[i].locker(fmt.Sprintf("bench-par/%d", i))
		for {
			if err := cycle(ctx, l); err != nil {
				return err
			}
			total.Add(1)
			now := time.Now()
			if w.over(now) {
				return nil
			}
			if w.inside(now) {
				counted.Add(1)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return map[string]float64{
		"par_cycles_per_s": float64(counted.Load()) / p.duration.Seconds(),
		"par_cycles_total": float64(total.Load()),
	}, nil
}

// runContend: p.contendClient clients on one key, each in a loop of blocking
// acquire + release (no work while holding). Every acquisition is a hand-off.
func runContend(ctx context.Context, sys system, p params) (map[string]float64, error) {
	clients, err := openClients(ctx, sys, p.contendClient)
	if err != nil {
		return nil, err
	}
	defer closeClients(clients)
	counts := make([]int, len(clients))
	var all atomic.Int64
	w := newWindow(p)
	// Waiters still queued when the window ends get the lock in turn as
	// the others leave, so everyone drains without cancelling a wait.
	err = parallel(ctx, len(clients), func(ctx context.Context, i int) error {
		l := clients[i].locker("bench-contend")
		for {
			if err := l.acquire(ctx); err != nil {
				return fmt.Errorf("acquire: %w", err)
			}
			now := time.Now()
			all.Add(1)
			if w.inside(now) {
				counts[i]++
			}
			if err := l.release(ctx); err != nil {
				return fmt.Errorf("release: %w", err)
			}
			if w.over(now) {
				return nil
			}
		}
	})
	if err != nil {
		return nil, err
	}
	total, sumSq := 0, 0.0
	for _, n := range counts {
		total += n
		sumSq += float64(n) * float64(n)
	}
	figs := map[string]float64{
		"contend_handoffs_per_s": float64(total) / p.duration.Seconds(),
		"contend_min":            float64(slices.Min(counts)),
		"contend_max":            float64(slices.Max(counts)),
		"contend_cycles_total":   float64(all.Load()),
	}
	if sumSq > 0 {
		figs["contend_jain"] = float64(total) * float64(total) / (float64(len(counts)) * sumSq)
		figs["contend_min_max"] = figs["contend_min"] / figs["contend_max"]
	}
	return figs, nil
}

// runSem: p.semClients clients on one semaphore of p.semLimit slots, each
// in a loop of blocking acquire + release (no work while holding): most
// acquires wait, and every release hands its slot to the next waiter.
func runSem(ctx context.Context, sys system, p params) (map[string]float64, error) {
	clients, err := openClients(ctx, sys, p.semClients)
	if err != nil {
		return nil, err
	}
	defer closeClients(clients)
	if _, ok := clients[0].(semaphoreClient); !ok {
		return nil, &notApplicable{"no semaphore of its own"}
	}
	var counted, all atomic.Int64
	w := newWindow(p)
	err = parallel(ctx, len(clients), func(ctx context.Context, i int) error {
		l := clients[i].(semaphoreClient).semaphore("bench-sem", p.semLimit)
		for {
			if err := l.acquire(ctx); err != nil {
				return fmt.Errorf("acquire: %w", err)
			}
			now := time.Now()
			all.Add(1)
			if w.inside(now) {
				counted.Add(1)
			}
			if err := l.release(ctx); err != nil {
				return fmt.Errorf("release: %w", err)
			}
			if w.over(now) {
				return nil
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return map[string]float64{
		"sem_acquires_per_s": float64(counted.Load()) / p.duration.Seconds(),
		"sem_cycles_total":   float64(all.Load()),
	}, nil
}

// runFailover: a client on a member that will survive takes a lock, the
// leader is killed, and from then on the client starts a try-acquire of a
// fresh key every 10ms (each may wait up to 10s) until one is granted; the
// figure is when the first grant arrives, counted from the start of the
// kill. Overlapping attempts measure the cluster's recovery rather than one
// client's timeout policy: an etcd request forwarded to the dead leader is
// lost and hangs until its deadline, which a user's retry would cut short.
func runFailover(ctx context.Context, sys system, p params) (map[string]float64, error) {
	leader, err := sys.leader(ctx)
	if err != nil {
		return nil, err
	}
	survivor := (leader + 1) % sys.members()
	c, err := sys.client(ctx, survivor)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := cycle(ctx, c.locker("bench-failover/probe")); err != nil {
		return nil, fmt.Errorf("before the kill: %w", err)
	}
	t0 := time.Now()
	if err := sys.kill(leader); err != nil {
		return nil, fmt.Errorf("kill: %w", err)
	}
	killed := time.Since(t0)

	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	granted := make(chan time.Duration, 1)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex // protects lastErr
		lastErr error
	)
	defer wg.Wait()
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for attempt := 0; ; attempt++ {
		wg.Go(func() {
			actx, acancel := context.WithTimeout(ctx, 10*time.Second)
			defer acancel()
			ok, err := c.locker(fmt.Sprintf("bench-failover/%d", attempt)).tryAcquire(actx)
			switch {
			case err == nil && ok:
				select {
				case granted <- time.Since(t0):
				default:
				}
			case err != nil && ctx.Err() == nil:
				mu.Lock()
				lastErr = err
				mu.Unlock()
			}
		})
		select {
		case d := <-granted:
			return map[string]float64{
				"failover_ms":      ms(d),
				"failover_kill_ms": ms(killed),
			}, nil
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return nil, fmt.Errorf("no acquire within a minute of the kill: %v", lastErr)
		case <-tick.C:
		}
	}
}

// fill takes n locks named held/00000000.. with p.fillClients clients spread
// over the members, and returns how long it took. ready is called once the
// clients are open, before the first lock: the moment to measure the
// baseline. The lockers are dropped (the locks stay held server-side), so
// that client-side handles do not count as the system's memory.
func fill(ctx context.Context, sys system, p params, n int, ready func()) (time.Duration, error) {
	clients, err := openClients(ctx, sys, p.fillClients)
	if err != nil {
		return 0, err
	}
	ready()
	// The clients stay open (an etcd session's lease keeps its locks) until
	// the system is torn down.
	progress("%s: held: taking %d locks with %d clients", sys.name(), n, len(clients))
	var next atomic.Int64
	start := time.Now()
	err = parallel(ctx, len(clients), func(ctx context.Context, i int) error {
		for {
			k := next.Add(1) - 1
			if k >= int64(n) {
				return nil
			}
			ok, err := clients[i].locker(heldKey(int(k))).tryAcquire(ctx)
			if err != nil {
				return fmt.Errorf("acquire %s: %w", heldKey(int(k)), err)
			}
			if !ok {
				return fmt.Errorf("acquire %s: held by another owner", heldKey(int(k)))
			}
		}
	})
	took := time.Since(start)
	if err == nil {
		progress("%s: held: %d locks taken in %v", sys.name(), n, took.Round(time.Millisecond))
	}
	return took, err
}

func heldKey(i int) string { return fmt.Sprintf("held/%08d", i) }

func openClients(ctx context.Context, sys system, n int) ([]client, error) {
	clients := make([]client, 0, n)
	for i := range n {
		c, err := sys.client(ctx, i%sys.members())
		if err != nil {
			closeClients(clients)
			return nil, err
		}
		clients = append(clients, c)
	}
	return clients, nil
}

func closeClients(cs []client) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(c.close)
	}
	wg.Wait()
}

// parallel runs f for 0..n-1 in goroutines and returns the first error; the
// first error cancels the others' ctx.
func parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := f(ctx, i); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
