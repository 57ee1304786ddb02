package batch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore is the Store that replicas share: batch state and line
// progress in Redis, so that any replica runs any batch's lines. A claim
// is a lease (a sorted set scored by its expiry): a replica that dies
// stops renewing its claims, and once they expire its lines are pending
// again for the others. A result is written with HSETNX, so a line whose
// lease expired while it still ran is recorded once.
//
// Every multi-key operation is one Lua script or one WATCH transaction
// over keys of one hash slot: metadata keys share the {meta} tag, each
// batch's line keys the batch's ID, so it works on Redis Cluster. Results
// are kept in Redis until the batch's files are written.
type RedisStore struct {
	c       redis.UniversalClient
	prefix  string
	timeout time.Duration
}

var _ Store = (*RedisStore)(nil)

// RedisOptions configures a RedisStore. Zero fields mean the documented
// defaults.
type RedisOptions struct {
	// KeyPrefix starts every key. Default "sluice".
	KeyPrefix string
	// Timeout bounds each call. Default 2s.
	Timeout time.Duration
}

// NewRedisStore returns a Store in c.
func NewRedisStore(c redis.UniversalClient, o RedisOptions) (*RedisStore, error) {
	if c == nil {
		return nil, errors.New("batch: nil Redis client")
	}
	if o.Timeout < 0 {
		return nil, errors.New("batch: Timeout must not be negative")
	}
	return &RedisStore{c: c, prefix: cmp.Or(o.KeyPrefix, "sluice") + ":batch", timeout: cmp.Or(o.Timeout, 2*time.Second)}, nil
}

func (s *RedisStore) fileKey(id string) string     { return s.prefix + ":{meta}:file:" + id }
func (s *RedisStore) filesKey(owner string) string { return s.prefix + ":{meta}:files:" + owner }
func (s *RedisStore) batchKey(id string) string    { return s.prefix + ":{meta}:batch:" + id }
func (s *RedisStore) ownedKey(owner string) string { return s.prefix + ":{meta}:batches:" + owner }
func (s *RedisStore) activeKey() string            { return s.prefix + ":{meta}:active" }
func (s *RedisStore) expiryKey() string            { return s.prefix + ":{meta}:expiry" } // file id -> ExpiresAt

// lineKeys are a batch's line keys: meta (n, next, completed, failed), the
// free list, the claims (line -> expiry, ms), their holders, the results.
func (s *RedisStore) lineKeys(id string) []string {
	p := s.prefix + ":{" + id + "}:"
	return []string{p + "lines", p + "free", p + "claims", p + "holders", p + "results"}
}

func (s *RedisStore) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// SaveFile implements Store.
func (s *RedisStore) SaveFile(ctx context.Context, f FileMeta) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	_, err = s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.fileKey(f.ID), b, 0)
		p.SAdd(ctx, s.filesKey(f.Owner), f.ID)
		if f.ExpiresAt > 0 {
			p.ZAdd(ctx, s.expiryKey(), redis.Z{Score: float64(f.ExpiresAt), Member: f.ID})
		}
		return nil
	})
	return wrapRedis(err)
}

// File implements Store.
func (s *RedisStore) File(ctx context.Context, id string) (FileMeta, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var f FileMeta
	return f, s.get(ctx, s.fileKey(id), &f)
}

func (s *RedisStore) get(ctx context.Context, key string, v any) error {
	b, err := s.c.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return ErrNotFound
	}
	if err != nil {
		return wrapRedis(err)
	}
	return json.Unmarshal(b, v)
}

// Files implements Store.
func (s *RedisStore) Files(ctx context.Context, owner string) ([]FileMeta, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	ids, err := s.c.SMembers(ctx, s.filesKey(owner)).Result()
	if err != nil {
		return nil, wrapRedis(err)
	}
	return mget[FileMeta](ctx, s.c, ids, s.fileKey)
}

// mget reads the JSON values of ids, skipping those gone meanwhile.
func mget[T any](ctx context.Context, c redis.UniversalClient, ids []string, key func(string) string) ([]T, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = key(id)
	}
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, wrapRedis(err)
	}
	out := make([]T, 0, len(vals))
	for _, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue
		}
		var t T
		if err := json.Unmarshal([]byte(str), &t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// DeleteFile implements Store.
func (s *RedisStore) DeleteFile(ctx context.Context, id string) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var f FileMeta
	if err := s.get(ctx, s.fileKey(id), &f); err != nil {
		return err
	}
	_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.fileKey(id))
		p.SRem(ctx, s.filesKey(f.Owner), id)
		p.ZRem(ctx, s.expiryKey(), id)
		return nil
	})
	return wrapRedis(err)
}

