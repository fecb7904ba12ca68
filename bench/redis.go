package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisSystem is one redis-server started by the bench on a free loopback
// port with a temp dir: persistence off, or AOF with an fsync per write.
// Locks are SET key token NX PX ttl, released by a compare-and-delete script;
// a blocking acquire is SET NX in a loop, as Redis lock users do.
type redisSystem struct {
	p    params
	aof  bool
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	rdb  *redis.Client
	note []string
}

// releaseScript deletes the key only if it still holds our token.
var releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func newRedis(p params, aof bool) (*redisSystem, error) {
	bin, err := findRedis(p)
	if err != nil {
		return nil, err
	}
	return &redisSystem{p: p, aof: aof, bin: bin}, nil
}

var (
	redisOnce sync.Once
	redisBin  string
	redisErr  error
)

// findRedis looks for redis-server and, when it is missing and allowed,
// installs it from the Debian packages (once per run).
func findRedis(p params) (string, error) {
	redisOnce.Do(func() {
		if bin, err := exec.LookPath(p.redisServer); err == nil {
			redisBin = bin
			return
		}
		const how = "apt-get install -y redis-server"
		if !p.installRedis || os.Geteuid() != 0 {
			redisErr = fmt.Errorf("%s not found; install it with: %s (as root)", p.redisServer, how)
			return
		}
		if _, err := exec.LookPath("apt-get"); err != nil {
			redisErr = fmt.Errorf("%s not found and no apt-get to install it; install Redis 7 and pass -redis-server", p.redisServer)
			return
		}
		progress("redis-server not found: running %s", how)
		install := func() error {
			cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "redis-server")
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%w: %s", err, lastLines(string(out), 3))
			}
			return nil
		}
		if err := install(); err != nil {
			progress("install failed (%v); running apt-get update first", err)
			if out, err := exec.Command("apt-get", "update").CombinedOutput(); err != nil {
				redisErr = fmt.Errorf("apt-get update: %w: %s", err, lastLines(string(out), 3))
				return
			}
			if err := install(); err != nil {
				redisErr = fmt.Errorf("%s: %w", how, err)
				return
			}
		}
		redisBin, redisErr = exec.LookPath(p.redisServer)
		if redisErr == nil {
			// The package may have started its own service on 6379; ours
			// run on other ports, so it only costs a little memory.
			progress("installed %s", redisBin)
		}
	})
	return redisBin, redisErr
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

func (s *redisSystem) name() string {
	if s.aof {
		return sysRedisAOF
	}
	return sysRedis
}

func (s *redisSystem) members() int { return 1 }

func (s *redisSystem) notes() []string {
	mode := "persistence off (save \"\", appendonly no)"
	if s.aof {
		mode = "appendonly yes, appendfsync always"
	}
	return append([]string{
		fmt.Sprintf("%s %s, one server, %s; SET NX PX + compare-and-delete script (go-redis v9); blocking acquire = SET NX retried every %v",
			s.bin, s.version(), mode, s.p.redisPoll),
	}, s.note...)
}

func (s *redisSystem) version() string {
	out, err := exec.Command(s.bin, "--version").Output()
	if err != nil {
		return ""
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return ""
}

func (s *redisSystem) start(ctx context.Context) error {
	dir, err := os.MkdirTemp(s.p.dataDir, "bench-"+s.name()+"-")
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s.dir, s.port = dir, port
	if err := s.launch(ctx); err != nil {
		return err
	}
	s.rdb = redis.NewClient(&redis.Options{
		Addr:            s.addr(),
		PoolSize:        2 * max(s.p.parClients, s.p.contendClient, s.p.fillClients),
		DisableIdentity: true,
	})
	return s.rdb.Ping(ctx).Err()
}

func (s *redisSystem) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// launch starts redis-server on s.dir and s.port and waits until it answers
// PING (a server still loading its AOF answers LOADING, not PONG).
func (s *redisSystem) launch(ctx context.Context) error {
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--dir", s.dir, "--daemonize", "no", "--save", "", "--logfile", filepath.Join(s.dir, "redis.log"),
	}
	if s.aof {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	probe := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DisableIdentity: true, DialTimeout: 100 * time.Millisecond})
	defer probe.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := probe.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server exited: %s", lastLines(s.log(), 3))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redis-server not answering: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *redisSystem) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return string(b)
}

// shutdown stops the server the way an operator does (SHUTDOWN NOSAVE: with
// AOF every write is on disk already) and waits for the process to exit.
func (s *redisSystem) shutdown() {
	if s.cmd == nil {
		return
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DisableIdentity: true})
	c.Do(context.Background(), "SHUTDOWN", "NOSAVE")
	c.Close()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

func (s *redisSystem) stop() {
	if s.rdb != nil {
		s.rdb.Close()
		s.rdb = nil
	}
	s.shutdown()
	if s.dir != "" {
		os.RemoveAll(s.dir)
		s.dir = ""
	}
}

func (s *redisSystem) leader(context.Context) (int, error) {
	return 0, &notApplicable{"one server: Redis locks do not survive a failover (replication is asynchronous)"}
}

func (s *redisSystem) kill(int) error { return errNotApplicable }

