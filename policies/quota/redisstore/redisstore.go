package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-llm/sluice/policies/internal/leaseset"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/quota/internal/gcra"
)

const (
	// DefaultKeyPrefix starts every key when Options.KeyPrefix is empty.
	DefaultKeyPrefix = "sluice"

	// expiryMargin and expiryJitter are added to the rate hash's and the
	// lease set's expiry, so a key outlives its state despite clock skew
	// between Redis and the routers, and so keys written together do not
	// all expire in the same instant.
	expiryMargin = time.Second
	expiryJitter = time.Second
	// dayJitter spreads the expiry of daily totals.
	dayJitter = 10 * time.Minute
)

// Options configure a Store. The zero value is valid.
type Options struct {
	// KeyPrefix starts every key: {KeyPrefix}:{tenant}:rl and so on. It must
	// not contain '{' or '}', which would move the cluster hash tag.
	// Default "sluice".
	KeyPrefix string
}

// Store checks and charges limits in Redis, shared by every router replica
// that uses the same Redis and KeyPrefix. It is safe for concurrent use.
type Store struct {
	client  redis.UniversalClient
	prefix  string
	reserve *redis.Script
	settle  *redis.Script
}

var (
	_ quota.Store        = (*Store)(nil)
	_ quota.BatchSettler = (*Store)(nil)
	_ quota.Pinger       = (*Store)(nil)
)

// New returns a Store on client. It does not talk to Redis: a Redis that is
// down at start makes calls fail, not New. Call Load to check the
// connection and cache the scripts early.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	prefix := opts.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redisstore: KeyPrefix %q must not contain '{' or '}'", prefix)
	}
	return &Store{
		client:  client,
		prefix:  prefix,
		reserve: redis.NewScript(reserveScript),
		settle:  redis.NewScript(settleScript),
	}, nil
}

// Load caches both scripts in Redis (SCRIPT LOAD; on a ClusterClient, in
// every shard), and so also checks that Redis answers. Calling it is
// optional: a call that finds its script missing (after a restart, a
// failover or SCRIPT FLUSH) sends it once more in full.
func (s *Store) Load(ctx context.Context) error {
	for _, sc := range []*redis.Script{s.reserve, s.settle} {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("redisstore: load scripts: %w", err)
		}
	}
	return nil
}

// Ping implements quota.Pinger.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	return nil
}

// Reserve implements quota.Store in one script call.
func (s *Store) Reserve(ctx context.Context, key string, lim quota.Limits, amt quota.Amount, lease quota.Lease, now time.Time) (quota.Decision, error) {
	if err := s.check(key); err != nil {
		return quota.Decision{}, fmt.Errorf("redisstore: reserve: %w", err)
	}
	if err := gcra.CheckReserve(lim, amt, lease, now); err != nil {
		return quota.Decision{}, fmt.Errorf("redisstore: reserve %q: %w", key, err)
	}
	rates, n := gcra.Rates(lim), gcra.Amounts(amt)
	args := []any{
		now.Unix(), now.Nanosecond(),
		rates[gcra.Requests].Tolerance, rates[gcra.Requests].Cost(n[gcra.Requests]),
		rates[gcra.Input].Tolerance, rates[gcra.Input].Cost(n[gcra.Input]),
		rates[gcra.Output].Tolerance, rates[gcra.Output].Cost(n[gcra.Output]),
		lim.Concurrency, lease.ID, gcra.LeaseTTL(lease.TTL),
		lim.TokensPerDay, amt.Tokens(), int64(gcra.UntilMidnight(now)), dayTTL(gcra.Day(now), now),
		margin(), int64(gcra.ConcurrencyRetry),
	}
	reply, err := s.reserve.Run(ctx, s.client, s.keys(key, now), args...).Int64Slice()
	if err != nil {
		return quota.Decision{}, fmt.Errorf("redisstore: reserve %q: %w", key, err)
	}
	o, err := outcome(reply)
	if err != nil {
		return quota.Decision{}, fmt.Errorf("redisstore: reserve %q: %w", key, err)
	}
	o.Rates = rates
	return o.Decision(), nil
}

// Settle implements quota.Store in one script call.
func (s *Store) Settle(ctx context.Context, key string, lim quota.Limits, st quota.Settlement, now time.Time) error {
	keys, args, err := s.settleCall(key, lim, st, now)
	if err != nil {
		return err
	}
	if err := s.settle.Run(ctx, s.client, keys, args...).Err(); err != nil {
		return fmt.Errorf("redisstore: settle %q: %w", key, err)
	}
	return nil
}

// Renew implements quota.Store: one pipelined round trip for every
// tenant's leases. It re-creates the leases Redis lost (a restart without
// persistence, a failover to an empty replica), so that the tenants'
// concurrency holds again from the first renewal after Redis returns;
// the Limiter settles again a lease it settled while Renew ran, which
// this brought back (see leaseset).
func (s *Store) Renew(ctx context.Context, held []quota.Held, ttl time.Duration, now time.Time) error {
	rs := make([]leaseset.Renewal, 0, len(held))
	for _, h := range held {
		if err := s.check(h.Key); err != nil {
			return fmt.Errorf("redisstore: renew: %w", err)
		}
		rs = append(rs, leaseset.Renewal{Key: s.keys(h.Key, now)[1], IDs: h.IDs})
	}
	keep := time.Duration(gcra.LeaseTTL(ttl)+margin()) * time.Millisecond
	if _, err := leaseset.Renew(ctx, s.client, rs, gcra.LeaseExpiry(now, ttl), keep); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	return nil
}