// ExpiredFiles implements Store.
func (s *RedisStore) ExpiredFiles(ctx context.Context, now time.Time) ([]FileMeta, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	ids, err := s.c.ZRangeByScore(ctx, s.expiryKey(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.Unix(), 10)}).Result()
	if err != nil {
		return nil, wrapRedis(err)
	}
	return mget[FileMeta](ctx, s.c, ids, s.fileKey)
}

// CreateBatch implements Store.
func (s *RedisStore) CreateBatch(ctx context.Context, b BatchMeta) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	enc, err := json.Marshal(b)
	if err != nil {
		return err
	}
	ok, err := s.c.SetNX(ctx, s.batchKey(b.ID), enc, 0).Result()
	if err != nil {
		return wrapRedis(err)
	}
	if !ok {
		return fmt.Errorf("batch store: batch %s exists", b.ID)
	}
	_, err = s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, s.ownedKey(b.Owner), b.ID)
		if !b.Status.Terminal() {
			p.SAdd(ctx, s.activeKey(), b.ID)
		}
		return nil
	})
	return wrapRedis(err)
}

// Batch implements Store.
func (s *RedisStore) Batch(ctx context.Context, id string) (BatchMeta, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var b BatchMeta
	return b, s.get(ctx, s.batchKey(id), &b)
}

// Batches implements Store.
func (s *RedisStore) Batches(ctx context.Context, owner string) ([]BatchMeta, error) {
	return s.members(ctx, s.ownedKey(owner))
}

// Active implements Store.
func (s *RedisStore) Active(ctx context.Context) ([]BatchMeta, error) {
	return s.members(ctx, s.activeKey())
}

func (s *RedisStore) members(ctx context.Context, set string) ([]BatchMeta, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	ids, err := s.c.SMembers(ctx, set).Result()
	if err != nil {
		return nil, wrapRedis(err)
	}
	return mget[BatchMeta](ctx, s.c, ids, s.batchKey)
}

// UpdateBatch implements Store: an optimistic transaction (WATCH), tried
// again when another replica changed the batch in between.
func (s *RedisStore) UpdateBatch(ctx context.Context, id string, change func(*BatchMeta) error) (BatchMeta, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	key := s.batchKey(id)
	var out BatchMeta
	for range 20 {
		err := s.c.Watch(ctx, func(tx *redis.Tx) error {
			b, err := tx.Get(ctx, key).Bytes()
			if errors.Is(err, redis.Nil) {
				return ErrNotFound
			}
			if err != nil {
				return err
			}
			var m BatchMeta
			if err := json.Unmarshal(b, &m); err != nil {
				return err
			}
			if err := change(&m); err != nil {
				return &aborted{err: err}
			}
			enc, err := json.Marshal(m)
			if err != nil {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, key, enc, 0)
				if m.Status.Terminal() {
					p.SRem(ctx, s.activeKey(), id)
				} else {
					p.SAdd(ctx, s.activeKey(), id)
				}
				return nil
			})
			out = m
			return err
		}, key)
		var ab *aborted
		switch {
		case err == nil:
			return out, nil
		case errors.Is(err, redis.TxFailedErr):
			continue // changed meanwhile: read it again
		case errors.As(err, &ab):
			return BatchMeta{}, ab.err
		case errors.Is(err, ErrNotFound):
			return BatchMeta{}, err
		}
		return BatchMeta{}, wrapRedis(err)
	}
	return BatchMeta{}, errors.New("batch store: batch " + id + " changed too often to update")
}

// aborted carries the error of UpdateBatch's change out of the
// transaction, to be returned as is.
type aborted struct{ err error }

func (e *aborted) Error() string { return e.err.Error() }

var (
	claimScript = redis.NewScript(`
local n = tonumber(redis.call('HGET', KEYS[1], 'n'))
if not n then return {} end
local max = tonumber(ARGV[1])
local out = {}
for _, l in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[2])) do
  redis.call('ZREM', KEYS[3], l)
  redis.call('HDEL', KEYS[4], l)
  redis.call('RPUSH', KEYS[2], l)
end
local function take(l)
  redis.call('ZADD', KEYS[3], ARGV[3], l)
  redis.call('HSET', KEYS[4], l, ARGV[4])
  out[#out + 1] = tonumber(l)
end
while #out < max do
  local l = redis.call('LPOP', KEYS[2])
  if not l then break end
  if redis.call('HEXISTS', KEYS[5], l) == 0 and not redis.call('ZSCORE', KEYS[3], l) then take(l) end
end
local nxt = tonumber(redis.call('HGET', KEYS[1], 'next') or '0')
while #out < max and nxt < n do
  if redis.call('HEXISTS', KEYS[5], tostring(nxt)) == 0 then take(tostring(nxt)) end
  nxt = nxt + 1
end
redis.call('HSET', KEYS[1], 'next', nxt)
return out
`)
	renewScript = redis.NewScript(`
for i = 3, #ARGV do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[2] then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[1], ARGV[i])
  end
end
return 0
`)
	releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[4], ARGV[2]) == ARGV[1] then
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('HDEL', KEYS[4], ARGV[2])
  redis.call('RPUSH', KEYS[2], ARGV[2])
