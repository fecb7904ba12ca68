package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

// runWatch is `raftlock watch [-prefix] [-json] KEY`: like `consul watch`,
// a line for the state now and one for each change, until interrupted.
func runWatch(args []string, stdout, stderr io.Writer) int {
	fs, agent := newClientFlagSet("watch", "[-addr URL,...] [-prefix] [-json] KEY",
		"Prints KEY's state now, then a line each time it changes (a grant, a release, a hand-off,\n"+
			"an expiry, a waiter joining or leaving, a session's end), until interrupted (Ctrl-C:\n"+
			"exit status 0). It long-polls the agent (blocking queries: GET /v1/inspect?index=N),\n"+
			"so nothing is polled and no change is missed, though changes closer together than a\n"+
			"round trip may show as one line (the latest state). An extend alone prints nothing.\n"+
			"The agent answers from its own state: a follower's may lag the leader a little.\n\n"+
			"-prefix watches every key starting with KEY instead, printing the held keys under it\n"+
			"at each change (it needs the read right on all of them). -json prints one JSON object\n"+
			"per change: the HTTP API's inspect answer, or {\"prefix\":...,\"locks\":[...]}, with\n"+
			"\"at\", the time it was seen."+connectHelp, nil, stdout, stderr)
	prefix := fs.Bool("prefix", false, "watch every key starting with KEY (KEY may then be empty: \"\")")
	asJSON := fs.Bool("json", false, "print each change as one line of JSON")
	if code := fs.parseArgs(args); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		return fs.usagef("want exactly one KEY (or prefix, with -prefix; see raftlock watch -h)")
	}
	key := fs.Arg(0)
	if !*prefix {
		if err := lock.ValidateKey(key); err != nil {
			return fs.usagef("%v", err)
		}
	} else if err := (lock.ListRequest{Prefix: key}).Validate(); err != nil {
		return fs.usagef("%v", err)
	}
	client, code := agent.connect()
	if code >= 0 {
		return code
	}
	defer client.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c := lock.New(client)
	p := watchPrinter{out: stdout, json: *asJSON}
	// An error is printed when the watch goes on after it (it was
	// transient); the last one, after which the watch stopped, decides the
	// exit status.
	var pending error
	next := func(err error) bool {
		if pending != nil {
			fs.fail(pending)
		}
		pending = err
		return err == nil
	}
	if *prefix {
		for locks, err := range c.WatchPrefix(ctx, key) {
			if next(err) {
				p.prefix(key, locks)
			}
		}
	} else {
		for info, err := range c.Watch(ctx, key) {
			if next(err) {
				p.key(key, info)
			}
		}
	}
	if ctx.Err() != nil || pending == nil {
		return exitOK // interrupted
	}
	return fs.fail(pending)
}

type watchPrinter struct {
	out  io.Writer
	json bool
}

func (p watchPrinter) key(key string, info lock.KeyInfo) {
	at := time.Now()
	if p.json {
		p.writeJSON(struct {
			At time.Time `json:"at"`
			api.KeyInfo
		}{at, api.MakeKeyInfo(key, info)})
		return
	}
	fmt.Fprintf(p.out, "%s %s %s\n", at.Format(time.RFC3339), printableKey(key), describeKey(info))
}

func (p watchPrinter) prefix(prefix string, locks []lock.LockInfo) {
	at := time.Now()
	if p.json {
		out := struct {
			At     time.Time     `json:"at"`
			Prefix string        `json:"prefix"`
			Locks  []api.KeyInfo `json:"locks"`
		}{At: at, Prefix: prefix, Locks: make([]api.KeyInfo, 0, len(locks))}
		for _, l := range locks {
			out.Locks = append(out.Locks, api.MakeKeyInfo(l.Key, l.KeyInfo))
		}
		p.writeJSON(out)
		return
	}
	fmt.Fprintf(p.out, "%s %d held under %q\n", at.Format(time.RFC3339), len(locks), prefix)
	for _, l := range locks {
		fmt.Fprintf(p.out, "  %s %s\n", printableKey(l.Key), describeKey(l.KeyInfo))
	}
}

func (p watchPrinter) writeJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
	}
	fmt.Fprintf(p.out, "%s\n", b)
}

// describeKey is one line of a key's state.
func describeKey(info lock.KeyInfo) string {
	var s string
	switch {
	case info.Delayed:
		s = fmt.Sprintf("lock-delay remaining=%v", info.Remaining.Round(time.Millisecond))
	case info.Locked && info.Kind != lock.KindMutex:
		// Token is the newest holder's, Remaining the longest hold left.
		s = fmt.Sprintf("locked %s holders=%d token=%d remaining=%v", kindColumn(info), info.Holders, info.Token, info.Remaining.Round(time.Millisecond))
	case info.Locked:
		s = fmt.Sprintf("locked token=%d remaining=%v", info.Token, info.Remaining.Round(time.Millisecond))
	default:
		s = "free"
	}
	s += fmt.Sprintf(" waiters=%d", info.Waiters)
	if info.Metadata != "" {
		s += " metadata=" + printableKey(info.Metadata)
	}
	if info.Reserved {
		s += " reserved"
	}
	if len(info.SetKeys) > 0 {
		s += " set=[" + setKeysText(info.SetKeys) + "]"
	}
	if len(info.Holds) > 0 {
		holds := make([]string, len(info.Holds))
		for i, h := range info.Holds {
			holds[i] = fmt.Sprintf("token=%d remaining=%v", h.Token, h.Remaining.Round(time.Millisecond))
			if h.Delayed {
				holds[i] = fmt.Sprintf("token=%d lock-delay remaining=%v", h.Token, h.Remaining.Round(time.Millisecond))
			} else if info.Kind == lock.KindRWLock {
				holds[i] += " " + holdMode(info.Kind, h)
			}
			if h.Metadata != "" {
				holds[i] += " metadata=" + printableKey(h.Metadata)
			}
		}
		s += " holds=[" + strings.Join(holds, "; ") + "]"
	}
	return s
}
