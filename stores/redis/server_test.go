package redis_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/internal/testskip"
)

// server is a redis-server of a test's own, on 127.0.0.1 in a temp dir.
type server struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
}

// startServer starts a redis-server for t (extra are more config
// directives, as command-line flags) and stops it at t's end; the test
// skips when no redis-server is installed.
func startServer(t *testing.T, extra ...string) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testskip.Skip(t, "%s", "redis-server not found on PATH: install it (apt-get install redis-server) to run the Redis store's tests")
	}
	srv := &server{t: t, bin: bin, dir: t.TempDir(), args: extra}
	srv.start()
	t.Cleanup(srv.stop)
	return srv
}

func (srv *server) start() {
	t := srv.t
	t.Helper()
	if srv.port == 0 {
		srv.port = freePort(t)
	}
	args := append([]string{"--port", strconv.Itoa(srv.port), "--bind", "127.0.0.1", "--dir", srv.dir,
		"--save", "", "--daemonize", "no", "--logfile", filepath.Join(srv.dir, "redis.log")}, srv.args...)
	srv.cmd = exec.Command(srv.bin, args...)
	require.NoError(t, srv.cmd.Start())
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.addr(), Password: srv.password()})
	defer rdb.Close()
	require.Eventually(t, func() bool {
		err := rdb.Ping(context.Background()).Err()
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "redis-server on %s answers (log: %s)", srv.addr(), srv.log())
}

func (srv *server) stop() {
	if srv.cmd == nil || srv.cmd.Process == nil {
		return
	}
	_ = srv.cmd.Process.Kill()
	_ = srv.cmd.Wait()
	srv.cmd = nil
}

// restart stops the server as a crash would (no shutdown save) and starts it
// again on the same port and dir.
func (srv *server) restart() {
	srv.stop()
	srv.start()
}

func (srv *server) addr() string { return fmt.Sprintf("127.0.0.1:%d", srv.port) }

func (srv *server) password() string {
	for i, a := range srv.args {
		if a == "--requirepass" && i+1 < len(srv.args) {
			return srv.args[i+1]
		}
	}
	return ""
}

func (srv *server) log() string {
	b, _ := os.ReadFile(filepath.Join(srv.dir, "redis.log"))
	return string(b)
}

// client is a go-redis client of srv, closed at t's end.
func (srv *server) client(t *testing.T) *goredis.Client {
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.addr(), Password: srv.password()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// freePort is a port that was free on 127.0.0.1 a moment ago (redis-server
// cannot be given port 0 and report the port it took).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}
