package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// lockSynopsis and lockAbout are the head of `raftlock lock -h`.
const lockSynopsis = "[-addr URL,...] [-ttl 30s | -session-ttl 15s] [-wait 0] [-metadata TEXT] [-n N | -shared | -write] KEY -- COMMAND [ARG...]\n" +
	"       raftlock lock [-addr URL,...] [-ttl 30s] [-wait 0] [-metadata TEXT] -keys KEY,KEY,... -- COMMAND [ARG...]"

const lockAbout = "Runs COMMAND while holding the lock KEY, and releases the lock when it exits.\n" +
	"The lease is extended while COMMAND runs. If the lock is lost anyway, COMMAND gets\n" +
	"SIGTERM, then SIGKILL after -kill-after. COMMAND finds the lock's fencing token in\n" +
	"RAFTLOCK_TOKEN and its key in RAFTLOCK_KEY: pass the token to what you protect.\n" +
	"Flags may also follow KEY (KEY -ttl 5s -- COMMAND); they are read before the lock is taken.\n\n" +
	"With -session-ttl the lock is bound to a session of that TTL instead of a lease\n" +
	"(-ttl is then not used): the session is renewed while COMMAND runs and destroyed\n" +
	"when it exits; if raftlock lock dies, the lock is freed within the session TTL.\n" +
	"Each renewal (every -session-ttl/3) also checks that the lock is still held:\n" +
	"released by an admin meanwhile, it is lost, and COMMAND is stopped.\n" +
	"-metadata is shown with the lock by raftlock locks (default: host and pid).\n\n" +
	"With -n N, KEY is a semaphore: up to N commands (in any process) hold it at once,\n" +
	"each with its own fencing token (like consul lock -n). With -shared, KEY is a\n" +
	"read/write lock taken for reading (shared with other -shared holders); -write\n" +
	"takes it for writing (alone). Waiters go first come, first served: a writer is\n" +
	"not starved by later readers. Every holder of KEY must agree on what it is (the\n" +
	"same -n, or -shared/-write): while anyone holds or waits, another kind fails.\n\n" +
	"With -keys K1,K2,... (instead of KEY) COMMAND runs while holding every key at once:\n" +
	"all are taken in one step, or none, with one lease and one fencing token. While it\n" +
	"waits it queues on every key, first come, first served on each, so two lock\n" +
	"commands naming the same keys in any order never deadlock. COMMAND finds the keys,\n" +
	"sorted, in RAFTLOCK_KEYS (comma-separated) and the first in RAFTLOCK_KEY. Keys are\n" +
	"split at commas (a key with a comma cannot be named this way); up to 64 keys, all\n" +
	"plain locks, with -ttl (not -session-ttl). Flags go before COMMAND.\n\n" +
	"Once COMMAND has exited the lock is released; that release gets 2s at most (the\n" +
	"lease runs out by itself within -ttl if it cannot be sent), so raftlock lock exits\n" +
	"right after COMMAND.\n\n" +
	"Exit status: COMMAND's own; 75 when the lock is held and -wait ran out (or is 0);\n" +
	"76 when the lock was lost while COMMAND ran (it is stopped then; if it ended by\n" +
	"itself before the loss was noticed, the message says so and gives its status);\n" +
	"69 when no agent or leader answers; 77 when the agent refuses the token; 2 for\n" +
	"usage errors; 1 otherwise.\n" +
	"SIGINT and SIGTERM are passed to COMMAND." + connectHelp

// lockEnv names the environment variable each lock flag defaults from
// (the connection flags' are added by newClientFlagSet).
var lockEnv = map[string]string{"ttl": "RAFTLOCK_TTL", "wait": "RAFTLOCK_WAIT", "kill-after": "RAFTLOCK_KILL_AFTER", "session-ttl": "RAFTLOCK_SESSION_TTL"}

// lockCommand is `raftlock lock`: like consul lock or flock, it runs a
// command only while holding a lock, keeps the lease alive while the
// command runs, and stops the command if the lease is lost.
func lockCommand(args []string, stdout, stderr io.Writer) int {
	cfg, err := loadLockConfig(args, os.LookupEnv)
	if err != nil {
		return reportLoadError("lock", err, stdout, stderr)
	}
	return runLock(context.Background(), cfg, stdout, stderr)
}

// lockConfig is what `raftlock lock` was told, checked.
type lockConfig struct {
	client   *api.Client
	key      string   // KEY; with -keys, the first of keys, which stands for the set
	keys     []string // -keys, sorted; nil for one KEY
	argv     []string // COMMAND and its arguments
	kind     lock.Kind
	limit    int // -n
	shared   bool
	write    bool
	metadata string

	ttl, wait, killAfter, sessionTTL time.Duration
}

