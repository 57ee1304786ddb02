// Package redistest starts a redis-server of a test's own, for the tests of
// the packages that keep state in Redis and must see what happens when
// Redis restarts empty under them.
package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Server is a redis-server a test owns, on a free port and without
// persistence, so that it can restart empty mid-test as a Redis that is
// restarted, flushed or failed over to an empty replica does.
type Server struct {
	t         testing.TB
	bin, port string
	dir       string
	cmd       *exec.Cmd
}

// Start starts a Server, stopped when t ends, or skips t when redis-server
// is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, ln.Close())
	s := &Server{t: t, bin: bin, port: port, dir: t.TempDir()}
	s.start()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", s.port) }

func (s *Server) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "--port", s.port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir)
	require.NoError(s.t, s.cmd.Start(), "start redis-server")
	require.Eventually(s.t, func() bool {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		defer func() { _ = c.Close() }()
		return c.Ping(context.Background()).Err() == nil
	}, 10*time.Second, 20*time.Millisecond, "redis-server on %s did not answer", s.Addr())
}

// Restart stops the server with SHUTDOWN NOSAVE and starts it again on the
// same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	err := c.ShutdownNoSave(context.Background()).Err()
	_ = c.Close()
	require.NoError(s.t, err, "SHUTDOWN NOSAVE")
	_ = s.cmd.Wait() // it exits once it has shut down
	s.start()
}
