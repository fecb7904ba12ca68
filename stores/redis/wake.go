package redis

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/lock"
)

// wakeups reads the wake-up streams of every acquire of one Store that
// waits, all on one connection (one XREAD BLOCK over all their streams),
// so that a thousand waiters do not take a thousand connections of the
// client's pool. A waiter that registers interrupts the read with an entry
// on the Store's own control stream, and the next read includes it.
type wakeups struct {
	store   *Store
	control string // the control stream's key

	mu      sync.Mutex // protects the fields below
	waiters map[*wakeWaiter]struct{}
	running bool // the reader runs
}

// wakeWaiter is one waiting acquire: it is woken by an entry of stream
// after the ID after.
type wakeWaiter struct {
	stream string
	after  string      // guarded by wakeups.mu
	woken  chan wakeup // size one, sent to under wakeups.mu: a wake is never lost, never blocks
}

// wakeup is what woke a waiter: a grant (its token and the lease left when
// the step that granted it ran), or a zero wakeup, which tells it to look.
type wakeup struct {
	token     uint64
	remaining time.Duration
}

func (wk *wakeups) init(s *Store) {
	wk.store = s
	wk.control = s.prefix + "c:" + lock.NewOwner().String()
	wk.waiters = make(map[*wakeWaiter]struct{})
}

// add registers a waiter for an entry of stream after the ID after, which
// the step that queued it read: no wake-up sent after that step is missed.
func (wk *wakeups) add(stream, after string) *wakeWaiter {
	w := &wakeWaiter{stream: stream, after: after, woken: make(chan wakeup, 1)}
	wk.mu.Lock()
	wk.waiters[w] = struct{}{}
	start := !wk.running
	wk.running = true
	wk.mu.Unlock()
	if start {
		go wk.read()
	} else {
		wk.interrupt()
	}
	return w
}

func (wk *wakeups) remove(w *wakeWaiter) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	delete(wk.waiters, w)
}

// interrupt ends the reader's current read, so that its next one includes
// the waiters registered since.
func (wk *wakeups) interrupt() {
	ctx, cancel := context.WithTimeout(context.Background(), wk.store.heartbeat)
	defer cancel()
	pipe := wk.store.rdb.Pipeline()
	pipe.XAdd(ctx, &goredis.XAddArgs{Stream: wk.control, MaxLen: 1, Values: []any{"w", "1"}})
	pipe.PExpire(ctx, wk.control, time.Minute)
	_, _ = pipe.Exec(ctx) // a reader that misses it reads again within a heartbeat
}

// read runs while anyone waits: it blocks on every waiter's stream and the
// control stream at once, and wakes the waiters whose stream got an entry.
// When the read fails, it wakes everyone: each looks again, and reports the
// failure if it persists.
func (wk *wakeups) read() {
	controlAfter := "$"
	for {
		wk.mu.Lock()
		if len(wk.waiters) == 0 {
			wk.running = false
			wk.mu.Unlock()
			return
		}
		streams := []string{wk.control}
		ids := []string{controlAfter}
		byStream := make(map[string][]*wakeWaiter, len(wk.waiters))
		for w := range wk.waiters {
			if _, ok := byStream[w.stream]; !ok {
				streams = append(streams, w.stream)
				ids = append(ids, w.after)
			}
			byStream[w.stream] = append(byStream[w.stream], w)
		}
		wk.mu.Unlock()

		if controlAfter == "$" {
			// "$" would miss an interrupt sent before this read: start from
			// the control stream's last entry instead.
			if last, err := wk.store.rdb.XRevRangeN(context.Background(), wk.control, "+", "-", 1).Result(); err == nil {
				controlAfter, ids[0] = "0-0", "0-0"
				if len(last) > 0 {
					controlAfter, ids[0] = last[0].ID, last[0].ID
				}
			}
		}
		res, err := wk.store.rdb.XRead(context.Background(), &goredis.XReadArgs{
			Streams: append(streams, ids...), Block: wk.store.heartbeat,
		}).Result()
		switch {
		case errors.Is(err, goredis.Nil):
			wk.wakeAll() // a heartbeat: every waiter looks again
		case err != nil:
			wk.wakeAll()
			if errors.Is(err, goredis.ErrClosed) {
				wk.mu.Lock()
				wk.running = false
				wk.mu.Unlock()
				return
			}
			time.Sleep(100 * time.Millisecond) // the server is away: do not spin
		}
		wk.mu.Lock()
		for _, st := range res {
			if len(st.Messages) == 0 {
				continue
			}
			last := st.Messages[len(st.Messages)-1]
			if st.Stream == wk.control {
				controlAfter = last.ID
				continue
			}
			up := wakeupOf(last.Values)
			for _, w := range byStream[st.Stream] {
				deliver(w.woken, up)
				w.after = last.ID // until it leaves, it waits for the next one
			}
		}
		wk.mu.Unlock()
	}
}

func (wk *wakeups) wakeAll() {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	for w := range wk.waiters {
		deliver(w.woken, wakeup{})
	}
}

// deliver puts up in c, keeping a grant already there over a plain wake.
// Called with wakeups.mu held: the only senders hold it, so the send after
// the drain never blocks.
func deliver(c chan wakeup, up wakeup) {
	select {
	case old := <-c:
		if old.token != 0 && up.token == 0 {
			up = old
		}
	default:
	}
	c <- up
}

// wakeupOf reads a wake-up entry (lua/state.lua's wake).
func wakeupOf(values map[string]any) wakeup {
	t, _ := values["t"].(string)
	r, _ := values["r"].(string)
	token, err1 := strconv.ParseUint(t, 10, 64)
	us, err2 := strconv.ParseInt(r, 10, 64)
	if err1 != nil || err2 != nil || token == 0 {
		return wakeup{}
	}
	return wakeup{token: token, remaining: time.Duration(us) * time.Microsecond}
}
