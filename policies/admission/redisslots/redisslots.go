package redisslots

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/internal/leaseset"
)

// acquireScript: KEYS[1] the backend's lease set, KEYS[2] its pending
// prompts (lease -> "tokens:until_ms"), KEYS[3] the wait set of the
// request's class and tenant, KEYS[4] the set of tenants that may have
// requests waiting at the request's class and tier priority, KEYS[5] the
// weighted tokens served there per tenant (field "\0v": the virtual time,
// where service had got to), KEYS[6] the backend's fresh prompts (as
// KEYS[2]), KEYS[7..] the wait sets of the better classes. ARGV: budget,
// lease, now_ms, expiry_ms, patience_cutoff_ms, key_ttl_ms, max_prompt,
// prompt, prompt_until_ms, arrival_cutoff_ms, tenant, cost, the prefix of
// the class's tenant wait sets, the score below which the class's waiting
// requests are gone, the prefix of the replicas' alive keys, max_fresh,
// fresh ("1": the prompt counts as fresh too), then per better class's
// wait set the score below which its requests are gone. A waiting request whose id is
// "REPLICA-..." counts only while REPLICA's alive key lives (Wait and Beat
// set it); the script drops those it finds dead.
// Returns {code, pending}: code 1 when the lease was taken, 0 when the
// backend is full, 2 when requests that go first wait elsewhere, 3 when its
// fresh prompts are at max_fresh; pending, with code 1, the prompt tokens
// the backend's live leases held pending before this one (0 otherwise).
const acquireScript = `
local now = tonumber(ARGV[3])
local function live(id)
  local dash = string.find(id, '-', 1, true)
  if not dash then
    return true
  end
  return redis.call('EXISTS', ARGV[15] .. string.sub(id, 1, dash - 1)) == 1
end
local function waits(k, hi)
  for n = 1, 64 do
    local m = redis.call('ZRANGEBYSCORE', k, '-inf', hi, 'LIMIT', 0, 1)
    if #m == 0 then
      return false
    end
    if live(m[1]) then
      return true
    end
    redis.call('ZREM', k, m[1])
  end
  return true
end
for i = 7, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. ARGV[11 + i])
  if waits(KEYS[i], ARGV[5]) then
    return {2, 0}
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[14])
if waits(KEYS[3], ARGV[10]) then
  return {2, 0}
end
local vt = tonumber(redis.call('HGET', KEYS[5], '\0v') or '0')
local function served(t)
  return math.max(tonumber(redis.call('HGET', KEYS[5], t) or '0'), vt)
end
local mine = served(ARGV[11])
local cost = tonumber(ARGV[12])
if cost > 0 then
  for _, t in ipairs(redis.call('SMEMBERS', KEYS[4])) do
    if t ~= ARGV[11] and served(t) < mine then
      local k = ARGV[13] .. t
      redis.call('ZREMRANGEBYSCORE', k, '-inf', '(' .. ARGV[14])
      if waits(k, '+inf') then
        return {2, 0}
      end
      if redis.call('ZCARD', k) == 0 then
        redis.call('SREM', KEYS[4], t)
      end
    end
  end
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #expired, 500 do
    local ids = {unpack(expired, i, math.min(i + 499, #expired))}
    redis.call('HDEL', KEYS[2], unpack(ids))
    redis.call('HDEL', KEYS[6], unpack(ids))
  end
end
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[1]) then
  return {0, 0}
end
local function prompts(k)
  local kv = redis.call('HGETALL', k)
  local sum = 0
  for j = 1, #kv, 2 do
    local v = kv[j + 1]
    local sep = string.find(v, ':', 1, true)
    if tonumber(string.sub(v, sep + 1)) <= now then
      redis.call('HDEL', k, kv[j])
    else
      sum = sum + tonumber(string.sub(v, 1, sep - 1))
    end
  end
  return sum
end
local pending = 0
if held > 0 then
  pending = prompts(KEYS[2])
end
local maxp = tonumber(ARGV[7])
if maxp > 0 and pending >= maxp then
  return {0, 0}
end
local maxf = tonumber(ARGV[16])
if maxf > 0 and held > 0 and prompts(KEYS[6]) >= maxf then
  return {3, 0}
end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if tonumber(ARGV[8]) > 0 then
  local v = ARGV[8] .. ':' .. ARGV[9]
  redis.call('HSET', KEYS[2], ARGV[2], v)
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
  if ARGV[17] == '1' then
    redis.call('HSET', KEYS[6], ARGV[2], v)
    redis.call('PEXPIRE', KEYS[6], ARGV[6])
  end
end
if cost > 0 then
  redis.call('HSET', KEYS[5], '\0v', string.format('%.17g', mine), ARGV[11], string.format('%.17g', mine + cost))
  redis.call('PEXPIRE', KEYS[5], ARGV[6])
end
return {1, pending}
`

