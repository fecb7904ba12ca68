package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one figure of the table.
type row struct {
	key    string
	label  string
	higher bool // higher is better; else lower is
	ratio  bool // print raftlock's ratio to each peer
	format func(sys map[string]float64) string
}

var rows = []row{
	{key: "seq_cycles_per_s", label: "seq: try-acquire+release cycles/s, 1 client via a follower", higher: true, ratio: true},
	{key: "seq_p50_ms", label: "seq: p50 cycle latency (ms)", ratio: true},
	{key: "seq_p99_ms", label: "seq: p99 cycle latency (ms)", ratio: true},
	{key: "par_cycles_per_s", label: "par64: cycles/s, 64 clients on own keys", higher: true, ratio: true},
	{key: "contend_handoffs_per_s", label: "contend16: hand-offs/s, 16 clients on 1 key", higher: true, ratio: true},
	{key: "contend_jain", label: "contend16: fairness, Jain's index (1 = even)", higher: true, ratio: true},
	{key: "contend_min_max", label: "contend16: min/max acquisitions per client", higher: true, ratio: true, format: func(f map[string]float64) string {
		return fmt.Sprintf("%.0f/%.0f", f["contend_min"], f["contend_max"])
	}},
	{key: "par_cpu_ms_per_cycle", label: "par64: CPU ms per cycle (process user+sys)", ratio: true},
	{key: "contend_cpu_ms_per_cycle", label: "contend16: CPU ms per hand-off (process user+sys)", ratio: true},
	{key: "sem_acquires_per_s", label: "sem8: acquires/s, 64 clients on 1 semaphore of 8", higher: true, ratio: true},
	{key: "par_raft_entries_per_cycle", label: "par64: raft log entries per cycle (diagnostic)"},
	{key: "contend_raft_entries_per_cycle", label: "contend16: raft log entries per cycle (diagnostic)"},
	{key: "sem_raft_entries_per_cycle", label: "sem8: raft log entries per cycle (diagnostic)"},
	{key: "held_locks", label: "held: locks held", format: func(f map[string]float64) string { return fmt.Sprintf("%.0f", f["held_locks"]) }},
	{key: "held_fill_per_s", label: "held: fill rate, locks/s", higher: true, ratio: true},
	{key: "held_bytes_per_lock", label: "held: memory, bytes per lock per node", ratio: true},
	{key: "held_snapshot_ms", label: "held: snapshot of all locks (ms)", ratio: true},
	{key: "held_snapshot_bytes_per_lock", label: "held: snapshot size, bytes per lock", ratio: true},
	{key: "held_restore_ms", label: "held: restore of that snapshot (ms)", ratio: true},
	{key: "held_restart_read_ms", label: "held: restart a member -> linearizable read (ms)", ratio: true},
	{key: "held_restart_caughtup_ms", label: "held: restart a member -> holds every lock (ms)", ratio: true},
	{key: "failover_ms", label: "failover: leader killed -> next acquire (ms)", ratio: true},
	{key: "watch_leader_last_p50_ms", label: "watch: release -> last watcher told, on the leader, p50 of rounds (ms)"},
	{key: "watch_leader_last_max_ms", label: "watch: release -> last watcher told, on the leader, max of rounds (ms)"},
	{key: "watch_last_p50_ms", label: "watch: release -> last watcher told, over 3 nodes, p50 of rounds (ms)"},
	{key: "watch_last_max_ms", label: "watch: release -> last watcher told, over 3 nodes, max of rounds (ms)"},
	{key: "watch_http_last_p50_ms", label: "watch: release -> last watcher told, HTTP to the leader, p50 (ms)"},
	{key: "watch_http_last_max_ms", label: "watch: release -> last watcher told, HTTP to the leader, max (ms)"},
	{key: "keepalive_sessions", label: "keepalive: sessions kept alive", format: func(f map[string]float64) string { return fmt.Sprintf("%.0f", f["keepalive_sessions"]) }},
	{key: "keepalive_renewals_per_s", label: "keepalive: renewals/s"},
	{key: "keepalive_entries_per_s", label: "keepalive: raft log entries/s while kept alive"},
	{key: "keepalive_renewals_per_entry", label: "keepalive: renewals per raft entry"},
	{key: "keepalive_cpu_s_per_s", label: "keepalive: process CPU seconds per second"},
}

