package once

import "time"

// Schedule gives the first tick strictly after the time it is given, or the
// zero time when there is none (PerTick then returns). Each tick's window runs
// from the tick to the next one. Every replica must use the same schedule, and
// it must depend on nothing but its argument, so that all replicas agree on the
// ticks (and the keys). A cron library's Next method usually fits:
// once.Schedule(sched.Next).
type Schedule func(after time.Time) time.Time

// Every ticks at the multiples of d counted from the zero time (UTC): for a d
// that divides a day, on the wall clock's round marks (04:35:00, 04:40:00, ...),
// the same on every replica whatever its time zone. d must be positive.
func Every(d time.Duration) Schedule {
	return func(after time.Time) time.Time {
		if d <= 0 {
			return after // refused by PerTick: a tick must come after its argument
		}
		return after.Truncate(d).Add(d)
	}
}

// Tick is one run of the job.
type Tick struct {
	Time  time.Time // when the tick was due, as the schedule gave it
	Key   string    // the lock taken for it: job:<name>:<Time in UTC, RFC 3339>
	Token uint64    // that lock's fencing token; pass it to what the job writes
}

// key is the lock of job's tick at t.
func key(job string, t time.Time) string {
	return "job:" + job + ":" + t.UTC().Format(time.RFC3339Nano)
}
