package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// sharedRedis is the Redis the tests use when it answers; .ci/run starts it.
const sharedRedis = "127.0.0.1:6379"

// redisAddr returns the address of a Redis to test against: the shared one,
// or else a redis-server started on a free port for this test, or it skips
// the test when there is neither.
func redisAddr(t testing.TB) string {
	t.Helper()
	if ping(sharedRedis) == nil {
		return sharedRedis
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skipf("no Redis answers at %s and redis-server is not installed (apt-get install redis-server)", sharedRedis)
	}
	port := freePort(t)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	cmd.Dir = t.TempDir()
	require.NoError(t, cmd.Start(), "start redis-server")
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", port)
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ping(addr)
		if err == nil {
			t.Logf("no Redis at %s; started redis-server on %s", sharedRedis, addr)
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer: %v", addr, err)
		}
		<-tick.C
	}
}

// ping sends one PING without a client, so a missing Redis costs a refused
// connection and nothing more.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	return port
}

// newClient returns a client of a live Redis with the options doc.go
// recommends, closed when t ends.
func newClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  redisAddr(t),
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore returns a Store on c under a prefix of its own, whose keys are
// deleted when t ends.
func newStore(t testing.TB, c redis.UniversalClient) *Store {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, t.Name())
	prefix := "sluicetest-" + name + "-" + strconv.FormatUint(rand.Uint64(), 36)
	s, err := New(c, Options{KeyPrefix: prefix})
	require.NoError(t, err)
	t.Cleanup(func() { deleteKeys(t, c, prefix+":*") })
	return s
}

func deleteKeys(t testing.TB, c redis.UniversalClient, pattern string) {
	ctx := context.Background()
	keys, err := scan(ctx, c, pattern)
	if err != nil {
		t.Errorf("clean up %s: %v", pattern, err)
		return
	}
	if len(keys) > 0 {
		if err := c.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("clean up %s: %v", pattern, err)
		}
	}
}

func scan(ctx context.Context, c redis.UniversalClient, pattern string) ([]string, error) {
	var keys []string
	it := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	return keys, it.Err()
}

// counter is a go-redis hook that records the commands a client sends,
// leaving out the handshake of a new connection (HELLO, CLIENT SETINFO).
type counter struct {
	mu        sync.Mutex
	cmds      []string
	pipelines int
}

func (h *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record([]redis.Cmder{cmd}, false)
		return next(ctx, cmd)
	}
}

func (h *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds, true)
		return next(ctx, cmds)
	}
}

func (h *counter) record(cmds []redis.Cmder, pipeline bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.cmds)
	for _, c := range cmds {
		if name := c.Name(); name != "hello" && name != "client" {
			h.cmds = append(h.cmds, name)
		}
	}
	if pipeline && len(h.cmds) > n {
		h.pipelines++
	}
}

// take returns and forgets what was recorded.
func (h *counter) take() (cmds []string, pipelines int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cmds, pipelines = h.cmds, h.pipelines
	h.cmds, h.pipelines = nil, 0
	return cmds, pipelines
}

// slot is the Redis Cluster hash slot of key (CRC16-XMODEM of its hash
// tag, or of the whole key without one, mod 16384).
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	tests := []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3 % 16384},
		{"foo", 12182},
		{"{user1000}.following", slot("user1000")},
		{"foo{}{bar}", slot("foo{}{bar}")},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, slot(tt.key), tt.key)
	}
}
