package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// Client processes: holders of the fenced-register workload that run as
// processes of this test binary, so that a nemesis can pause one with
// SIGSTOP (a client stuck in a long GC pause or a frozen VM) while it
// holds the lock, and resume it after its lease ran out.

// clientProcessEnv, when set, makes the test binary run as a client process
// (see TestMain) configured by the JSON in it.
const clientProcessEnv = "RAFTLOCK_INTEGRATION_CLIENT"

// clientProcConfig configures a client process.
type clientProcConfig struct {
	ID       int           `json:"id"`
	Nodes    []string      `json:"nodes"`    // the agents' HTTP addresses
	Register string        `json:"register"` // the register's base URL
	Fenced   fencedConfig  `json:"fenced"`
	Run      time.Duration `json:"run"` // how long to keep taking the lock
	Seed     uint64        `json:"seed"`
}

// clientProcLine is one line a client process writes on stdout.
type clientProcLine struct {
	Window     *window      `json:"window,omitempty"`
	Stats      *holderStats `json:"stats,omitempty"`
	Tally      *[4]int      `json:"tally,omitempty"` // ops, unsure, unknown, dropped
	Unexpected string       `json:"unexpected,omitempty"`
}

// apiStores is a storeSet of HTTP clients; a client process cannot know
// which agents are down, so it tries them all.
type apiStores []*api.Client

func (a apiStores) size() int              { return len(a) }
func (a apiStores) store(i int) lock.Store { return a[i] }

// runClientProcess is the main function of a client process.
func runClientProcess() int {
	var cfg clientProcConfig
	if err := json.Unmarshal([]byte(os.Getenv(clientProcessEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "client process: bad config:", err)
		return 2
	}
	var stores apiStores
	for _, addr := range cfg.Nodes {
		c, err := api.NewClient(addr, api.ClientConfig{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "client process:", err)
			return 2
		}
		stores = append(stores, c)
	}
	out := json.NewEncoder(os.Stdout)
	var mu sync.Mutex // protects out
	emit := func(l clientProcLine) {
		mu.Lock()
		defer mu.Unlock()
		out.Encode(l)
	}
	unexpected := &errorLog{}
	reg := httpRegister{base: cfg.Register, hc: &http.Client{Timeout: time.Minute}}
	h := newHolder(cfg.ID, stores, reg, cfg.Fenced, rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID))), unexpected,
		func(w window) { emit(clientProcLine{Window: &w}) })
	run, stop := context.WithTimeout(context.Background(), cfg.Run)
	defer stop()
	budget, cancel := context.WithTimeout(context.Background(), cfg.Run+defaultRecoverIn+30*time.Second)
	defer cancel()
	h.run(run, budget)
	emit(clientProcLine{Stats: &h.stats, Tally: &[4]int{h.tally.ops, h.tally.unsure, h.tally.unknown, h.tally.dropped}})
	if unexpected.count.Load() > 0 {
		emit(clientProcLine{Unexpected: unexpected.String()})
	}
	return 0
}

// clientProc is a running client process, as the test sees it.
type clientProc struct {
	id   int
	cmd  *exec.Cmd
	logs *logRing
	done chan struct{} // closed once its output is read and it has exited

	mu         sync.Mutex // protects the fields below
	paused     bool
	windows    []window
	stats      holderStats
	tally      tally
	unexpected string
	bad        error // a line that could not be read
}

// startClientProc starts client process cfg.ID.
func startClientProc(cfg clientProcConfig) (*clientProc, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), clientProcessEnv+"="+string(raw))
	p := &clientProc{id: cfg.ID, cmd: cmd, logs: newLogRing(1 << 20), done: make(chan struct{})}
	cmd.Stderr = p.logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l clientProcLine
			err := json.Unmarshal(sc.Bytes(), &l)
			p.mu.Lock()
			switch {
			case err != nil:
				p.bad = fmt.Errorf("client process %d wrote %q: %w", p.id, sc.Text(), err)
			case l.Window != nil:
				p.windows = append(p.windows, *l.Window)
			case l.Stats != nil:
				p.stats = *l.Stats
				if t := l.Tally; t != nil {
					p.tally = tally{ops: t[0], unsure: t[1], unknown: t[2], dropped: t[3]}
				}
			case l.Unexpected != "":
				p.unexpected = l.Unexpected
			}
			p.mu.Unlock()
		}
		cmd.Wait()
	}()
	return p, nil
}

func (p *clientProc) pause() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		return false
	}
	p.paused = p.cmd.Process.Signal(syscall.SIGSTOP) == nil
	return p.paused
}

func (p *clientProc) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.paused = false
	}
}

// wait waits for the process to finish its run, at most patience; then it
// is killed and that is an error.
func (p *clientProc) wait(patience time.Duration) error {
	p.resume()
	select {
	case <-p.done:
	case <-time.After(patience):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("client process %d did not finish within %v; killed", p.id, patience)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bad != nil {
		return p.bad
	}
	if !p.cmd.ProcessState.Success() {
		return fmt.Errorf("client process %d: %v; stderr: %s", p.id, p.cmd.ProcessState, lastLines(p.logs.String(), 20))
	}
	return nil
}

func (p *clientProc) kill() {
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.done
}

// pauseClientFault pauses a random client process for two to four TTLs,
// so that its lease runs out while it may be in the middle of a write.
func pauseClientFault(procs []*clientProc, ttl time.Duration) fault {
	return fault{name: "pause-client", min: 2 * ttl, max: 4 * ttl,
		inject: func(_ context.Context, rng *rand.Rand) (func() error, error) {
			p := procs[rng.IntN(len(procs))]
			if !p.pause() {
				return nil, errSkip
			}
			return func() error { p.resume(); return nil }, nil
		}}
}
