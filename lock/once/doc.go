// Package once runs a job at most once per tick across every replica that
// shares a lock store: every 5 minutes, or at the times a schedule function
// gives, one replica runs it and the others skip that tick.
//
//	err := once.PerTick(ctx, c, "report", once.Every(5*time.Minute),
//		func(ctx context.Context, t once.Tick) error {
//			return buildReport(ctx, t.Time) // t.Token fences the report's writes
//		},
//		once.OnError(func(t once.Tick, err error) { log.Printf("report %v: %v", t.Time, err) }),
//	)
//
// Every replica calls PerTick with the same job name and schedule. At each
// tick t, each replica tries (without waiting) the lock
//
//	job:<name>:<t in UTC, RFC 3339>    e.g. job:report:2026-11-30T04:35:00Z
//
// One gets it and runs the function; the others find it held and skip the
// tick. Because the key names the tick, a replica that crashes mid-run
// cannot block the next tick: the next tick is another key.
//
// Memory store WARNING: with memstore.New (package lock/memstore), each
// process has its own locks, so EVERY REPLICA RUNS EVERY TICK and nothing
// warns them. Give PerTick a client on a cluster node or the API client.
// (Several PerTick loops in one process sharing one memory store do exclude
// each other; the tests use that.)
//
// # The tick's lock outlives the run
//
// Hosts' clocks differ a little. If the winner released the tick's lock right
// after a fast run, a replica whose clock is slightly behind would wake for
// the same tick a moment later, find the key free and run the tick twice. So
// the tick's lease lasts to the end of the tick's window (the next tick) plus
// Skew, and the winner does not release it early: it lets the lease run out.
// (A lease lasts at most lock.MaxTTL, 24 hours: with longer windows the
// tick's lock is kept that long, which still covers replicas that attempt the
// tick up to a day late.)
// While the function runs, the lease is also kept alive (extended to TTL
// ahead whenever less than two thirds of TTL remain), so a run longer than the
// window still holds its tick.
//
// Clock-skew tolerance: a replica only attempts a tick while its own clock is
// inside the tick's window [t, next tick), and never attempts a tick it
// overslept. So a tick runs at most once as long as no replica's clock is
// behind the winner's by more than Skew (default 10 seconds) when it attempts
// late in the window; a replica that attempts on time (the usual case) is
// safe up to one window plus Skew behind. Keep clocks synchronized (NTP); the
// lock store itself does not depend on them: a raftlock cluster measures
// leases on its leader's monotonic clock, never on wall clocks.
//
// # What happens when
//
//   - The function's error, a lease lost while it ran, and store errors are
//     reported through OnError (by default logged); they never stop the loop.
//   - A store error while taking the tick's lock (a leader election, a
//     network blip) is retried, from 100ms doubling to 5s apart, while the
//     tick's window lasts, so a short outage at tick time delays the tick
//     rather than making every replica miss it. The first error is reported
//     at once, and the last if the window ends first: then the tick is
//     skipped on this replica. Unlike frameworks that run the tick anyway
//     when the lock cannot be taken, at most once wins over at least once: a
//     job worth a lock is one that must not run twice.
//   - A replica runs one tick at a time. A run that outlasts its window makes
//     this replica miss the ticks that start meanwhile (the other replicas take
//     them), so runs of consecutive ticks can overlap across replicas. If they
//     must not, take a lock on the job inside the function.
//   - When ctx is done, PerTick cancels the running function's context, waits
//     for it to return, and returns ctx.Err(); the tick's lock is not released
//     early (see above).
//   - A replica that starts in the middle of a window waits for the next
//     tick, as cron does.
//
// Tests replace the clock (WithClock) to drive ticks without waiting for them;
// leases in the store still count real time.
package once