// lockFlags are the lock command's own flags, as given.
type lockFlags struct {
	ttl, wait, killAfter, sessionTTL time.Duration
	metadata                         string
	limit                            int
	shared, write                    bool
	keysList                         string
}

// newLockFlagSet defines the lock command's flags on f, and the connection
// flags; -h prints to help.
func newLockFlagSet(f *lockFlags, args []string, help io.Writer) (*flagSet, *clientFlags) {
	fs, agent := newClientFlagSet("lock", lockSynopsis, lockAbout, lockEnv, help, io.Discard)
	fs.leadingArgs = 1 // KEY; flags after it are parsed before anything is taken
	if keysFlagGiven(args) {
		// No KEY: what follows the flags is COMMAND, whose own flags are
		// not ours.
		fs.leadingArgs = 0
	}
	durationVar(fs, &f.ttl, "ttl", lock.DefaultTTL, "lease length; kept alive while COMMAND runs")
	fs.StringVar(&f.keysList, "keys", "", "hold all these comma-separated keys at once, all or nothing, instead of KEY (up to 64)")
	fs.IntVar(&f.limit, "n", 0, "hold KEY as a semaphore of N holders at once, 1..65536 (not given: a plain lock)")
	fs.BoolVar(&f.shared, "shared", false, "hold KEY as a read/write lock, for reading: shared with other readers")
	fs.BoolVar(&f.write, "write", false, "hold KEY as a read/write lock, for writing: alone")
	durationVar(fs, &f.sessionTTL, "session-ttl", 0, "hold the lock through a session of this TTL instead of a lease (0: a lease of -ttl)")
	fs.StringVar(&f.metadata, "metadata", defaultMetadata(), "text shown with the lock by raftlock locks, at most 1024 bytes; never a secret")
	durationVar(fs, &f.wait, "wait", 0, "how long to wait for a held lock; 0 fails at once")
	durationVar(fs, &f.killAfter, "kill-after", 10*time.Second, "after SIGTERM, how long COMMAND has before SIGKILL")
	return fs, agent
}

// loadLockConfig reads the lock command's flags and arguments from args
// and, for flags not given there, from the environment as lookupEnv
// (os.LookupEnv) finds it, and checks them as the store would, so that bad
// input fails before anything is taken. Its errors are usage errors, in
// words that follow "raftlock lock: "; on -h it returns a *helpRequest.
func loadLockConfig(args []string, lookupEnv func(string) (string, bool)) (lockConfig, error) {
	var f lockFlags
	var help bytes.Buffer
	fs, agent := newLockFlagSet(&f, args, &help)
	if err := fs.parseWithEnv(args, fs.env, lookupEnv); err != nil {
		return lockConfig{}, helpOr(err, &help)
	}
	c := lockConfig{limit: f.limit, shared: f.shared, write: f.write, metadata: f.metadata,
		ttl: f.ttl, wait: f.wait, killAfter: f.killAfter, sessionTTL: f.sessionTTL}
	var err error
	if c.key, c.keys, c.argv, err = lockArgs(fs, f); err != nil {
		return c, err
	}
	if c.killAfter <= 0 {
		return c, errors.New("-kill-after must be positive")
	}
	// The same validation the store runs, so bad input fails here in one line
	// (the first wrong value's, in the order key, ttl, wait, metadata: each
	// request below adds one value to those already checked).
	owner := lock.NewOwner()
	if err := cmp.Or(lock.ValidateKey(c.key), lock.ValidateExtend(c.key, owner, c.ttl),
		lock.AcquireRequest{Key: c.key, Owner: owner, TTL: c.ttl, Wait: c.wait}.Validate(),
		lock.AcquireRequest{Key: c.key, Owner: owner, TTL: c.ttl, Wait: c.wait, Metadata: c.metadata}.Validate()); err != nil {
		return c, err
	}
	if c.kind, err = lockKind(c.limit, fs.onCommandLine["n"], c.shared, c.write); err != nil {
		return c, err
	}
	if c.sessionTTL != 0 {
		if err := (lock.SessionRequest{ID: lock.NewSessionID(), TTL: c.sessionTTL}).Validate(); err != nil {
			return c, fmt.Errorf("-session-ttl: %w", err)
		}
	}
	c.client, err = agent.newClient()
	return c, err
}