// Slots is admission.Slots on Redis.
type Slots struct {
	// AliveTTL is how long a replica's waiting requests count after its
	// last Wait or Beat: a replica that died without taking its waits
	// back holds nothing back past it. Default 3s (a gate beats every
	// second while requests wait).
	AliveTTL time.Duration

	client          redis.UniversalClient
	prefix          string
	acquire, unwait *redis.Script

	mu sync.Mutex
	// held are the leases this Slots granted and that are not released:
	// Renew extends them while their requests run.
	held map[string]heldLease // lease ID -> where
}

// heldLease is where a held lease is, and its TTL.
type heldLease struct {
	pool, backend string
	ttl           time.Duration
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
	return &Slots{client: client, prefix: prefix, acquire: redis.NewScript(acquireScript), unwait: redis.NewScript(unwaitScript),
		held: map[string]heldLease{}}, nil
}

func (s *Slots) leases(pool, backend string) string {
	return s.prefix + ":adm:{" + pool + "}:ep:" + backend
}

func (s *Slots) prompts(pool, backend string) string {
	return s.prefix + ":adm:{" + pool + "}:pp:" + backend
}

// fresh holds the backend's fresh prompts (Lease.Fresh), as prompts does
// its pending ones.
func (s *Slots) fresh(pool, backend string) string {
	return s.prefix + ":adm:{" + pool + "}:fp:" + backend
}

func (s *Slots) waiting(pool string, c admission.Class) string {
	return s.prefix + ":adm:{" + pool + "}:wait:" + c.String()
}

func (s *Slots) waitingTenant(pool string, c admission.Class, tenant string) string {
	return s.prefix + ":adm:{" + pool + "}:wait:" + c.String() + ":t:" + tenant
}

// alive is replica's alive key.
func (s *Slots) alive(pool, replica string) string {
	return s.prefix + ":adm:{" + pool + "}:alive:" + replica
}

func (s *Slots) aliveTTL() time.Duration { return cmp.Or(s.AliveTTL, 3*time.Second) }

// Beat implements admission.Slots.
func (s *Slots) Beat(ctx context.Context, pool, replica string) error {
	if err := s.client.Set(ctx, s.alive(pool, replica), "1", s.aliveTTL()).Err(); err != nil {
		return fmt.Errorf("redisslots: beat: %w", err)
	}
	return nil
}

// tenantsWaiting is the set of tenants that may have requests waiting at
// class c and tier priority p (Acquire drops those found with none).
func (s *Slots) tenantsWaiting(pool string, c admission.Class, p int) string {
	return s.prefix + ":adm:{" + pool + "}:tenants:" + c.String() + ":" + strconv.Itoa(p)
}

// served is the weighted tokens served per tenant at class c and tier
// priority p, and the virtual time there.
func (s *Slots) served(pool string, c admission.Class, p int) string {
	return s.prefix + ":adm:{" + pool + "}:served:" + c.String() + ":" + strconv.Itoa(p)
}

