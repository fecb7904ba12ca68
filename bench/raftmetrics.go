package main

import (
	"sync"
	"time"

	metrics "github.com/armon/go-metrics"
)

// raftTimings records the durations hashicorp/raft reports through
// go-metrics for snapshots and restores (raft.snapshot.takeSnapshot,
// raft.snapshot.persist, raft.fsm.restore): the only way
// to time them on a real node without changing package cluster. Samples
// carry no node name; the nodes share this process.
type raftTimings struct {
	metrics.BlackholeSink
	mu      sync.Mutex // protects samples
	samples []raftSample
}

type raftSample struct {
	key        string
	start, end time.Time
	ms         float64
}

// installRaftTimings makes raft's metrics go to a new raftTimings, with
// go-metrics' runtime sampling off (it stops the world every second).
func installRaftTimings() *raftTimings {
	t := &raftTimings{}
	cfg := metrics.DefaultConfig("")
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false
	metrics.NewGlobal(cfg, t)
	return t
}

// uninstallRaftTimings sends raft's metrics back to nowhere.
func uninstallRaftTimings() {
	cfg := metrics.DefaultConfig("")
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false
	metrics.NewGlobal(cfg, &metrics.BlackholeSink{})
}

// AddSample receives every timer raft measures; only the few we report are kept.
func (t *raftTimings) AddSample(key []string, val float32) {
	if len(key) != 3 || key[0] != "raft" {
		return
	}
	name := key[0] + "." + key[1] + "." + key[2]
	switch name {
	case "raft.snapshot.takeSnapshot", "raft.snapshot.persist", "raft.fsm.restore":
	default:
		return
	}
	end := time.Now()
	d := time.Duration(float64(val) * float64(time.Millisecond))
	t.mu.Lock()
	t.samples = append(t.samples, raftSample{key: name, start: end.Add(-d), end: end, ms: float64(val)})
	t.mu.Unlock()
}

func (t *raftTimings) AddSampleWithLabels(key []string, val float32, _ []metrics.Label) {
	t.AddSample(key, val)
}

// startedAfter returns the durations (ms) of key's samples that began after from.
func (t *raftTimings) startedAfter(key string, from time.Time) []float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []float64
	for _, s := range t.samples {
		if s.key == key && s.start.After(from) {
			out = append(out, s.ms)
		}
	}
	return out
}
