package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
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
	return &flagSet{FlagSet: fs, help: help, stderr: stderr}
}

// flagSet is a command's flags and its -h text.
type flagSet struct {
	*flag.FlagSet
	help func()
	// onCommandLine holds the flags given as arguments, as opposed to
	// through the environment, once parseFlags has run.
	onCommandLine map[string]bool
	// leadingArgs, when positive, lets flags follow that many leading
	// arguments too (`lock KEY -ttl 5s -- COMMAND`): flag alone stops at
	// the first argument that is not a flag, which would leave "-ttl" to
	// be run as COMMAND. Args then returns every argument that is not a
	// flag, in order, with the "--" that ended the flags removed.
	leadingArgs int
	args        []string
	// flagsEndedWithDashDash: the flags before the leading arguments
	// ended at an explicit "--" (with leadingArgs, once parsed).
	flagsEndedWithDashDash bool
	// stderr is where the command reports errors, in one line each.
	stderr io.Writer
	// env maps flags to the environment variables they default from, for
	// parseArgs.
	env map[string]string
}

// parseArgs is parseFlags with the flag set's own environment variables
// (those newClientFlagSet was given, and the connection flags').
func (fs *flagSet) parseArgs(args []string) int { return parseFlags(fs, args, fs.env, fs.stderr) }

// usagef reports a usage error as one line, "raftlock NAME: MESSAGE", and
// returns the exit status for it.
func (fs *flagSet) usagef(format string, a ...any) int {
	fmt.Fprintf(fs.stderr, "raftlock %s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	return exitUsage
}

// fail reports err, which the agent (or reaching it) caused, and returns
// the exit status it calls for (see reportError).
func (fs *flagSet) fail(err error) int { return reportError(fs.stderr, fs.Name(), err) }

// Args is the arguments left once parseFlags has taken the flags.
func (fs *flagSet) Args() []string {
	if fs.args != nil {
		return fs.args
	}
	return fs.FlagSet.Args()
}

// NArg is len(fs.Args()).
func (fs *flagSet) NArg() int { return len(fs.Args()) }

// Arg is fs.Args()[i], or "" past the end.
func (fs *flagSet) Arg(i int) string {
	if args := fs.Args(); i < len(args) {
		return args[i]
	}
	return ""
}

// parse runs flag's parser, then, with leadingArgs, again on what follows
// the leading arguments while a flag comes next.
func (fs *flagSet) parse(args []string) error {
	if err := fs.FlagSet.Parse(args); err != nil {
		return err
	}
	if fs.leadingArgs <= 0 {
		return nil
	}
	rest := fs.FlagSet.Args()
	if len(rest) > 0 && rest[0] == "--" || len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
		fs.flagsEndedWithDashDash = true
		return nil // everything after an explicit -- is an argument
	}
	n := min(fs.leadingArgs, len(rest))
	lead, tail := append([]string(nil), rest[:n]...), rest[n:]
	if len(tail) > 0 && strings.HasPrefix(tail[0], "-") && tail[0] != "-" && tail[0] != "--" {
		if err := fs.FlagSet.Parse(tail); err != nil {
			return err
		}
		tail = fs.FlagSet.Args()        // flag took the "--" that ended the flags, if any
		fs.args = append(lead, tail...) // n > 0 here, so never nil
	}
	return nil
}

// parseFlags parses args and applies RAFTLOCK_* environment variables to
// flags not given on the command line. It returns the exit status to end
// with, or -1 to carry on.
func parseFlags(fs *flagSet, args []string, env map[string]string, stderr io.Writer) int {
	err := fs.parseWithEnv(args, env, os.LookupEnv)
	switch {
	case err == nil:
		return -1
	case errors.Is(err, errHelpShown):
		return exitOK
	}
	fmt.Fprintf(stderr, "raftlock %s: %v\n", fs.Name(), err)
	return exitUsage
}

// errHelpShown: -h asked for the help, which parseWithEnv printed.
var errHelpShown = errors.New("help shown")

// parseWithEnv parses args, then sets each flag of env not given on the
// command line from its environment variable, as lookupEnv (os.LookupEnv's
// shape: a variable set empty is set) finds it. On -h it prints the help
// and returns errHelpShown; its other errors are usage errors, in words
// that follow "raftlock NAME: ".
func (fs *flagSet) parseWithEnv(args []string, env map[string]string, lookupEnv func(string) (string, bool)) error {
	// The env map is what the program reads; the help names each variable
	// from it, so a flag whose text does not mention its variable yet still
	// shows it in -h.
	for name, variable := range env {
		if f := fs.Lookup(name); f != nil && !strings.Contains(f.Usage, variable) {
			f.Usage += " (env " + variable + ")"
		}
	}
	if err := fs.parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.help()
			return errHelpShown
		}
		return fmt.Errorf("%v (see raftlock %s -h)", err, fs.Name())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	fs.onCommandLine = given
	for name, variable := range env {
		value, ok := lookupEnv(variable)
		if !ok || given[name] {
			continue
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("%s=%q: %v", variable, value, err)
		}
	}
	return nil
}

// clientFlags are the flags every command that talks to an agent has: where
// it is, and how to prove who we are to it.
type clientFlags struct {
	fs                    *flagSet
	addr                  string
	token, tokenFile      string
	caFile                string
	clientCert, clientKey string
	serverName            string
}

