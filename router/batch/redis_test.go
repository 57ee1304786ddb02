package batch_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/router/batch"
)

// sharedRedis is the Redis the tests use when it answers.
const sharedRedis = "127.0.0.1:6379"

// redisClient returns a client of the shared Redis, or of a redis-server
// started on a free port for this test; it skips the test when there is
// neither.
func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	addr := sharedRedis
	if ping(addr) != nil {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			t.Skipf("no Redis answers at %s and redis-server is not installed", sharedRedis)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr = ln.Addr().String()
		require.NoError(t, ln.Close())
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
		cmd.Dir = t.TempDir()
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		require.Eventually(t, func() bool { return ping(addr) == nil }, 10*time.Second, 20*time.Millisecond)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

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

// redisStore is a RedisStore on c under a prefix of its own, whose keys
// are deleted when t ends.
func redisStore(t *testing.T, c *redis.Client) *batch.RedisStore {
	t.Helper()
	prefix := "sluicetest-batch-" + strconv.FormatUint(rand.Uint64(), 36)
	s, err := batch.NewRedisStore(c, batch.RedisOptions{KeyPrefix: prefix})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		var keys []string
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			_ = c.Del(ctx, keys...).Err()
		}
	})
	return s
}

func TestRedisStore(t *testing.T) {
	c := redisClient(t)
	storeContract(t, func(t *testing.T) batch.Store { return redisStore(t, c) })
}

// killable is a Store a replica loses at once, as when its process is
// killed: every call fails from then on, so it neither records nor gives
// back the lines it holds.
type killable struct {
	batch.Store
	dead atomic.Bool
}

var errKilled = errors.New("killed")

func (k *killable) check() error {
	if k.dead.Load() {
		return errKilled
	}
	return nil
}

func (k *killable) Active(ctx context.Context) ([]batch.BatchMeta, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	return k.Store.Active(ctx)
}

func (k *killable) UpdateBatch(ctx context.Context, id string, change func(*batch.BatchMeta) error) (batch.BatchMeta, error) {
	if err := k.check(); err != nil {
		return batch.BatchMeta{}, err
	}
	return k.Store.UpdateBatch(ctx, id, change)
}

func (k *killable) Claim(ctx context.Context, id, holder string, max int, ttl time.Duration, now time.Time) ([]int, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	return k.Store.Claim(ctx, id, holder, max, ttl, now)
}

func (k *killable) Renew(ctx context.Context, id, holder string, lines []int, ttl time.Duration, now time.Time) error {
	if err := k.check(); err != nil {
		return err
	}
	return k.Store.Renew(ctx, id, holder, lines, ttl, now)
}

func (k *killable) Release(ctx context.Context, id, holder string, line int) error {
	if err := k.check(); err != nil {
		return err
	}
	return k.Store.Release(ctx, id, holder, line)
}

func (k *killable) Finish(ctx context.Context, id string, line int, r batch.Result) (bool, error) {
	if err := k.check(); err != nil {
		return false, err
	}
	return k.Store.Finish(ctx, id, line, r)
}

func (k *killable) Counts(ctx context.Context, id string, now time.Time) (batch.Counts, error) {
	if err := k.check(); err != nil {
		return batch.Counts{}, err
	}
	return k.Store.Counts(ctx, id, now)
}

func (k *killable) SaveFile(ctx context.Context, f batch.FileMeta) error {
	if err := k.check(); err != nil {
		return err
	}
	return k.Store.SaveFile(ctx, f)
}

// TestReplicaKilledMidBatch: two replicas share a Redis store and a data
// directory and run one batch; one is killed midway. Its claims expire,
// the other takes its lines, and the batch completes with every line
// answered exactly once.
func TestReplicaKilledMidBatch(t *testing.T) {
	c := redisClient(t)
	store := redisStore(t, c)
	dir := t.TempDir()
	lease := batch.RunnerOptions{LeaseTTL: time.Second}
	s := slow()
	s.dir, s.runner = dir, lease
	doomed := &killable{Store: store}
	s.store = doomed
	a := start(t, s)

	onA := a.client(t, "sk-acme")
	in := upload(t, onA, chatLines(30, model, 30))
	created := create(t, onA, in.ID, openai.BatchNewParamsEndpointV1ChatCompletions)
	// The second replica starts once the first is running lines, so the
	// kill always lands mid-batch with claims of the first outstanding.
	require.Eventually(t, func() bool { return a.worker.Load().GenerationTokens > 0 }, 20*time.Second, 5*time.Millisecond)
	s.store = store
	b := start(t, s)
	onB := b.client(t, "sk-acme")
	doomed.dead.Store(true)

	done := await(t, onB, created.ID, openai.BatchStatusCompleted)
	assert.EqualValues(t, 30, done.RequestCounts.Completed)
	assert.Zero(t, done.RequestCounts.Failed)
	out := download(t, onB, done.OutputFileID) // fails on a line answered twice
	assert.Len(t, out, 30)
	assert.Positive(t, a.worker.Load().GenerationTokens, "the killed replica ran lines before it died")
}