// lockArgs splits what follows the flags into KEY (or, with -keys, the
// keys) and COMMAND.
func lockArgs(fs *flagSet, f lockFlags) (key string, keys, argv []string, err error) {
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if fs.leadingArgs > 0 && fs.flagsEndedWithDashDash && (len(rest) < 2 || rest[1] != "--") {
		// What follows that "--" is COMMAND, not KEY: a KEY given after
		// it (one that starts with "-") needs a second "--" before COMMAND.
		return "", nil, nil, errors.New("KEY is missing: it goes before the -- that starts COMMAND (raftlock lock [flags] KEY -- COMMAND; a KEY that starts with '-': raftlock lock [flags] -- KEY -- COMMAND)")
	}
	if f.keysList != "" {
		if keys, err = parseKeys(f.keysList, f.limit, f.shared, f.write, f.sessionTTL); err != nil {
			return "", nil, nil, fmt.Errorf("-keys: %v", err)
		}
		// The first key (sorted) stands for the set: its release releases
		// the set. rest is COMMAND.
		rest = append([]string{keys[0]}, rest...)
	}
	if len(rest) < 2 {
		return "", nil, nil, errors.New("want KEY -- COMMAND [ARG...] (see raftlock lock -h)")
	}
	key, argv = rest[0], rest[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return "", nil, nil, errors.New("no COMMAND given after KEY")
	}
	return key, keys, argv, nil
}

// runLock takes the lock cfg names, runs COMMAND while holding it, and
// returns the exit status: COMMAND's own, or what says why it did not run
// or was stopped.
func runLock(ctx context.Context, cfg lockConfig, stdout, stderr io.Writer) int {
	store := &boundedRelease{Store: cfg.client, sessions: cfg.client}
	c := lock.New(store)
	if cfg.sessionTTL != 0 {
		sess, err := c.NewSession(ctx, lock.SessionTTL(cfg.sessionTTL))
		if err != nil {
			return reportError(stderr, "lock", err)
		}
		defer func() {
			// Bounded as a release is; the session ends by itself within
			// its TTL if the destroy cannot be sent.
			closeCtx, cancel := context.WithTimeout(ctx, releaseTimeout)
			defer cancel()
			if err := sess.Close(closeCtx); err != nil {
				fmt.Fprintf(stderr, "raftlock lock: could not end the session (%v); it ends by itself within -session-ttl %v\n", err, cfg.sessionTTL)
			}
		}()
		c = c.WithSession(sess)
	}
	l := cfg.newLock(c)
	child := &childRun{argv: cfg.argv, key: cfg.key, keys: cfg.keys, stdout: stdout, stderr: stderr, killAfter: cfg.killAfter, token: l.Token}
	var ran bool
	var err error
	if cfg.wait > 0 {
		ran, err = l.Run(ctx, child.run, lock.Wait(cfg.wait))
	} else {
		ran, err = l.TryRun(ctx, child.run)
	}
	if ran {
		if rerr := store.failure(); rerr != nil {
			fmt.Fprintf(stderr, "raftlock lock: could not release %s after the command ended (%v); it stays locked until its lease runs out, within -ttl %v\n", cfg.what(), rerr, cfg.ttl)
		}
	}
	return cfg.exitStatus(ran, err, stderr)
}

// newLock is the lock of the kind cfg asks for, from c.
func (cfg lockConfig) newLock(c *lock.Client) *lock.Lock {
	opts := []lock.LockOption{lock.TTL(cfg.ttl), lock.Metadata(cfg.metadata)}
	switch {
	case cfg.keys != nil:
		return c.LockAll(cfg.keys, opts...)
	case cfg.kind == lock.KindSemaphore:
		return c.Semaphore(cfg.key, cfg.limit, opts...)
	case cfg.shared:
		return c.RWLock(cfg.key).Reader(opts...)
	case cfg.write:
		return c.RWLock(cfg.key).Writer(opts...)
	}
	return c.Lock(cfg.key, opts...)
}

// what names the lock in messages: its key, or its keys.
func (cfg lockConfig) what() string {
	if cfg.keys != nil {
		return fmt.Sprintf("the keys %q", cfg.keys)
	}
	return fmt.Sprintf("%q", cfg.key)
}