// newClientFlagSet is the flag set of a command that talks to an agent:
// newFlagSet's, with the connection flags. env maps the command's own flags
// to the environment variables they default from (nil: none); parseArgs
// reads them.
func newClientFlagSet(name, synopsis, about string, env map[string]string, stdout, stderr io.Writer) (*flagSet, *clientFlags) {
	fs := newFlagSet(name, synopsis, about, stdout, stderr)
	fs.env = map[string]string{}
	maps.Copy(fs.env, env)
	return fs, addClientFlags(fs, fs.env)
}

func addClientFlags(fs *flagSet, env map[string]string) *clientFlags {
	for name, variable := range map[string]string{
		"addr": "RAFTLOCK_ADDR", "token": "RAFTLOCK_HTTP_TOKEN", "token-file": "RAFTLOCK_HTTP_TOKEN_FILE",
		"ca-file": "RAFTLOCK_CACERT", "client-cert": "RAFTLOCK_CLIENT_CERT", "client-key": "RAFTLOCK_CLIENT_KEY",
		"tls-server-name": "RAFTLOCK_TLS_SERVER_NAME",
	} {
		env[name] = variable
	}
	c := &clientFlags{fs: fs}
	fs.StringVar(&c.addr, "addr", "http://127.0.0.1:7070", "URL of a raftlock agent, http:// or https://; or several, comma-separated, tried in turn while one cannot be reached")
	fs.StringVar(&c.token, "token", "", "API token, when the agent requires one (env RAFTLOCK_HTTP_TOKEN; a flag shows in ps: prefer the env or -token-file)")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the API token, surrounding whitespace ignored")
	fs.StringVar(&c.caFile, "ca-file", "", "PEM CA certificate(s) to verify an https:// agent with (env RAFTLOCK_CACERT; default: the system's roots)")
	fs.StringVar(&c.clientCert, "client-cert", "", "PEM client certificate for an agent that requires one; with -client-key")
	fs.StringVar(&c.clientKey, "client-key", "", "PEM private key of -client-cert")
	fs.StringVar(&c.serverName, "tls-server-name", "", "name to verify the agent's certificate against, when -addr's host is not in it")
	return c
}

// connect is the API client the flags describe, or, when they do not
// describe one, nil and the exit status of the usage error it reported.
func (c *clientFlags) connect() (*api.Client, int) {
	client, err := c.newClient()
	if err != nil {
		return nil, c.fs.usagef("%v", err)
	}
	return client, -1
}

// newClient is the API client the flags describe. Its errors are usage
// errors. TLS settings apply to https:// addresses only, as with curl.
func (c *clientFlags) newClient() (*api.Client, error) {
	cfg, err := c.clientConfig()
	if err != nil {
		return nil, err
	}
	endpoints := splitList(c.addr)
	if len(endpoints) == 0 {
		return nil, errors.New("-addr is empty")
	}
	return api.NewFailoverClient(endpoints, cfg)
}

// clientConfig is the API client configuration the flags describe (token,
// TLS), for any agent of the cluster.
func (c *clientFlags) clientConfig() (api.ClientConfig, error) {
	tok, err := token(c.fs, "token", c.token, "token-file", c.tokenFile, api.ValidateToken)
	if err != nil {
		return api.ClientConfig{}, err
	}
	if err := allOrNone([]string{"client-cert", "client-key"}, c.clientCert, c.clientKey); err != nil {
		return api.ClientConfig{}, err
	}
	cfg := api.ClientConfig{Token: tok}
	{
		tc := &tls.Config{ServerName: c.serverName, MinVersion: tls.VersionTLS12}
		// Under TLS 1.3 an agent refuses a missing client certificate after
		// our side of the handshake is done, and its alert may be lost in
		// the reset: noting that it asked for one lets reportError tell a
		// configuration error from an unreachable agent.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			clientCertRequested.Store(true)
			if len(tc.Certificates) > 0 {
				clientCertSent.Store(true)
				return &tc.Certificates[0], nil
			}
			return &tls.Certificate{}, nil // none: the agent decides
		}
		if c.caFile != "" {
			if tc.RootCAs, err = loadCertPool("-ca-file", c.caFile); err != nil {
				return api.ClientConfig{}, err
			}
		}
		if c.clientCert != "" {
			cert, err := loadKeyPair("-client-cert", c.clientCert, "-client-key", c.clientKey)
			if err != nil {
				return api.ClientConfig{}, err
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		cfg.TLS = tc
	}
	return cfg, nil
}

// clientCertRequested records that an agent asked this process for a client
// certificate during a TLS handshake (one command runs per process).
var clientCertRequested atomic.Bool

// clientCertSent records that this process answered with one.
var clientCertSent atomic.Bool

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

// helpRequest is what loading a command's configuration ends with on -h:
// the help, for stdout.
type helpRequest struct{ text string }

func (h *helpRequest) Error() string { return "help requested" }

// helpOr is parseWithEnv's err, with the help it printed to help on -h.
func helpOr(err error, help *bytes.Buffer) error {
	if errors.Is(err, errHelpShown) {
		return &helpRequest{text: help.String()}
	}
	return err
}

// reportLoadError ends a command whose configuration did not load: the
// help on stdout (exit 0), or the usage error on stderr as one line.
func reportLoadError(name string, err error, stdout, stderr io.Writer) int {
	var help *helpRequest
	if errors.As(err, &help) {
		fmt.Fprint(stdout, help.text)
		return exitOK
	}
	fmt.Fprintf(stderr, "raftlock %s: %v\n", name, err)
	return exitUsage
}
