package redisslots

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-llm/sluice/policies/admission"
)

// acquireScript: KEYS[1] the backend's lease set, KEYS[2..] the wait sets
// of the better classes. ARGV: budget, lease, now_ms, expiry_ms,
// patience_cutoff_ms, key_ttl_ms. Returns 1 when the lease was taken.
const acquireScript = `
local now = tonumber(ARGV[3])
for i = 2, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - tonumber(ARGV[6]))
  if redis.call('ZCOUNT', KEYS[i], '-inf', ARGV[5]) > 0 then
    return 0
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
`

// Slots is admission.Slots on Redis.
type Slots struct {
	client  redis.UniversalClient
	prefix  string
	acquire *redis.Script
}

var _ admission.Slots = (*Slots)(nil)

// New returns Slots on client with keys under prefix (default "sluice"; no
// braces).
func New(client redis.UniversalClient, prefix string) (*Slots, error) {
	if client == nil {
		return nil, errors.New("redisslots: nil client")
	}
	if prefix == "" {
		prefix = "sluice"
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redisslots: prefix %q must not contain '{' or '}'", prefix)
	}
	return &Slots{client: client, prefix: prefix, acquire: redis.NewScript(acquireScript)}, nil
}

func (s *Slots) leases(pool, backend string) string {
	return s.prefix + ":adm:{" + pool + "}:ep:" + backend
}

func (s *Slots) waiting(pool string, c admission.Class) string {
	return s.prefix + ":adm:{" + pool + "}:wait:" + c.String()
}

// Acquire implements admission.Slots.
func (s *Slots) Acquire(ctx context.Context, pool, backend string, budget int, class admission.Class, lease string, ttl, patience time.Duration, now time.Time) (bool, error) {
	keys := make([]string, 1, 1+int(class))
	keys[0] = s.leases(pool, backend)
	for c := admission.Class(0); c < class; c++ {
		keys = append(keys, s.waiting(pool, c))
	}
	ms := now.UnixMilli()
	v, err := s.acquire.Run(ctx, s.client, keys, budget, lease, ms, ms+ttl.Milliseconds(),
		ms-patience.Milliseconds(), ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("redisslots: acquire: %w", err)
	}
	return v == 1, nil
}

// Release implements admission.Slots.
func (s *Slots) Release(ctx context.Context, pool, backend, lease string) error {
	if err := s.client.ZRem(ctx, s.leases(pool, backend), lease).Err(); err != nil {
		return fmt.Errorf("redisslots: release: %w", err)
	}
	return nil
}

// Wait implements admission.Slots.
func (s *Slots) Wait(ctx context.Context, pool string, class admission.Class, id string, ttl time.Duration, now time.Time) error {
	key := s.waiting(pool, class)
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, key, redis.Z{Score: float64(now.UnixMilli()), Member: id})
		p.PExpire(ctx, key, ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisslots: wait: %w", err)
	}
	return nil
}

// Unwait implements admission.Slots.
func (s *Slots) Unwait(ctx context.Context, pool string, class admission.Class, id string) error {
	if err := s.client.ZRem(ctx, s.waiting(pool, class), id).Err(); err != nil {
		return fmt.Errorf("redisslots: unwait: %w", err)
	}
	return nil
}

// Load caches the script in Redis.
func (s *Slots) Load(ctx context.Context) error {
	return s.acquire.Load(ctx, s.client).Err()
}

// Leases is how many live leases hold backend.
func (s *Slots) Leases(ctx context.Context, pool, backend string, now time.Time) (int64, error) {
	return s.client.ZCount(ctx, s.leases(pool, backend), strconv.FormatInt(now.UnixMilli()+1, 10), "+inf").Result()
}