// exitStatus is the lock command's exit status once lock.Run or TryRun
// returned ran and err, with a line on stderr saying why where it is not
// COMMAND's own.
func (cfg lockConfig) exitStatus(ran bool, err error, stderr io.Writer) int {
	var exit *childExit
	errors.As(err, &exit)
	lost := ran && errors.Is(err, lock.ErrNotHeld)
	switch {
	case exit != nil && exit.startErr != nil:
		fmt.Fprintf(stderr, "raftlock lock: %v\n", exit.startErr)
		return exitError
	case lost && exit != nil && exit.stopped:
		fmt.Fprintf(stderr, "raftlock lock: lost the lock %s while the command ran; the command was stopped (exit status %d)\n", cfg.what(), exit.status)
		return exitLost
	case lost && exit != nil:
		// Found by the release after the command ended: it ran to its end
		// without the lock for a while.
		fmt.Fprintf(stderr, "raftlock lock: lost the lock %s while the command ran; the command had ended by itself (exit status %d) before that was noticed\n", cfg.what(), exit.status)
		return exitLost
	case lost:
		fmt.Fprintf(stderr, "raftlock lock: lost the lock %s while the command ran\n", cfg.what())
		return exitLost
	case exit != nil:
		return exit.status
	case ran && err == nil:
		return exitOK
	case !ran && (err == nil || errors.Is(err, lock.ErrLocked)) && cfg.keys != nil:
		fmt.Fprintf(stderr, "raftlock lock: the keys %q are not all free (one is held, or kept for an earlier waiter): %v\n", cfg.keys, err)
		return exitHeld
	case !ran && (err == nil || errors.Is(err, lock.ErrLocked)):
		fmt.Fprintf(stderr, "raftlock lock: %s\n", heldMessage(cfg.client, cfg.key, err))
		return exitHeld
	}
	return reportError(stderr, "lock", err)
}

// keysFlagGiven reports whether args give -keys before COMMAND (before a
// "--" or the first argument that is not a flag or a flag's value is not
// knowable without parsing, so this looks for the flag anywhere before a
// "--"; a COMMAND argument spelt -keys only makes flags stop after KEY).
func keysFlagGiven(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name := strings.TrimLeft(a, "-")
		if strings.HasPrefix(a, "-") && (name == "keys" || strings.HasPrefix(name, "keys=")) {
			return true
		}
	}
	return false
}

// parseKeys reads -keys: comma-separated, distinct, 1..lock.MaxKeys valid
// keys, sorted; not with a kind's flags nor a session.
func parseKeys(list string, limit int, shared, write bool, sessionTTL time.Duration) ([]string, error) {
	switch {
	case limit != 0 || shared || write:
		return nil, errors.New("a multi-key lock takes plain locks: -n, -shared and -write do not go with it")
	case sessionTTL != 0:
		return nil, errors.New("a multi-key lock cannot be bound to a session: give -ttl, not -session-ttl")
	}
	keys := strings.Split(list, ",")
	if len(keys) > lock.MaxKeys {
		return nil, fmt.Errorf("at most %d keys (got %d)", lock.MaxKeys, len(keys))
	}
	slices.Sort(keys)
	for i, k := range keys {
		if err := lock.ValidateKey(k); err != nil {
			return nil, fmt.Errorf("%w (keys are separated by commas: %q has an empty one?)", err, list)
		}
		if i > 0 && k == keys[i-1] {
			return nil, fmt.Errorf("key %q is given twice", k)
		}
	}
	return keys, nil
}

// lockKind is the kind the -n (limit; nGiven says it was given), -shared
// and -write flags ask for, or a usage error naming them.
func lockKind(limit int, nGiven, shared, write bool) (lock.Kind, error) {
	switch {
	case shared && write:
		return 0, errors.New("give -shared (read) or -write, not both")
	case limit != 0 && (shared || write):
		return 0, errors.New("-n makes a semaphore; -shared and -write are for a read/write lock: give one or the other")
	case (nGiven || limit != 0) && (limit < 1 || limit > lock.MaxHolders):
		return 0, fmt.Errorf("-n must be between 1 and %d (got %d); leave -n out for a plain lock", lock.MaxHolders, limit)
	case limit > 0:
		return lock.KindSemaphore, nil
	case shared || write:
		return lock.KindRWLock, nil
	}
	return lock.KindMutex, nil
}

// releaseTimeout bounds a release `raftlock lock` sends, the last one above
// all: once COMMAND has exited, the lock command exits as soon as the
// release is answered or this passes, rather than waiting a whole request
// timeout on an agent that has no leader (as when the lease was lost). An
// unsent release costs nothing but time: the lease runs out by itself.
const releaseTimeout = 2 * time.Second

// boundedRelease is the lock command's store: its releases are bounded by
// releaseTimeout, and the last one's failure is kept to be reported.
type boundedRelease struct {
	lock.Store
	sessions lock.SessionStore
	mu       sync.Mutex // protects err
	err      error
}

func (s *boundedRelease) CreateSession(ctx context.Context, req lock.SessionRequest) (lock.SessionLease, error) {
	return s.sessions.CreateSession(ctx, req)
}

func (s *boundedRelease) RenewSession(ctx context.Context, id lock.SessionID) (lock.SessionLease, error) {
	return s.sessions.RenewSession(ctx, id)
}