func (s *redisSystem) client(context.Context, int) (client, error) {
	return redisClient{s.rdb, s.p}, nil
}

type redisClient struct {
	rdb *redis.Client
	p   params
}

func (c redisClient) locker(key string) locker {
	return &redisLocker{rdb: c.rdb, key: key, ttl: c.p.ttl, poll: c.p.redisPoll}
}

func (c redisClient) close() {}

type redisLocker struct {
	rdb   *redis.Client
	key   string
	ttl   time.Duration
	poll  time.Duration
	token string // of the current holding, "" when not held
}

func (l *redisLocker) tryAcquire(ctx context.Context) (bool, error) {
	var b [16]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	err := l.rdb.Do(ctx, "SET", l.key, token, "NX", "PX", l.ttl.Milliseconds()).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, err
	}
	l.token = token
	return true, nil
}

func (l *redisLocker) acquire(ctx context.Context) error {
	for {
		ok, err := l.tryAcquire(ctx)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(l.poll):
		}
	}
}

func (l *redisLocker) release(ctx context.Context) error {
	n, err := releaseScript.Run(ctx, l.rdb, []string{l.key}, l.token).Int()
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("redis: lock not held")
	}
	l.token = ""
	return nil
}

// held fills a fresh server with n locks and measures memory (used_memory
// growth: one server, so per node), and with AOF a rewrite of the log
// (BGREWRITEAOF, Redis's snapshot of the state) and a restart.
func (s *redisSystem) held(ctx context.Context, n int, atPeak func()) (map[string]float64, error) {
	s.p.ttl = s.p.heldTTL // the locks must outlive the workload
	if err := s.start(ctx); err != nil {
		s.stop()
		return nil, fmt.Errorf("start: %w", err)
	}
	defer s.stop()
	before, err := s.usedMemory(ctx)
	if err != nil {
		return nil, err
	}
	took, err := fill(ctx, s, s.p, n, func() {})
	if err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	// Reconnect with one connection, so that the fill's connections and
	// their buffers are not counted as lock memory.
	s.rdb.Close()
	s.rdb = redis.NewClient(&redis.Options{Addr: s.addr(), DisableIdentity: true})
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if info, err := s.info(ctx, "clients"); err == nil && info["connected_clients"] == "1" {
			break
		}
	}
	after, err := s.usedMemory(ctx)
	if err != nil {
		return nil, err
	}
	atPeak()
	figs := map[string]float64{
		"held_locks":          float64(n),
		"held_fill_per_s":     float64(n) / took.Seconds(),
		"held_bytes_per_lock": perLock(before, after, 1, n),
	}
	s.note = append(s.note, fmt.Sprintf("held (%s): bytes per lock = INFO used_memory growth / locks (one server)", s.name()))
	if !s.aof {
		s.note = append(s.note, "held (redis): snapshot, restore and restart n/a: with persistence off a restart loses every lock")
		return figs, nil
	}

	progress("%s: held: %.0f bytes per lock; rewriting the AOF", s.name(), figs["held_bytes_per_lock"])
	t0 := time.Now()
	if err := s.rdb.BgRewriteAOF(ctx).Err(); err != nil {
		return nil, fmt.Errorf("bgrewriteaof: %w", err)
	}
	for {
		info, err := s.info(ctx, "persistence")
		if err != nil {
			return nil, err
		}
		if info["aof_rewrite_in_progress"] == "0" && info["aof_rewrite_scheduled"] == "0" {
			if info["aof_last_bgrewrite_status"] != "ok" {
				return nil, fmt.Errorf("bgrewriteaof: %s", info["aof_last_bgrewrite_status"])
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	figs["held_snapshot_ms"] = ms(time.Since(t0))

	s.rdb.Close()
	s.rdb = nil
	s.shutdown()
	t0 = time.Now()
	if err := s.launch(ctx); err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: s.addr(), DisableIdentity: true})
	for {
		err := s.rdb.Get(ctx, heldKey(0)).Err()
		if err == nil {
			break
		}
		if ctx.Err() != nil || time.Since(t0) > 2*time.Minute {
			return nil, fmt.Errorf("restart: no read: %w", err)
		}
		time.Sleep(time.Millisecond)
	}
	figs["held_restart_read_ms"] = ms(time.Since(t0))
	size, err := s.rdb.DBSize(ctx).Result()
	if err != nil || size < int64(n) {
		return nil, fmt.Errorf("restart: %d keys after restart, want %d (%v)", size, n, err)
	}
	figs["held_restart_caughtup_ms"] = figs["held_restart_read_ms"]
	s.note = append(s.note, "held (redis-aof): snapshot = BGREWRITEAOF until done (rewrites the AOF as an RDB preamble); "+
		"restart = SHUTDOWN NOSAVE, start, first PING answered (Redis answers LOADING until the AOF is loaded), then every lock is there; restore n/a (inside restart)")
	return figs, nil
}

func (s *redisSystem) usedMemory(ctx context.Context) (uint64, error) {
	info, err := s.info(ctx, "memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(info["used_memory"], 10, 64)
}

func (s *redisSystem) info(ctx context.Context, section string) (map[string]string, error) {
	text, err := s.rdb.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}
