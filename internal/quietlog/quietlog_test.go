package quietlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// manualWindows stands in for time.AfterFunc: windows end when the test says.
type manualWindows struct {
	mu      sync.Mutex
	pending []*manualWindow
}

type manualWindow struct {
	f       func()
	stopped bool
}

func (w *manualWindow) Stop() bool { was := !w.stopped; w.stopped = true; return was }

func (m *manualWindows) afterFunc(_ time.Duration, f func()) stopper {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &manualWindow{f: f}
	m.pending = append(m.pending, w)
	return w
}

// endAll ends every window open now (not those the endings open).
func (m *manualWindows) endAll() {
	m.mu.Lock()
	due := m.pending
	m.pending = nil
	m.mu.Unlock()
	for _, w := range due {
		if !w.stopped {
			w.f()
		}
	}
}

// quietTestLogger returns a quieter on manual windows, a raft-like logger
// through it at level, and a function that reads the lines written so far.
func quietTestLogger(t *testing.T, level hclog.Level) (*Quieter, *manualWindows, hclog.Logger, func() []map[string]any) {
	t.Helper()
	var mu sync.Mutex
	var buf bytes.Buffer
	base := hclog.New(&hclog.LoggerOptions{Name: "raftlock", Level: level, JSONFormat: true, Output: lockedWriter{&mu, &buf}})
	windows := &manualWindows{}
	q := New(time.Minute, nil)
	q.afterFunc = windows.afterFunc
	lines := func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		var out []map[string]any
		sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
		for sc.Scan() {
			var m map[string]any
			require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
			out = append(out, m)
		}
		return out
	}
	return q, windows, q.Wrap(base).Named("raft"), lines
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func TestQuieterCollapsesRepeatedFailuresWithACount(t *testing.T) {
	_, windows, log, lines := quietTestLogger(t, hclog.Info)

	// A leader's heartbeats to a down member: the error text and backoff vary.
	log.Error("failed to heartbeat to", "peer", "10.0.0.3:7071", "backoff time", "10ms", "error", "EOF")
	for i := 0; i < 9; i++ {
		log.Error("failed to heartbeat to", "peer", "10.0.0.3:7071", "backoff time", fmt.Sprintf("%dms", 20*i),
			"error", errors.New("connection refused"))
	}
	// Another member is another line; so is another message.
	log.Error("failed to heartbeat to", "peer", "10.0.0.2:7071", "error", "EOF")
	log.Warn("failed to contact", "server-id", "c", "time", "250ms")
	log.Warn("failed to contact", "server-id", "c", "time", "500ms")

	got := lines()
	require.Len(t, got, 3, "only the first of each kind is written within the window")
	assert.Equal(t, "EOF", got[0]["error"])
	assert.Equal(t, "10.0.0.2:7071", got[1]["peer"])
	assert.Equal(t, "failed to contact", got[2]["@message"])
	for _, l := range got {
		assert.NotContains(t, l, "repeated")
	}

	windows.endAll()
	got = lines()[3:]
	require.Len(t, got, 2, "the window ends with one line for each kind that repeated")
	byMsg := map[string]map[string]any{}
	for _, l := range got {
		byMsg[l["@message"].(string)] = l
	}
	assert.EqualValues(t, 9, byMsg["failed to heartbeat to"]["repeated"])
	assert.Equal(t, "connection refused", byMsg["failed to heartbeat to"]["error"], "the latest occurrence is the one written")
	assert.Equal(t, "10.0.0.3:7071", byMsg["failed to heartbeat to"]["peer"])
	assert.Equal(t, "error", byMsg["failed to heartbeat to"]["@level"])
	assert.EqualValues(t, 1, byMsg["failed to contact"]["repeated"])

	// A window with no repetition ends the burst: the next failure is
	// written at once again.
	windows.endAll()
	windows.endAll()
	require.Len(t, lines(), 5)
	log.Error("failed to heartbeat to", "peer", "10.0.0.3:7071", "error", "EOF")
	got = lines()
	require.Len(t, got, 6)
	assert.NotContains(t, got[5], "repeated")
}

func TestQuieterCountsRefusedConnectionsByHost(t *testing.T) {
	_, windows, log, lines := quietTestLogger(t, hclog.Info)
	for port := 40000; port < 40050; port++ {
		log.Warn("dropped connection: unknown first byte", "remote", fmt.Sprintf("192.0.2.7:%d", port), "byte", "0x47")
	}
	log.Warn("dropped connection: unknown first byte", "remote", "192.0.2.8:40000", "byte", "0x47")
	require.Len(t, lines(), 2, "one line per remote host, whatever its port")
	windows.endAll()
	got := lines()
	require.Len(t, got, 3)
	assert.EqualValues(t, 49, got[2]["repeated"])
}

func TestQuieterCloseWritesPendingCounts(t *testing.T) {
	q, windows, log, lines := quietTestLogger(t, hclog.Info)
	for i := 0; i < 4; i++ {
		log.Error("failed to appendEntries to", "peer", "{Voter c 10.0.0.3:7071}", "error", "EOF")
	}
	q.Close()
	got := lines()
	require.Len(t, got, 2)
	assert.EqualValues(t, 3, got[1]["repeated"])
	windows.endAll() // stopped windows write nothing more
	log.Error("failed to appendEntries to", "peer", "{Voter c 10.0.0.3:7071}", "error", "EOF")
	log.Error("failed to appendEntries to", "peer", "{Voter c 10.0.0.3:7071}", "error", "EOF")
	assert.Len(t, lines(), 4, "after close, lines pass through")
}

func TestQuieterLeavesInfoAndHiddenLevelsAlone(t *testing.T) {
	_, windows, log, lines := quietTestLogger(t, hclog.Error)
	for i := 0; i < 3; i++ {
		log.Warn("failed to contact", "server-id", "c") // below the level: dropped, not counted
	}
	windows.endAll()
	assert.Empty(t, lines())

	_, _, log, lines = quietTestLogger(t, hclog.Info)
	for i := 0; i < 3; i++ {
		log.Info("entering candidate state", "term", i)
	}
	assert.Len(t, lines(), 3, "info lines are not collapsed")
}

func TestQuietLoggerDerivedLoggersShareTheQuieter(t *testing.T) {
	_, windows, log, lines := quietTestLogger(t, hclog.Info)
	snap := log.With("path", "/data")
	snap.Error("failed to heartbeat to", "peer", "p")
	snap.Error("failed to heartbeat to", "peer", "p")
	log.Named("x").ResetNamed("raftlock.raft").With("path", "/data").Error("failed to heartbeat to", "peer", "p")
	log.Error("failed to heartbeat to", "peer", "p") // no path: another line
	require.Len(t, lines(), 2)
	windows.endAll()
	got := lines()
	require.Len(t, got, 3)
	assert.EqualValues(t, 2, got[2]["repeated"])
	assert.Equal(t, "/data", got[2]["path"])
}

// With real timers, the count comes when the window ends, without another
// occurrence to carry it.
func TestQuieterWritesTheCountWhenTheWindowEnds(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	q := New(20*time.Millisecond, nil)
	t.Cleanup(q.Close)
	log := q.Wrap(hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: lockedWriter{&mu, &buf}}))
	for range 4 {
		log.Warn("dropped connection", "remote", "192.0.2.7:1")
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(buf.String(), "repeated=3")
	}, 5*time.Second, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 2, strings.Count(buf.String(), "dropped connection"))
}