// SettleItem is one Settle of a batch: quota.SettleItem, so that Store is
// the quota.BatchSettler the Limiter looks for.
type SettleItem = quota.SettleItem

// SettleBatch applies items in one pipelined round trip, as if each were
// settled on its own: the items are independent, and an error for one
// (returned joined with the others') leaves the rest applied. If Redis
// lost the script, the items that found it missing are sent once more with
// its source, in a second round trip.
func (s *Store) SettleBatch(ctx context.Context, items []SettleItem) error {
	type call struct {
		key  string
		keys []string
		args []any
		cmd  *redis.Cmd
	}
	var errs []error
	calls := make([]call, 0, len(items))
	for _, it := range items {
		keys, args, err := s.settleCall(it.Key, it.Limits, it.Settlement, it.Now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		calls = append(calls, call{key: it.Key, keys: keys, args: args})
	}
	if len(calls) == 0 {
		return errors.Join(errs...)
	}
	pipe := s.client.Pipeline()
	for i := range calls {
		calls[i].cmd = s.settle.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below

	var missing []int
	for i, c := range calls {
		if err := c.cmd.Err(); redis.HasErrorPrefix(err, "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		pipe = s.client.Pipeline()
		for _, i := range missing {
			calls[i].cmd = s.settle.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil {
			errs = append(errs, fmt.Errorf("redisstore: settle %q: %w", c.key, err))
		}
	}
	return errors.Join(errs...)
}

// settleCall validates one Settle and returns its script keys and args.
func (s *Store) settleCall(key string, lim quota.Limits, st quota.Settlement, now time.Time) ([]string, []any, error) {
	if err := s.check(key); err != nil {
		return nil, nil, fmt.Errorf("redisstore: settle: %w", err)
	}
	if err := gcra.CheckSettle(lim, st, now); err != nil {
		return nil, nil, fmt.Errorf("redisstore: settle %q: %w", key, err)
	}
	rates, used, reserved := gcra.Rates(lim), gcra.Amounts(st.Used), gcra.Amounts(st.Reserved)
	var move [3]int64
	for i, r := range rates {
		if r.Limited() {
			move[i] = r.Cost(used[i] - reserved[i])
		}
	}
	day := gcra.Day(st.ReservedAt)
	dd, ok := gcra.DayDelta(lim, st, now)
	var ttl int64
	if ok {
		ttl = dayTTL(day, now)
	}
	ifReserved := 0
	if st.IfReserved {
		ifReserved = 1
	}
	args := []any{
		now.Unix(), now.Nanosecond(),
		move[gcra.Requests], move[gcra.Input], move[gcra.Output],
		st.LeaseID, dd, ttl, margin(), ifReserved,
	}
	return s.keys(key, st.ReservedAt), args, nil
}

// keys returns a tenant's rate hash, lease set and the total of day's UTC
// day. All three carry the tenant as hash tag, so a cluster keeps them in
// one slot and one script may touch them all.
func (s *Store) keys(tenant string, day time.Time) []string {
	base := s.prefix + ":{" + tenant + "}:"
	return []string{base + "rl", base + "lease", base + "day:" + day.UTC().Format("20060102")}
}

// check rejects a tenant key that would break the hash tag.
func (s *Store) check(key string) error {
	if key == "" || strings.ContainsAny(key, "{}") {
		return fmt.Errorf("invalid tenant key %q", key)
	}
	return nil
}

// outcome reads the reserve script's reply.
func outcome(r []int64) (gcra.Outcome, error) {
	if len(r) != 6 || r[1] < 0 || r[1] > 5 || r[0] != 0 && r[0] != 1 {
		return gcra.Outcome{}, fmt.Errorf("unexpected script reply %v", r)
	}
	o := gcra.Outcome{
		Allowed:    r[0] == 1,
		RetryAfter: time.Duration(r[2]),
		Backlog:    [3]int64{r[3], r[4], r[5]},
	}
	switch r[1] {
	case 1:
		o.Denied = quota.DimTokensPerDay
	case 2:
		o.Denied = quota.DimConcurrency
	case 3, 4, 5:
		o.Denied = gcra.RateDimension(int(r[1] - 3))
	}
	return o, nil
}

// margin is the expiry margin in ms, jittered.
func margin() int64 {
	return (expiryMargin + rand.N(expiryJitter)).Milliseconds()
}

// dayTTL is how long day's total is kept at now, in ms and jittered.
func dayTTL(day int64, now time.Time) int64 {
	return (gcra.DayTTL(day, now) + rand.N(dayJitter)).Milliseconds()
}