// report collects every system's figures, failures and caveats.
type report struct {
	p         params
	systems   []string
	workloads []string
	figures   map[string]map[string]float64
	errs      map[string]map[string]string // system -> workload -> error
	notes     map[string][]string
	general   []string // notes on the whole run
	load      string
	elapsed   time.Duration
}

func newReport(p params, systems, workloads []string) *report {
	return &report{
		p: p, systems: systems, workloads: workloads,
		figures: map[string]map[string]float64{},
		errs:    map[string]map[string]string{},
		notes:   map[string][]string{},
	}
}

func (r *report) add(sys string, figs map[string]float64) {
	if r.figures[sys] == nil {
		r.figures[sys] = map[string]float64{}
	}
	maps.Copy(r.figures[sys], figs)
}

func (r *report) fail(sys string, workloads []string, err error) {
	if r.errs[sys] == nil {
		r.errs[sys] = map[string]string{}
	}
	for _, w := range workloads {
		if slices.Contains(r.workloads, w) {
			r.errs[sys][w] = err.Error()
		}
	}
}

// skip marks a system that could not be had (redis-server missing): every
// workload reads n/a, and the run does not count as failed.
func (r *report) skip(sys string, err error) {
	r.fail(sys, r.workloads, &notApplicable{"skipped: " + err.Error()})
}

// failures counts the workloads that failed for a reason other than n/a.
func (r *report) failures() int {
	n := 0
	for _, byWorkload := range r.errs {
		for _, msg := range byWorkload {
			if !strings.HasPrefix(msg, "n/a") {
				n++
			}
		}
	}
	return n
}

func (r *report) note(sys, note string) {
	if !slices.Contains(r.notes[sys], note) {
		r.notes[sys] = append(r.notes[sys], note)
	}
}

func (r *report) generalNote(note string) { r.general = append(r.general, note) }

// bigRows are the held rows for raftlock's run on its own at -held locks.
func bigRows() []row {
	var out []row
	for _, rw := range rows {
		if strings.HasPrefix(rw.key, "held_") {
			big := rw
			big.key = "big_" + rw.key
			big.label = strings.Replace(rw.label, "held:", "held alone:", 1)
			big.ratio = false
			if rw.format != nil {
				big.format = func(f map[string]float64) string {
					return fmt.Sprintf("%.0f", f["big_held_locks"])
				}
			}
			out = append(out, big)
		}
	}
	return out
}

// cell is a system's figure for a row: the value, "n/a", or "FAIL".
func (r *report) cell(sys string, rw row) string {
	if strings.HasPrefix(rw.key, "big_") && sys != sysRaftlock {
		return ""
	}
	f := r.figures[sys]
	v, ok := f[rw.key]
	if !ok || math.IsNaN(v) {
		w := workloadOf(rw.key)
		if msg, failed := r.errs[sys][w]; failed {
			if strings.HasPrefix(msg, "n/a") {
				return "n/a"
			}
			return "FAIL"
		}
		if !slices.Contains(r.workloads, w) {
			return "-"
		}
		return "n/a"
	}
	if rw.format != nil {
		return rw.format(f)
	}
	return formatValue(v)
}

func workloadOf(key string) string {
	switch {
	case strings.HasPrefix(key, "seq_"):
		return wlSeq
	case strings.HasPrefix(key, "par_"):
		return wlPar
	case strings.HasPrefix(key, "contend_"):
		return wlContend
	case strings.HasPrefix(key, "sem_"):
		return wlSem
	case strings.HasPrefix(key, "held_"), strings.HasPrefix(key, "big_"):
		return wlHeld
	case strings.HasPrefix(key, "watch_"):
		return wlWatch
	case strings.HasPrefix(key, "keepalive_"):
		return wlKeepalive
	}
	return wlFailover
}

func formatValue(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// ratio is raftlock's figure divided by peer's, when both exist.
func (r *report) ratio(peer string, rw row) (float64, bool) {
	a, ok1 := r.figures[sysRaftlock][rw.key]
	b, ok2 := r.figures[peer][rw.key]
	if !ok1 || !ok2 || b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0, false
	}
	return a / b, true
}

