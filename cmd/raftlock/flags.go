package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
)

// newFlagSet returns a flag set that reports errors in one line and prints
// its help to stdout on -h.
func newFlagSet(name, synopsis, about string, stdout, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// flag calls Usage on every parse error too; help is printed only for -h,
	// by parseFlags, so that a wrong flag costs one line, not a page.
	fs.Usage = func() {}
	help := func() {
		fmt.Fprintf(stdout, "Usage: raftlock %s %s\n\n%s\n\nFlags:\n", name, synopsis, about)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return &flagSet{FlagSet: fs, help: help}
}

// flagSet is a command's flags and its -h text.
type flagSet struct {
	*flag.FlagSet
	help func()
}

// parseFlags parses args and applies RAFTLOCK_* environment variables to
// flags not given on the command line. It returns the exit status to end
// with, or -1 to carry on.
func parseFlags(fs *flagSet, args []string, env map[string]string, stderr io.Writer) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.help()
			return exitOK
		}
		fmt.Fprintf(stderr, "raftlock %s: %v (see raftlock %s -h)\n", fs.Name(), err, fs.Name())
		return exitUsage
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, variable := range env {
		value, ok := os.LookupEnv(variable)
		if !ok || given[name] {
			continue
		}
		if err := fs.Set(name, value); err != nil {
			fmt.Fprintf(stderr, "raftlock %s: %s=%q: %v\n", fs.Name(), variable, value, err)
			return exitUsage
		}
	}
	return -1
}

// addrFlag is the -addr flag every client command has.
func addrFlag(fs *flagSet, env map[string]string) *string {
	env["addr"] = "RAFTLOCK_ADDR"
	return fs.String("addr", "http://127.0.0.1:7070", "HTTP address of a raftlock agent (env RAFTLOCK_ADDR)")
}

func newAPIClient(addr string) (*api.Client, error) {
	return api.NewClient(addr, api.ClientConfig{})
}

// durationFlag accepts Go durations ("30s", "1m30s") and plain numbers of
// seconds ("30"), as consul lock users type both.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	if secs, err := strconv.ParseFloat(s, 64); err == nil && !strings.ContainsAny(s, "eEnN") {
		*f.d = time.Duration(secs * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration (try 30s, 5m or 1h30m)")
	}
	*f.d = d
	return nil
}

func durationVar(fs *flagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationFlag{p}, name, usage)
}
