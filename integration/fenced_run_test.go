package integration

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// fencedRun is one run of the fenced-register workload.
type fencedRun struct {
	cfg        fencedConfig
	holders    int                         // in this process
	procs      int                         // client processes (process clusters only)
	procNodes  []string                    // the agents' HTTP addresses, for client processes
	procFaults func([]*clientProc) []fault // extra faults that need the client processes
	procCfg    fencedConfig                // client processes' config
}

// runFenced runs the workload against stores with the nemesis and checks it.
func runFenced(t *testing.T, s settings, rep *report, stores storeSet, nem *nemesis, fr fencedRun) {
	t.Helper()
	reg := &register{}
	var mu sync.Mutex // protects windows
	var windows []window
	addWindow := func(w window) {
		mu.Lock()
		windows = append(windows, w)
		mu.Unlock()
	}
	unexpected := &errorLog{}

	var procs []*clientProc
	if fr.procs > 0 {
		srv := httptest.NewServer(reg)
		t.Cleanup(srv.Close)
		for i := range fr.procs {
			p, err := startClientProc(clientProcConfig{ID: fr.holders + i, Nodes: fr.procNodes, Register: srv.URL,
				Fenced: fr.procCfg, Run: s.workload, Seed: s.seed})
			if err != nil {
				t.Fatalf("starting client process: %v", err)
			}
			t.Cleanup(p.kill)
			procs = append(procs, p)
		}
		if fr.procFaults != nil {
			nem.faults = append(nem.faults, fr.procFaults(procs)...)
		}
	}

	run, stop := context.WithTimeout(context.Background(), s.workload)
	defer stop()
	budget, cancel := context.WithTimeout(context.Background(), s.workload+defaultRecoverIn+30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	holders := make([]*holder, fr.holders)
	for i := range holders {
		holders[i] = newHolder(i, stores, localRegister{reg}, fr.cfg, s.rng(uint64(2000+i)), unexpected, addWindow)
		wg.Add(1)
		go func() {
			defer wg.Done()
			holders[i].run(run, budget)
		}()
	}
	nem.run(run)
	wg.Wait()

	var stats holderStats
	var sum tally
	for _, h := range holders {
		stats.add(h.stats)
		sum.add(h.tally)
	}
	for _, p := range procs {
		if err := p.wait(defaultRecoverIn + 60*time.Second); err != nil {
			rep.problem("%v", err)
		}
		p.mu.Lock()
		windows = append(windows, p.windows...)
		stats.add(p.stats)
		sum.add(p.tally)
		if p.unexpected != "" {
			rep.problem("client process %d saw errors no store should give: %s", p.id, p.unexpected)
		}
		p.mu.Unlock()
	}
	if n := unexpected.count.Load(); n > 0 {
		rep.problem("clients saw errors no store should give: %s", unexpected)
	}
	rep.ops, rep.unsure, rep.unknown, rep.dropped = sum.ops, sum.unsure, sum.unknown, sum.dropped

	reg.mu.Lock()
	events := append([]regEvent(nil), reg.events...)
	reg.mu.Unlock()
	rep.note("%d holdings, %d register writes, %d late ops refused by fencing, %d late ops not yet overtaken, %d stalls",
		stats.Holds, stats.Writes, stats.StaleRefused, stats.StaleAccepted, stats.Stalls)
	rep.atLeast(1, stats.Holds, "acquires granted")
	trouble := checkFenced(windows, events)
	switch {
	case fr.cfg.Multi:
		trouble = checkMultiWindows(windows)
		sets := 0
		for _, w := range windows {
			if len(w.Keys) > 1 {
				sets++
			}
		}
		rep.note("%d windows checked key by key (%d of sets of 2 or 3 keys)", len(windows), sets)
		rep.atLeast(1, sets, "holdings of sets of several keys")
	case fr.cfg.kinds():
		trouble = checkKindWindows(fr.cfg, windows)
		rep.note("%d windows checked as a %s", len(windows), map[bool]string{true: fmt.Sprintf("semaphore of %d", fr.cfg.Limit), false: "read/write lock"}[fr.cfg.Limit > 0])
	}
	for _, v := range trouble {
		rep.violation("%s", v)
	}
	if len(trouble) > 0 {
		rep.keep(s, map[string]func(io.Writer) error{
			"windows.txt":  func(w io.Writer) error { return writeWindows(w, windows) },
			"register.txt": func(w io.Writer) error { return writeRegEvents(w, events) },
			"events.txt": func(w io.Writer) error {
				_, err := io.WriteString(w, nem.events.String())
				return err
			},
		})
	}
}

func writeWindows(w io.Writer, windows []window) error {
	ws := append([]window(nil), windows...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].Start < ws[j].Start })
	var b strings.Builder
	for _, x := range ws {
		note := ""
		if x.GrantOnly {
			note = "  (granted, never used)"
		}
		fmt.Fprintf(&b, "%s .. %s  client %d token %d%s\n", wallString(x.Start), wallString(x.End), x.Client, x.Token, note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRegEvents(w io.Writer, events []regEvent) error {
	var b strings.Builder
	for _, e := range events {
		op := "read "
		if e.write {
			op = "write"
		}
		fmt.Fprintf(&b, "%s  client %d token %d %s %d ok=%v\n", wallString(e.at), e.client, e.token, op, e.value, e.ok)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
