package fsm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// lockKey is the i-th benchmark key: 16 bytes, like "lock-00000000042".
func lockKey(i int) string { return fmt.Sprintf("lock-%011d", i) }

func lockKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = lockKey(i)
	}
	return keys
}

// heldMachine returns a machine holding n locks with hour-long leases,
// granted a nanosecond apart as a busy leader would stamp them.
func heldMachine(n int) *Machine {
	m := New(nil)
	for i, k := range lockKeys(n) {
		m.Apply(acquire(time.Duration(i), k, numberedOwner(i), time.Hour, 0))
	}
	return m
}

func BenchmarkApplyAcquireRelease(b *testing.B) {
	for _, held := range []int{0, 100_000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			m := heldMachine(held)
			keys := lockKeys(1024)
			for i := range keys {
				keys[i] = "bench/" + keys[i]
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := keys[i%len(keys)]
				stamp := time.Duration(i) * time.Microsecond
				if r := m.Apply(acquire(stamp, k, ownerA, time.Second, 0)); r.Status != StatusGranted {
					b.Fatal(r)
				}
				if r := m.Apply(release(stamp, k, ownerA)); r.Status != StatusReleased {
					b.Fatal(r)
				}
			}
		})
	}
}

func BenchmarkApplyHandOff(b *testing.B) {
	// A key with 100 waiters: each iteration the holder releases (the head
	// is granted in the same apply) and queues again at the back.
	const waiters = 100
	m := New(nil)
	owners := make([]Owner, waiters+1)
	for i := range owners {
		owners[i] = numberedOwner(i)
		m.Apply(acquire(0, "hot", owners[i], time.Second, time.Hour))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o := owners[i%len(owners)]
		stamp := time.Duration(i) * time.Microsecond
		if r := m.Apply(release(stamp, "hot", o)); r.Status != StatusReleased || r.Waiters != waiters-1 {
			b.Fatal(r)
		}
		if r := m.Apply(acquire(stamp, "hot", o, time.Second, time.Hour)); r.Status != StatusQueued {
			b.Fatal(r)
		}
	}
}

func BenchmarkApplyExtend(b *testing.B) {
	const n = 100_000
	m := heldMachine(n)
	keys := lockKeys(n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i % n
		if r := m.Apply(extend(n+time.Duration(i), keys[j], numberedOwner(j), time.Hour)); r.Status != StatusExtended {
			b.Fatal(r)
		}
	}
}

var benchCommand = acquire(123456789*time.Microsecond, "service/orders/42", ownerA, 30*time.Second, 5*time.Second)

