package redisslots_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/admission/redisslots"
)

// redisServer is a redis-server this test owns, on a free port and without
// persistence, so that it can restart empty mid-test as a Redis that is
// restarted, flushed or failed over to an empty replica does.
type redisServer struct {
	t         *testing.T
	bin, port string
	dir       string
	cmd       *exec.Cmd
}

// startRedis starts a redisServer, stopped when t ends, or skips t when
// redis-server is not installed.
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, ln.Close())
	r := &redisServer{t: t, bin: bin, port: port, dir: t.TempDir()}
	r.start()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	})
	return r
}

func (r *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", r.port) }

func (r *redisServer) start() {
	r.t.Helper()
	r.cmd = exec.Command(r.bin, "--port", r.port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", r.dir)
	require.NoError(r.t, r.cmd.Start(), "start redis-server")
	require.Eventually(r.t, func() bool {
		c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1})
		defer func() { _ = c.Close() }()
		return c.Ping(context.Background()).Err() == nil
	}, 10*time.Second, 20*time.Millisecond, "redis-server on %s did not answer", r.addr())
}

// restart stops the server with SHUTDOWN NOSAVE and starts it again on the
// same port, empty.
func (r *redisServer) restart() {
	r.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1})
	err := c.ShutdownNoSave(context.Background()).Err()
	_ = c.Close()
	require.NoError(r.t, err, "SHUTDOWN NOSAVE")
	_ = r.cmd.Wait() // it exits once it has shut down
	r.start()
}

// grantedOnceUp is granted, asked again while the call fails (a pooled
// connection to a Redis that restarted).
func grantedOnceUp(t *testing.T, s *redisslots.Slots, l admission.Lease) bool {
	t.Helper()
	var ok bool
	require.Eventually(t, func() bool {
		var err error
		ok, err = granted(s, l)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	return ok
}

// TestTheLeasesOfRunningRequestsSurviveARedisRestart: two requests hold a
// backend's budget of 2; Redis restarts empty (SHUTDOWN NOSAVE, as a
// failover to an empty replica or a FLUSHALL also leaves it); from the
// first renewal after it answers again, the two count again and a third
// is refused. Until 2026-12-05 a renewal renewed only the leases Redis
// still had, so the backend took two more for as long as its two ran.
func TestTheLeasesOfRunningRequestsSurviveARedisRestart(t *testing.T) {
	rs := startRedis(t)
	client := redis.NewClient(&redis.Options{Addr: rs.addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisslots.New(client, "")
	require.NoError(t, err)
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0)
	require.True(t, grantedOnceUp(t, s, lease(2, admission.Default, "a1", t0)))
	require.True(t, grantedOnceUp(t, s, lease(2, admission.Default, "a2", t0)))
	require.False(t, grantedOnceUp(t, s, lease(2, admission.Default, "a3", t0)))

	rs.restart()
	at := t0.Add(20 * time.Second)
	var n int
	require.Eventually(t, func() bool {
		n, err = s.Renew(ctx, at)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "a renewal succeeds once Redis is back")
	assert.Equal(t, 2, n)
	held, err := s.Leases(ctx, "m", "b1", at)
	require.NoError(t, err)
	assert.EqualValues(t, 2, held, "both leases are back")
	assert.False(t, grantedOnceUp(t, s, lease(2, admission.Default, "a3", at)), "a1 and a2 still run: the budget is full")

	require.NoError(t, s.Release(ctx, "m", "b1", "a1"))
	assert.True(t, grantedOnceUp(t, s, lease(2, admission.Default, "a3", at)))
}

// beforeRenewal is a go-redis hook that runs f once, ahead of the next
// pipeline of scripts the client sends (a renewal's): Renew has then
// collected the leases it renews.
type beforeRenewal struct {
	mu sync.Mutex
	f  func()
}

func (h *beforeRenewal) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *beforeRenewal) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *beforeRenewal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && (cmds[0].Name() == "evalsha" || cmds[0].Name() == "eval") {
			h.mu.Lock()
			f := h.f
			h.f = nil
			h.mu.Unlock()
			if f != nil {
				f()
			}
		}
		return next(ctx, cmds)
	}
}

// TestALeaseReleasedWhileARenewalRunsDoesNotComeBack: a renewal writes back
// every lease it is sent, so one released after Renew collected the
// leases comes back; Renew then removes it once more, and its slot is
// free at once rather than a TTL later.
func TestALeaseReleasedWhileARenewalRunsDoesNotComeBack(t *testing.T) {
	newSlots(t) // skips without Redis
	hook := &beforeRenewal{}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	client.AddHook(hook)
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisslots.New(client, fmt.Sprintf("test%d", rand.Uint64()))
	require.NoError(t, err)
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0)
	for _, id := range []string{"a1", "a2"} {
		ok, err := granted(s, lease(2, admission.Default, id, t0))
		require.NoError(t, err)
		require.True(t, ok)
	}
	hook.mu.Lock()
	hook.f = func() { require.NoError(t, s.Release(ctx, "m", "b1", "a2")) } // its ZREM runs before the renewal's script
	hook.mu.Unlock()
	at := t0.Add(20 * time.Second)
	n, err := s.Renew(ctx, at)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "a1 is renewed; a2 is not")
	held, err := s.Leases(ctx, "m", "b1", at)
	require.NoError(t, err)
	assert.EqualValues(t, 1, held, "the released lease is not in the set")
	ok, err := granted(s, lease(2, admission.Default, "b1", at))
	require.NoError(t, err)
	assert.True(t, ok, "a2's release made room")
	ok, err = granted(s, lease(2, admission.Default, "b2", at))
	require.NoError(t, err)
	assert.False(t, ok)
}