// Acquire implements admission.Slots.
func (s *Slots) Acquire(ctx context.Context, l admission.Lease) (admission.Grant, int64, error) {
	ms := l.Now.UnixMilli()
	keys := make([]string, 6, 6+int(l.Class))
	keys[0], keys[1], keys[2] = s.leases(l.Pool, l.Backend), s.prompts(l.Pool, l.Backend), s.waitingTenant(l.Pool, l.Class, l.Tenant)
	keys[3], keys[4] = s.tenantsWaiting(l.Pool, l.Class, l.TierPriority), s.served(l.Pool, l.Class, l.TierPriority)
	keys[5] = s.fresh(l.Pool, l.Backend)
	// A request waits at most its class's MaxWait (the lease's TTL when
	// none is given); one older is gone.
	gone := func(c admission.Class) int64 {
		return ms - cmp.Or(l.MaxWait[c], l.TTL).Milliseconds() - l.Patience.Milliseconds()
	}
	var trims []any
	for c := admission.Class(0); c < l.Class; c++ {
		keys = append(keys, s.waiting(l.Pool, c))
		trims = append(trims, gone(c))
	}
	expiry := ms + l.TTL.Milliseconds()
	until := expiry
	if !l.PromptUntil.IsZero() {
		until = min(until, l.PromptUntil.UnixMilli())
	}
	since := ms
	if !l.Since.IsZero() {
		since = l.Since.UnixMilli()
	}
	fresh := "0"
	if l.Fresh {
		fresh = "1"
	}
	args := append([]any{l.Budget, l.ID, ms, expiry, ms - l.Patience.Milliseconds(), l.TTL.Milliseconds(),
		max(l.MaxPrompt, 0), max(l.Prompt, 0), until, since - l.Patience.Milliseconds(),
		l.Tenant, strconv.FormatFloat(max(l.Cost, 0), 'g', -1, 64), s.waitingTenant(l.Pool, l.Class, ""), gone(l.Class),
		s.alive(l.Pool, ""), max(l.MaxFresh, 0), fresh}, trims...)
	v, err := s.acquire.Run(ctx, s.client, keys, args...).Int64Slice()
	switch {
	case err != nil:
		return admission.Full, 0, fmt.Errorf("redisslots: acquire: %w", err)
	case len(v) != 2:
		return admission.Full, 0, fmt.Errorf("redisslots: acquire: the script answered %v", v)
	case v[0] == 1:
		s.mu.Lock()
		s.held[l.ID] = heldLease{pool: l.Pool, backend: l.Backend, ttl: l.TTL}
		s.mu.Unlock()
		return admission.Granted, v[1], nil
	case v[0] == 2:
		return admission.Behind, 0, nil
	case v[0] == 3:
		return admission.FreshFull, 0, nil
	}
	return admission.Full, 0, nil
}

// Release implements admission.Slots; it tells the replicas' Watch.
// The lease is renewed no more, even when the call fails: it then ends
// with its TTL.
func (s *Slots) Release(ctx context.Context, pool, backend, lease string) error {
	s.mu.Lock()
	delete(s.held, lease)
	s.mu.Unlock()
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, s.leases(pool, backend), lease)
		p.HDel(ctx, s.prompts(pool, backend), lease)
		p.HDel(ctx, s.fresh(pool, backend), lease)
		p.Publish(ctx, s.roomChannel(), pool+"\x00"+backend)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisslots: release: %w", err)
	}
	return nil
}

// Forget stops renewing lease without telling Redis (whose lease then
// ends with its TTL, or at a later Release): for a release that cannot be
// sent while Redis fails.
func (s *Slots) Forget(lease string) {
	s.mu.Lock()
	delete(s.held, lease)
	s.mu.Unlock()
}