func BenchmarkEncodeCommand(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var err error
		if buf, err = benchCommand.AppendBinary(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecodeCommand(b *testing.B) {
	enc, err := benchCommand.AppendBinary(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := DecodeCommand(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeBatch(b *testing.B) {
	cmds := newCommandLog(1).take(64)
	valid := cmds[:0]
	for _, c := range cmds {
		if c.Validate() == nil {
			valid = append(valid, c)
		}
	}
	enc, err := AppendBatch(nil, valid)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := DecodeBatch(enc); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(valid)), "cmds/batch")
}

func BenchmarkSnapshot(b *testing.B) {
	m := heldMachine(100_000)
	b.ReportAllocs()
	b.ResetTimer()
	var n int
	for i := 0; i < b.N; i++ {
		n = len(m.Snapshot())
	}
	b.ReportMetric(float64(n), "snapshot-bytes")
}

// BenchmarkFreeze is the copy half of Snapshot, the other half being the
// encoding.
func BenchmarkFreeze(b *testing.B) {
	m := heldMachine(100_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.freeze(snapshotVersion)
	}
}

// BenchmarkFreezer is a whole chunked copy of 100,000 keys (4096 a chunk, as
// cluster snapshots take it), encoding included; mean-chunk-us and
// longest-chunk-us are the holds of the machine, what an apply may wait for
// (the longest includes whatever GC work landed in a chunk).
func BenchmarkFreezer(b *testing.B) {
	m := heldMachine(100_000)
	var longest, held time.Duration
	chunks := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fz := m.StartFreeze()
		for {
			start := time.Now()
			done, err := fz.Next(4096)
			d := time.Since(start)
			longest, held, chunks = max(longest, d), held+d, chunks+1
			if err != nil {
				b.Fatal(err)
			}
			if err := fz.Flush(io.Discard); err != nil {
				b.Fatal(err)
			}
			if done {
				break
			}
		}
	}
	b.ReportMetric(float64(longest.Microseconds()), "longest-chunk-us")
	b.ReportMetric(float64(held.Microseconds())/float64(chunks), "mean-chunk-us")
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// BenchmarkRestore restores a snapshot of n held locks; ns/lock is what
// restore time per lock should keep flat as n grows. -short leaves out the
// million locks, which take seconds to set up; ten million (several GB, a
// minute to set up) run only with FSM_RESTORE_10M=1. FSM_RESTORE_PROFILE=path
// writes a CPU profile of the restores alone to path.<n>.<via>.
func BenchmarkRestore(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000, 10_000_000} {
		if testing.Short() && n > 100_000 || n > 1_000_000 && os.Getenv("FSM_RESTORE_10M") == "" {
			continue
		}
		for _, via := range []string{"bytes", "copy", "stream"} {
			b.Run(fmt.Sprintf("keys=%d/via=%s", n, via), func(b *testing.B) { benchmarkRestore(b, n, via) })
		}
	}
}

// benchmarkRestore restores a snapshot of n held locks: from the bytes
// (via=bytes, the machine alone), from a fresh copy of them, as a member
// that read its snapshot file into a buffer first did (via=copy), or from a
// stream of them (via=stream, RestoreFrom). Run one via a process to
// compare them: memory one freed is memory the next need not fault in.
func benchmarkRestore(b *testing.B, n int, via string) {
	snap := heldMachine(n).Snapshot()
	m := New(nil)
	b.SetBytes(int64(len(snap)))
	b.ReportAllocs()
	if path := os.Getenv("FSM_RESTORE_PROFILE"); path != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d.%s", path, n, via))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	cpu := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var err error
		switch via {
		case "bytes":
			err = m.Restore(snap)
		case "copy":
			err = m.Restore(bytes.Clone(snap))
		default:
			err = m.RestoreFrom(bytes.NewReader(snap), int64(len(snap)))
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lock")
	// On a busy machine the wall time says little; the CPU time of
	// the whole process (GC workers and the index goroutine
	// included) is what a restore costs.
	b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N*n), "cpu-ns/lock")
}

// rangePage collects one page of up to limit held keys with prefix that sort
// after after, the way cluster's and the memory store's List page through
// Range: skipping keys up to after.
func rangePage(m *Machine, prefix, after string, limit int) []string {
	page := make([]string, 0, limit)
	m.Range(prefix, 0, func(key string, _ KeyState) bool {
		if key <= after {
			return true
		}
		page = append(page, key)
		return len(page) < limit
	})
	return page
}

// rangeFromPage is rangePage through RangeFrom: a seek to after instead of
// a walk past the keys before it.
func rangeFromPage(m *Machine, prefix, after string, limit int) []string {
	page := make([]string, 0, limit)
	m.RangeFrom(prefix, after, 0, func(key string, _ KeyState) bool {
		page = append(page, key)
		return len(page) < limit
	})
	return page
}

// BenchmarkRange lists a page of 100 keys from the start and from the middle
// of n held keys, through Range skipping to After as callers page today
// (via=Range) and through RangeFrom (via=RangeFrom). -short leaves out the
// million keys, which take seconds to set up.
func BenchmarkRange(b *testing.B) {
	const limit = 100
	for _, n := range []int{100_000, 1_000_000} {
		if testing.Short() && n > 100_000 {
			continue
		}
		var m *Machine // built by the first sub-benchmark that runs
		for _, from := range []struct {
			name  string
			after string
		}{{"start", ""}, {"middle", lockKey(n / 2)}} {
			for _, via := range []struct {
				name string
				page func(m *Machine, prefix, after string, limit int) []string
			}{{"Range", rangePage}, {"RangeFrom", rangeFromPage}} {
				b.Run(fmt.Sprintf("keys=%d/page=%s/via=%s", n, from.name, via.name), func(b *testing.B) {
					if m == nil {
						m = heldMachine(n)
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if page := via.page(m, "lock-", from.after, limit); len(page) != limit {
							b.Fatal(len(page))
						}
					}
				})
			}
		}
	}
}

// BenchmarkEnqueueWaiters queues MaxWaiters owners behind one holder: the
// whole queue per iteration, so ns/op is the cost of a full queue.
func BenchmarkEnqueueWaiters(b *testing.B) {
	owners := make([]Owner, MaxWaiters)
	for i := range owners {
		owners[i] = numberedOwner(i)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m := New(nil)
		m.Apply(acquire(0, "busy", ownerA, time.Hour, 0))
		for j, o := range owners {
			if r := m.Apply(acquire(0, "busy", o, time.Hour, time.Hour)); r.Status != StatusQueued || r.Waiters != j+1 {
				b.Fatal(r)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*MaxWaiters), "ns/waiter")
}

// TestMemoryPerHeldLock measures the heap cost of a held lock at a million
// locks. It is slow, so it runs only with FSM_MEMORY=1 and without -short.
func TestMemoryPerHeldLock(t *testing.T) {
	if testing.Short() || os.Getenv("FSM_MEMORY") == "" {
		t.Skip("set FSM_MEMORY=1 (without -short) to measure memory per held lock")
	}
	const n = 1_000_000
	keys := lockKeys(n)
	measure := func(build func() *Machine) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := build()
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(m)
		return float64(after.HeapAlloc-before.HeapAlloc) / n
	}
	applied := measure(func() *Machine {
		m := New(nil)
		for i, k := range keys {
			m.Apply(acquire(time.Duration(i), k, numberedOwner(i), time.Hour, 0))
		}
		return m
	})
	snap := heldMachine(n).Snapshot()
	restored := measure(func() *Machine {
		m := New(nil)
		if err := m.Restore(snap); err != nil {
			t.Fatal(err)
		}
		return m
	})
	// The snapshot stays live to the end of the measure: freed inside it,
	// its 43 bytes a lock would be taken off the restored state's.
	runtime.KeepAlive(snap)
	t.Logf("bytes per held lock (%d-byte keys): %.0f after applies, %.0f after restore", len(keys[0]), applied, restored)
	assert.LessOrEqual(t, applied, 115.0)
	assert.LessOrEqual(t, restored, 115.0)
}