end
return 0
`)
	finishScript = redis.NewScript(`
local n = tonumber(redis.call('HGET', KEYS[1], 'n'))
local line = tonumber(ARGV[1])
if not n or line < 0 or line >= n then return 0 end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if redis.call('HSETNX', KEYS[5], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
return 1
`)
)

// StartLines implements Store.
func (s *RedisStore) StartLines(ctx context.Context, id string, n int) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return wrapRedis(s.c.HSetNX(ctx, s.lineKeys(id)[0], "n", n).Err())
}

// Claim implements Store.
func (s *RedisStore) Claim(ctx context.Context, id, holder string, max int, ttl time.Duration, now time.Time) ([]int, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	v, err := claimScript.Run(ctx, s.c, s.lineKeys(id), max, now.UnixMilli(), now.Add(ttl).UnixMilli(), holder).Int64Slice()
	if err != nil {
		return nil, wrapRedis(err)
	}
	out := make([]int, len(v))
	for i, l := range v {
		out[i] = int(l)
	}
	return out, nil
}

// Renew implements Store.
func (s *RedisStore) Renew(ctx context.Context, id, holder string, lines []int, ttl time.Duration, now time.Time) error {
	if len(lines) == 0 {
		return nil
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	keys := s.lineKeys(id)
	args := []any{now.Add(ttl).UnixMilli(), holder}
	for _, l := range lines {
		args = append(args, strconv.Itoa(l))
	}
	return wrapRedis(renewScript.Run(ctx, s.c, []string{keys[2], keys[3]}, args...).Err())
}

// Release implements Store.
func (s *RedisStore) Release(ctx context.Context, id, holder string, line int) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return wrapRedis(releaseScript.Run(ctx, s.c, s.lineKeys(id), holder, strconv.Itoa(line)).Err())
}

// Finish implements Store.
func (s *RedisStore) Finish(ctx context.Context, id string, line int, r Result) (bool, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	enc, err := json.Marshal(r)
	if err != nil {
		return false, err
	}
	field := "failed"
	if r.OK() {
		field = "completed"
	}
	n, err := finishScript.Run(ctx, s.c, s.lineKeys(id), strconv.Itoa(line), enc, field).Int()
	if err != nil {
		return false, wrapRedis(err)
	}
	return n == 1, nil
}

// Counts implements Store.
func (s *RedisStore) Counts(ctx context.Context, id string, now time.Time) (Counts, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	keys := s.lineKeys(id)
	var (
		meta    *redis.SliceCmd
		claimed *redis.IntCmd
	)
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.HMGet(ctx, keys[0], "n", "completed", "failed")
		claimed = p.ZCount(ctx, keys[2], "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf")
		return nil
	})
	if err != nil {
		return Counts{}, wrapRedis(err)
	}
	num := func(v any) int {
		str, _ := v.(string)
		n, _ := strconv.Atoi(str)
		return n
	}
	m := meta.Val()
	if m[0] == nil {
		return Counts{}, nil
	}
	return Counts{Total: num(m[0]), Completed: num(m[1]), Failed: num(m[2]), Claimed: int(claimed.Val())}, nil
}

// Results implements Store.
func (s *RedisStore) Results(ctx context.Context, id string, fn func(int, Result) error) error {
	key := s.lineKeys(id)[4]
	var cursor uint64
	seen := map[int]bool{} // HSCAN may return a field twice
	for {
		cctx, cancel := s.ctx(ctx)
		kv, next, err := s.c.HScan(cctx, key, cursor, "", 256).Result()
		cancel()
		if err != nil {
			return wrapRedis(err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			line, err := strconv.Atoi(kv[i])
			if err != nil {
				return fmt.Errorf("batch store: results of %s: line %q", id, kv[i])
			}
			if seen[line] {
				continue
			}
			seen[line] = true
			var r Result
			if err := json.Unmarshal([]byte(kv[i+1]), &r); err != nil {
				return fmt.Errorf("batch store: results of %s: %w", id, err)
			}
			if err := fn(line, r); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// DropLines implements Store.
func (s *RedisStore) DropLines(ctx context.Context, id string) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return wrapRedis(s.c.Del(ctx, s.lineKeys(id)...).Err())
}

func wrapRedis(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("batch store: redis: %w", err)
}