func (s *boundedRelease) DestroySession(ctx context.Context, id lock.SessionID) (bool, error) {
	return s.sessions.DestroySession(ctx, id)
}

func (s *boundedRelease) InspectSession(ctx context.Context, id lock.SessionID) (lock.SessionInfo, error) {
	return s.sessions.InspectSession(ctx, id)
}

// defaultMetadata says where a lock taken by raftlock lock comes from.
func defaultMetadata() string {
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	return fmt.Sprintf("raftlock lock host=%s pid=%d", host, os.Getpid())
}

// AcquireAll makes the lock command's store a lock.MultiKeyStore (for
// -keys) when the client it wraps is one.
func (s *boundedRelease) AcquireAll(ctx context.Context, req lock.AcquireRequest) (lock.Lease, error) {
	ms, ok := s.Store.(lock.MultiKeyStore)
	if !ok {
		return lock.Lease{}, fmt.Errorf("raftlock lock: the client takes no multi-key locks: %w", errors.ErrUnsupported)
	}
	return ms.AcquireAll(ctx, req)
}

func (s *boundedRelease) Release(ctx context.Context, key string, owner lock.Owner) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	ok, err := s.Store.Release(ctx, key, owner)
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	return ok, err
}

// failure is the error of the last release, nil if it succeeded or none was sent.
func (s *boundedRelease) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// heldMessage says who holds key, as much as anyone may know: a holder's
// token and time left, or that nobody holds it but a waiting multi-key
// lock keeps it (reserved) or a lock-delay does.
func heldMessage(store lock.Store, key string, err error) string {
	var held *lock.HeldError
	if errors.As(err, &held) && held.Token != 0 {
		return fmt.Sprintf("%q is held by another owner (fencing token %d, %v left)", key, held.Token, held.Remaining.Round(time.Millisecond))
	}
	if held != nil && held.Reserved {
		return reservedMessage(key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, ierr := store.Inspect(ctx, key)
	switch {
	case ierr != nil:
	case info.Delayed:
		return fmt.Sprintf("%q is held by nobody, but kept free by a lock-delay for %v (its holder's session expired)", key, info.Remaining.Round(time.Millisecond))
	case info.Locked:
		return fmt.Sprintf("%q is held by another owner (fencing token %d, %v left)", key, info.Token, info.Remaining.Round(time.Millisecond))
	case info.Reserved:
		return reservedMessage(key)
	}
	return fmt.Sprintf("%q is held by another owner", key)
}

func reservedMessage(key string) string {
	return fmt.Sprintf("%q is held by nobody, but reserved for an earlier multi-key lock that waits for its other keys", key)
}

// childRun runs the locked command as the callback of lock.Run.
type childRun struct {
	argv           []string
	key            string
	keys           []string // a multi-key lock's set (sorted); nil for one key
	stdout, stderr io.Writer
	killAfter      time.Duration
	token          func() uint64
}

// childExit carries the command's exit status (or why it did not start) out
// of lock.Run, which returns the callback's error.
type childExit struct {
	status   int
	startErr error
	stopped  bool // it was sent SIGTERM because the lock was lost
}

func (e *childExit) Error() string {
	if e.startErr != nil {
		return e.startErr.Error()
	}
	return fmt.Sprintf("command exited with status %d", e.status)
}

func (c *childRun) run(ctx context.Context) error {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = append(os.Environ(), "RAFTLOCK_KEY="+c.key, fmt.Sprintf("RAFTLOCK_TOKEN=%d", c.token()))
	if c.keys != nil {
		cmd.Env = append(cmd.Env, "RAFTLOCK_KEYS="+strings.Join(c.keys, ","))
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.stdout, c.stderr
	// Its own process group, so that stopping it reaches what it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)

	if err := cmd.Start(); err != nil {
		return &childExit{startErr: fmt.Errorf("starting %s: %w", c.argv[0], err)}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var kill <-chan time.Time
	stopped := false
	for {
		select {
		case err := <-done:
			return &childExit{status: exitStatus(err), stopped: stopped}
		case sig := <-signals:
			// Ours to pass on: the command decides how to end, and the lock is
			// released once it has.
			_ = syscall.Kill(-cmd.Process.Pid, sig.(syscall.Signal))
		case <-ctx.Done():
			if kill == nil {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
				kill = time.After(c.killAfter)
				stopped = true
			}
			ctx = context.Background() // stop selecting on the closed channel
		case <-kill:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			kill = nil
		}
	}
}

// exitStatus maps a finished command to a shell-style status: its exit code,
// or 128+N when signal N ended it.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitError
}