// Renew extends every lease this Slots granted and that is not released
// to now plus its TTL, in one round trip, and returns how many it renewed.
// Call it every third of the TTL: a replica that dies stops renewing, and
// its slots come back within the TTL, while a live replica's requests
// keep theirs for as long as they run, however long that is. A lease
// Redis lost (a restart, a failover to an empty replica) is re-created,
// so the budgets hold again from the first renewal after Redis returns;
// a lease released while Renew ran is removed again (a second round trip,
// only then), so it does not come back for a TTL (see leaseset).
func (s *Slots) Renew(ctx context.Context, now time.Time) (int, error) {
	type set struct {
		key string
		ttl time.Duration
	}
	s.mu.Lock()
	ids := map[set][]string{}
	for id, h := range s.held {
		k := set{s.leases(h.pool, h.backend), h.ttl}
		ids[k] = append(ids[k], id)
	}
	s.mu.Unlock()
	byTTL := map[time.Duration][]leaseset.Renewal{}
	for k, v := range ids {
		byTTL[k.ttl] = append(byTTL[k.ttl], leaseset.Renewal{Key: k.key, IDs: v})
	}
	total := 0
	var errs []error
	ms := now.UnixMilli()
	for ttl, rs := range byTTL { // one TTL, unless a reload changed it
		n, err := leaseset.Renew(ctx, s.client, rs, ms+ttl.Milliseconds(), ttl)
		total += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	// Release forgets a lease before it sends its ZREM, so a lease
	// released after this look sends that ZREM after the renewal answered.
	// The ones released before it, the renewal may have re-created (with
	// an error too: the script may have run): take them back.
	var released []leaseset.Renewal
	s.mu.Lock()
	for k, v := range ids {
		var gone []string
		for _, id := range v {
			if _, ok := s.held[id]; !ok {
				gone = append(gone, id)
			}
		}
		if len(gone) > 0 {
			released = append(released, leaseset.Renewal{Key: k.key, IDs: gone})
			total -= len(gone)
		}
	}
	s.mu.Unlock()
	if len(released) > 0 {
		if err := leaseset.Remove(ctx, s.client, released); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return max(total, 0), fmt.Errorf("redisslots: %w", err)
	}
	return total, nil
}

// Prefilled implements admission.Slots; it tells the replicas' Watch.
func (s *Slots) Prefilled(ctx context.Context, pool, backend string, leases ...string) error {
	return s.end(ctx, "prefilled", pool, backend, leases, s.prompts(pool, backend), s.fresh(pool, backend))
}

// Stepped implements admission.Slots; it tells the replicas' Watch.
func (s *Slots) Stepped(ctx context.Context, pool, backend string, leases ...string) error {
	return s.end(ctx, "stepped", pool, backend, leases, s.fresh(pool, backend))
}

// end removes leases from the hashes of prompts at keys and tells the
// replicas' Watch that backend has more room, in one round trip; op names
// the call in its error.
func (s *Slots) end(ctx context.Context, op, pool, backend string, leases []string, keys ...string) error {
	if len(leases) == 0 {
		return nil
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.HDel(ctx, k, leases...)
		}
		p.Publish(ctx, s.roomChannel(), pool+"\x00"+backend)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisslots: %s: %w", op, err)
	}
	return nil
}

// roomChannel is where Release, Prefilled and Stepped say that a backend
// has more room.
func (s *Slots) roomChannel() string { return s.prefix + ":adm:room" }

// Watch calls room(pool, backend) for every Release, Prefilled and Stepped of any
// replica (this one's too), so that requests waiting on every replica look
// at once for the room freed, not at their next look; without it the
// replica where room freed took it every time. It returns when ctx ends
// (nil) or the subscription cannot be made; go-redis resubscribes after a
// lost connection, and what is missed meanwhile the waiting requests' own
// looks find.
func (s *Slots) Watch(ctx context.Context, room func(pool, backend string)) error {
	sub := s.client.Subscribe(ctx, s.roomChannel())
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("redisslots: watch: %w", err)
	}
	ch := sub.Channel()
	// Under load the messages come faster than the gates dispatch (each
	// dispatch may be a round trip): what arrived meanwhile is taken
	// together, once per backend.
	seen := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			clear(seen)
			seen[m.Payload] = true
		drain:
			for len(seen) < maxCoalesced {
				select {
				case m, ok := <-ch:
					if !ok {
						break drain
					}
					seen[m.Payload] = true
				default:
					break drain
				}
			}
			for payload := range seen {
				if pool, backend, ok := strings.Cut(payload, "\x00"); ok {
					room(pool, backend)
				}
			}
		}
	}
}

