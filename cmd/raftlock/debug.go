package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
)

// recentLogLines is how many of its last log lines an agent keeps for GET
// /v1/agent/logs.
const recentLogLines = 2000

// redacted replaces a secret's value in what the agent shows of its configuration.
const redacted = "<redacted>"

// secretFlags hold secrets themselves (files holding them are named by
// path, which is no secret).
var secretFlags = map[string]bool{"http-token": true}

// redactedFlags is every flag of fs with the value it ended with (from the
// command line, the environment or its default), secrets redacted.
func redactedFlags(fs *flagSet) map[string]string {
	flags := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		if secretFlags[f.Name] && v != "" {
			v = redacted
		}
		flags[f.Name] = v
	})
	return flags
}

// effectiveConfig is what GET /v1/agent/config answers: every agent flag's
// value (flags, see redactedFlags) and what the node made of them.
func effectiveConfig(flags map[string]string, cfg cluster.Config, node *cluster.Node) func() any {
	return func() any {
		st := node.Stats()
		return map[string]any{
			"version":   versionLine(),
			"flags":     flags,
			"node_id":   cfg.NodeID,
			"data_dir":  cfg.DataDir,
			"bind":      cfg.BindAddr,
			"advertise": node.Addr(),
			"api_addr":  cfg.APIAddr,
			"log_store": st.LogStore,
			"raft": map[string]string{
				"heartbeat_timeout":    cfg.HeartbeatTimeout.String(),
				"election_timeout":     cfg.ElectionTimeout.String(),
				"leader_lease_timeout": cfg.LeaderLeaseTimeout.String(),
				"request_timeout":      cfg.RequestTimeout.String(),
				"leader_wait":          cfg.LeaderWait.String(),
			},
			"peer_tls": cfg.ServerTLS != nil,
		}
	}
}

// debugItem is one file of a debug bundle and where it comes from.
type debugItem struct {
	file, path string
	query      url.Values
	why        string // what to do when the agent does not serve it
}

var debugItems = []debugItem{
	{file: "cluster.json", path: "/v1/cluster"},
	{file: "health.json", path: "/healthz"},
	{file: "config.json", path: "/v1/agent/config", why: "an agent older than this command does not show its configuration"},
	{file: "logs.json", path: "/v1/agent/logs", why: "an agent older than this command keeps no recent log lines"},
	{file: "metrics.txt", path: "/metrics"},
	{file: "locks.json", path: "/v1/locks", query: url.Values{"limit": {"1000"}}},
	{file: "goroutines.txt", path: "/debug/pprof/goroutine", query: url.Values{"debug": {"2"}},
		why: "profiling is off: start the agent with -enable-pprof for a goroutine dump"},
	{file: "heap.pprof", path: "/debug/pprof/heap",
		why: "profiling is off: start the agent with -enable-pprof for a heap profile"},
}

// debugIndex is index.json of a bundle: what was collected and what not.
type debugIndex struct {
	Agent     string            `json:"agent"`
	Collected string            `json:"collected"` // RFC 3339, UTC
	Version   string            `json:"version"`   // of the command that collected
	Files     []string          `json:"files"`
	Missing   map[string]string `json:"missing,omitempty"` // file -> why
}

func runDebug(args []string, stdout, stderr io.Writer) int {
	fs, agent := newClientFlagSet("debug", "[-addr URL] [-o FILE.tar.gz | -o DIR]",
		"Collects what a bug report needs from one agent, like consul debug: its cluster status\n"+
			"and statistics, its configuration (secrets redacted), its recent log lines, a metrics\n"+
			"snapshot, the held locks (never owners) and, when the agent runs with -enable-pprof, a\n"+
			"goroutine dump and a heap profile. index.json lists what is in the bundle and why\n"+
			"anything is missing. -o ending in .tar.gz or .tgz writes a gzipped tar; any other -o\n"+
			"is a directory to create. The token is never written to the bundle."+connectHelp, nil, stdout, stderr)
	var out string
	fs.StringVar(&out, "o", "", "where to write the bundle: FILE.tar.gz (or .tgz), or a new DIR (default: raftlock-debug-TIME.tar.gz here)")
	if code := fs.parseArgs(args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return fs.usagef("unexpected argument %q (the agent is -addr, the bundle -o)", fs.Arg(0))
	}
	if out == "" {
		out = "raftlock-debug-" + time.Now().UTC().Format("20060102T150405Z") + ".tar.gz"
	}
	if _, err := os.Lstat(out); err == nil {
		return fs.usagef("-o %s exists already: name a new file or directory", out)
	}
	client, code := agent.connect()
	if code >= 0 {
		return code
	}
	defer client.Close()
	tok, _ := token(fs, "token", agent.token, "token-file", agent.tokenFile, api.ValidateToken)

	// The cluster view first: an agent that cannot be reached, or refuses
	// the token, ends the command with the usual status.
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	_, err := client.Cluster(ctx)
	cancel()
	if err != nil && !errors.Is(err, api.ErrNotCluster) {
		return fs.fail(err)
	}

	files := map[string][]byte{}
	index := debugIndex{Agent: client.Endpoint(), Collected: time.Now().UTC().Format(time.RFC3339), Version: versionLine(), Missing: map[string]string{}}
	for _, item := range debugItems {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		status, body, err := client.GetRaw(ctx, item.path, item.query)
		cancel()
		switch {
		case err != nil:
			index.Missing[item.file] = err.Error()
		case status == http.StatusOK || (item.path == "/healthz" && status == http.StatusServiceUnavailable):
			files[item.file] = scrub(body, tok)
			index.Files = append(index.Files, item.file)
		default:
			why := fmt.Sprintf("GET %s answered %d: %s", item.path, status, strings.TrimSpace(string(scrub(body, tok))))
			if item.why != "" && (status == http.StatusNotFound || status == http.StatusNotImplemented) {
				why = item.why
			}
			index.Missing[item.file] = why
		}
	}
	idx, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "raftlock debug: %v\n", err)
		return exitError
	}
	files["index.json"] = append(idx, '\n')

	if strings.HasSuffix(out, ".tar.gz") || strings.HasSuffix(out, ".tgz") {
		err = writeTarGz(out, files)
	} else {
		err = writeDir(out, files)
	}
	if err != nil {
		fmt.Fprintf(stderr, "raftlock debug: -o %s: %v\n", out, err)
		return exitError
	}
	fmt.Fprintf(stdout, "wrote %s: %d files from %s\n", out, len(files), index.Agent)
	for _, f := range slices.Sorted(maps.Keys(index.Missing)) {
		fmt.Fprintf(stdout, "  not collected: %s (%s)\n", f, index.Missing[f])
	}
	return exitOK
}

// scrub replaces the token in what the agent sent, should it ever appear
// there: the bundle is meant to be attached to bug reports.
func scrub(b []byte, token string) []byte {
	if token == "" {
		return b
	}
	return bytes.ReplaceAll(b, []byte(token), []byte(redacted))
}

func writeTarGz(path string, files map[string][]byte) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	dir := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".tgz"), ".tar.gz")
	now := time.Now()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		body := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/" + name, Mode: 0o600, Size: int64(len(body)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func writeDir(dir string, files map[string][]byte) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o600); err != nil {
			return err
		}
	}
	return nil
}
