package fsm

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// BenchmarkStateBytes measures what the machine holds in memory per unit
// of state (bytes/unit, the live heap after a GC, divided by the units),
// the figures behind the quotas package cluster enforces (Config.MaxLocks,
// MaxSessions, MaxTotalWaiters). Keys are 16 bytes. Run with -benchtime=1x.
func BenchmarkStateBytes(b *testing.B) {
	const n = 100_000
	meta := strings.Repeat("m", MaxMetaLen)
	cases := []struct {
		name  string
		setup func(m *Machine) // state not measured
		fill  func(m *Machine) // adds n units
	}{
		{"lock", nil, func(m *Machine) {
			for i, k := range lockKeys(n) {
				m.Apply(acquire(time.Duration(i), k, numberedOwner(i), time.Hour, 0))
			}
		}},
		{"lock-meta-64", nil, func(m *Machine) {
			for i, k := range lockKeys(n) {
				c := acquire(time.Duration(i), k, numberedOwner(i), time.Hour, 0)
				c.Meta = meta[:64]
				m.Apply(c)
			}
		}},
		{"lock-meta-max", nil, func(m *Machine) {
			for i, k := range lockKeys(n) {
				c := acquire(time.Duration(i), k, numberedOwner(i), time.Hour, 0)
				c.Meta = meta
				m.Apply(c)
			}
		}},
		{"semaphore", nil, func(m *Machine) {
			for i, k := range lockKeys(n) {
				m.Apply(acquireKind(time.Duration(i), k, numberedOwner(i), time.Hour, 0, 4, false))
			}
		}},
		{"semaphore-hold", nil, func(m *Machine) {
			// holds of two semaphores of MaxHolders slots
			keys := lockKeys(2)
			for i := range n {
				m.Apply(acquireKind(time.Duration(i), keys[i%2], numberedOwner(i), time.Hour, 0, MaxHolders, false))
			}
		}},
		{"session", nil, func(m *Machine) {
			for i := range n {
				m.Apply(createSession(time.Duration(i), numberedOwner(i), time.Hour, 0))
			}
		}},
		{"session-lock", nil, func(m *Machine) {
			for i, k := range lockKeys(n) {
				m.Apply(createSession(time.Duration(i), numberedOwner(i+n), time.Hour, 0))
				m.Apply(acquireIn(time.Duration(i), k, numberedOwner(i), numberedOwner(i+n), 0, ""))
			}
		}},
		{"waiter", func(m *Machine) {
			for i, k := range lockKeys(n / 64) {
				m.Apply(acquire(time.Duration(i), k, numberedOwner(1<<30+i), time.Hour, 0))
			}
		}, func(m *Machine) {
			// 64 waiters on each of n/64 held keys
			keys := lockKeys(n / 64)
			for i := range n {
				m.Apply(acquire(time.Duration(i), keys[i%len(keys)], numberedOwner(i), time.Hour, time.Hour))
			}
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				m := New(nil)
				if c.setup != nil {
					c.setup(m)
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				c.fill(m)
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/unit")
				runtime.KeepAlive(m)
			}
		})
	}
}