// httpCompared says whether the table has raftlock over HTTP beside
// raftlock embedded, and so an http/rl column.
func (r *report) httpCompared() bool {
	return slices.Contains(r.systems, sysRaftlock) && slices.Contains(r.systems, sysRaftlockHTTP)
}

// httpRatio is raftlock-http's figure divided by raftlock's (embedded):
// how much of the embedded figure the HTTP path keeps.
func (r *report) httpRatio(rw row) (float64, bool) {
	a, ok1 := r.figures[sysRaftlockHTTP][rw.key]
	b, ok2 := r.figures[sysRaftlock][rw.key]
	if !ok1 || !ok2 || b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0, false
	}
	return a / b, true
}

func (r *report) peers() []string {
	var out []string
	for _, s := range r.systems {
		if s != sysRaftlock && s != sysRaftlockHTTP && slices.Contains(r.systems, sysRaftlock) {
			out = append(out, s)
		}
	}
	return out
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\nraftlock bench: %s, %d CPUs, GOMAXPROCS %d, load average at the end %s, total %v\n",
		runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0), r.load, r.elapsed.Round(time.Second))
	rounds := ""
	if r.p.rounds > 1 {
		rounds = fmt.Sprintf("; every figure is the median of %d rounds that ran the systems in turn", r.p.rounds)
	}
	fmt.Fprintf(w, "seq/par64/contend16: %v measured after %v warm-up; held: locks taken by %d clients; ratios are raftlock / peer, and http/rl raftlock-http / raftlock (↑: higher is better, ↓: lower is better)%s\n\n",
		r.p.duration, r.p.warmup, r.p.fillClients, rounds)

	// tabwriter aligns every column alike (right, for the numbers); labels
	// padded to one width come out left-aligned.
	width := 0
	for _, rw := range rows {
		width = max(width, len([]rune(rw.label)))
	}
	pad := func(s string) string { return s + strings.Repeat(" ", width-len([]rune(s))) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := []string{pad("figure"), ""}
	header = append(header, r.systems...)
	for _, p := range r.peers() {
		header = append(header, "rl/"+p)
	}
	if r.httpCompared() {
		header = append(header, "http/rl")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	all := rows
	if _, ok := r.figures[sysRaftlock]["big_held_locks"]; ok {
		all = append(slices.Clone(rows), bigRows()...)
	}
	for _, rw := range all {
		if !slices.Contains(r.workloads, workloadOf(rw.key)) {
			continue
		}
		better := "↓"
		if rw.higher {
			better = "↑"
		}
		if !rw.ratio {
			better = ""
		}
		cells := []string{pad(rw.label), better}
		for _, s := range r.systems {
			cells = append(cells, r.cell(s, rw))
		}
		for _, p := range r.peers() {
			if x, ok := r.ratio(p, rw); ok && rw.ratio {
				cells = append(cells, fmt.Sprintf("%.2f×", x))
			} else {
				cells = append(cells, "")
			}
		}
		if r.httpCompared() {
			if x, ok := r.httpRatio(rw); ok && rw.ratio {
				cells = append(cells, fmt.Sprintf("%.0f%%", 100*x))
			} else {
				cells = append(cells, "")
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	tw.Flush()

	fmt.Fprintln(w, "\nnotes:")
	for _, s := range r.systems {
		for _, n := range r.notes[s] {
			fmt.Fprintf(w, "- %s: %s\n", s, n)
		}
		for _, wl := range slices.Sorted(maps.Keys(r.errs[s])) {
			fmt.Fprintf(w, "- %s: %s: %s\n", s, wl, r.errs[s][wl])
		}
	}
	if f, ok := r.figures[sysRaftlock]["failover_kill_ms"]; ok {
		fmt.Fprintf(w, "- raftlock: failover: Close of the leader took %.0fms of that\n", f)
	}
	fmt.Fprintln(w, "- all: one process per system run on this machine's loopback; in-process members share CPUs and one heap, so absolute figures are lower than on 3 hosts, and the ratios are the point")
	for _, n := range r.general {
		fmt.Fprintf(w, "- all: %s\n", n)
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "BENCH "+r.json())
}

// json is the one machine-readable line: parameters, load, every figure
// (per system) and raftlock's ratios.
func (r *report) json() string {
	ratios := map[string]map[string]float64{}
	for _, p := range r.peers() {
		for _, rw := range rows {
			if x, ok := r.ratio(p, rw); ok && rw.ratio {
				if ratios[p] == nil {
					ratios[p] = map[string]float64{}
				}
				ratios[p][rw.key] = round(x, 4)
			}
		}
	}
	for _, rw := range rows {
		if x, ok := r.httpRatio(rw); ok && rw.ratio {
			if ratios[sysRaftlockHTTP+"/"+sysRaftlock] == nil {
				ratios[sysRaftlockHTTP+"/"+sysRaftlock] = map[string]float64{}
			}
			ratios[sysRaftlockHTTP+"/"+sysRaftlock][rw.key] = round(x, 4)
		}
	}
	figs := map[string]map[string]float64{}
	for s, f := range r.figures {
		figs[s] = map[string]float64{}
		for k, v := range f {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				figs[s][k] = round(v, 4)
			}
		}
	}
	host, _ := os.Hostname()
	out := map[string]any{
		"schema":    1,
		"time":      time.Now().UTC().Format(time.RFC3339),
		"go":        runtime.Version(),
		"host":      host,
		"cpus":      runtime.NumCPU(),
		"load":      r.load,
		"elapsed_s": round(r.elapsed.Seconds(), 1),
		"params": map[string]any{
			"duration_s": r.p.duration.Seconds(), "warmup_s": r.p.warmup.Seconds(),
			"par_clients": r.p.parClients, "contend_clients": r.p.contendClient, "sem_clients": r.p.semClients, "sem_limit": r.p.semLimit,
			"held": r.p.held, "held_peers": r.p.heldPeers, "fill_clients": r.p.fillClients,
			"redis_poll_ms": ms(r.p.redisPoll), "slow_disk_ms": ms(r.p.slowDisk), "log_sync_delay_ms": ms(r.p.logSyncDelay),
		},
		"systems":   r.systems,
		"workloads": r.workloads,
		"results":   figs,
		"ratios":    ratios,
		"errors":    r.errs,
	}
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Sprintf(`{"error":%q}`, err.Error())
	}
	return string(b)
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// formatFigures is a one-line summary for the progress log.
func formatFigures(f map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(f)) {
		parts = append(parts, fmt.Sprintf("%s=%s", k, formatValue(f[k])))
	}
	return strings.Join(parts, " ")
}

// mergeRounds takes, for each system and figure, the median over the
// rounds (a round that failed a workload gives none of its figures), keeps
// every round's errors and notes, and notes each round's HTTP-to-embedded
// ratios, which say how much the rounds agree.
func (r *report) mergeRounds(rounds []*report) {
	for _, sys := range r.systems {
		values := map[string][]float64{}
		for _, rr := range rounds {
			for k, v := range rr.figures[sys] {
				values[k] = append(values[k], v)
			}
			for w, msg := range rr.errs[sys] {
				if r.errs[sys] == nil {
					r.errs[sys] = map[string]string{}
				}
				r.errs[sys][w] = msg
			}
			for _, n := range rr.notes[sys] {
				r.note(sys, n)
			}
		}
		medians := map[string]float64{}
		for k, vs := range values {
			medians[k] = median(vs)
		}
		r.add(sys, medians)
	}
	for _, key := range []string{"par_cycles_per_s", "contend_handoffs_per_s", "par_cpu_ms_per_cycle"} {
		var each []string
		for _, rr := range rounds {
			rl, okRL := rr.figures[sysRaftlock][key]
			h, okH := rr.figures[sysRaftlockHTTP][key]
			if okRL && okH && rl > 0 {
				each = append(each, fmt.Sprintf("%.0f%%", 100*h/rl))
			}
		}
		if len(each) > 1 {
			r.note(sysRaftlockHTTP, fmt.Sprintf("%s, raftlock-http / raftlock in each of the %d rounds: %s", key, len(rounds), strings.Join(each, " ")))
		}
	}
}

// median of vs (not empty): the middle value, or the mean of the two middle ones.
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