// maxCoalesced bounds the backends one Watch wake-up covers.
const maxCoalesced = 256

// Wait implements admission.Slots.
func (s *Slots) Wait(ctx context.Context, pool string, w admission.Waiting) error {
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, key := range [...]string{s.waiting(pool, w.Class), s.waitingTenant(pool, w.Class, w.Tenant)} {
			p.ZAdd(ctx, key, redis.Z{Score: float64(w.Since.UnixMilli()), Member: w.ID})
			p.PExpire(ctx, key, w.TTL)
		}
		key := s.tenantsWaiting(pool, w.Class, w.TierPriority)
		p.SAdd(ctx, key, w.Tenant)
		p.PExpire(ctx, key, w.TTL)
		if replica, _, ok := strings.Cut(w.ID, "-"); ok {
			p.Set(ctx, s.alive(pool, replica), "1", s.aliveTTL())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisslots: wait: %w", err)
	}
	return nil
}

// unwaitScript: KEYS[1] the class's wait set, KEYS[2] the tenant's,
// KEYS[3] the set of tenants waiting at the class and tier priority; ARGV
// the request's id and its tenant. A tenant with nothing left waiting
// leaves the set, so Acquire looks only at tenants that wait.
const unwaitScript = `
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('SREM', KEYS[3], ARGV[2])
end
return 0
`

// Unwait implements admission.Slots.
func (s *Slots) Unwait(ctx context.Context, pool string, w admission.Waiting) error {
	keys := []string{s.waiting(pool, w.Class), s.waitingTenant(pool, w.Class, w.Tenant), s.tenantsWaiting(pool, w.Class, w.TierPriority)}
	err := s.unwait.Run(ctx, s.client, keys, w.ID, w.Tenant).Err()
	if err != nil {
		return fmt.Errorf("redisslots: unwait: %w", err)
	}
	return nil
}

// Load caches the scripts in Redis.
func (s *Slots) Load(ctx context.Context) error {
	if err := s.acquire.Load(ctx, s.client).Err(); err != nil {
		return err
	}
	return s.unwait.Load(ctx, s.client).Err()
}

// PendingPrompt is the prompt tokens the leases on backend hold pending
// (expired ones included until the next Acquire there drops them).
func (s *Slots) PendingPrompt(ctx context.Context, pool, backend string) (int64, error) {
	return s.sum(ctx, s.prompts(pool, backend))
}

// FreshPrompt is the prompt tokens the leases on backend hold fresh
// (Lease.Fresh; expired ones included as in PendingPrompt).
func (s *Slots) FreshPrompt(ctx context.Context, pool, backend string) (int64, error) {
	return s.sum(ctx, s.fresh(pool, backend))
}

// sum adds up the tokens of a hash of prompts ("tokens:until_ms").
func (s *Slots) sum(ctx context.Context, key string) (int64, error) {
	vals, err := s.client.HVals(ctx, key).Result()
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, v := range vals {
		tokens, _, _ := strings.Cut(v, ":")
		n, err := strconv.ParseInt(tokens, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("redisslots: prompt %q: %w", v, err)
		}
		sum += n
	}
	return sum, nil
}

// Waiting is how many requests of class c and tenant the store holds as
// waiting on pool (lost ones included until an Acquire drops them).
func (s *Slots) Waiting(ctx context.Context, pool string, c admission.Class, tenant string) (int64, error) {
	return s.client.ZCard(ctx, s.waitingTenant(pool, c, tenant)).Result()
}

// Leases is how many live leases hold backend.
func (s *Slots) Leases(ctx context.Context, pool, backend string, now time.Time) (int64, error) {
	return s.client.ZCount(ctx, s.leases(pool, backend), strconv.FormatInt(now.UnixMilli()+1, 10), "+inf").Result()
}
