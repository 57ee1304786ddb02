package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/policies/admission/redisslots"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/quota/memstore"
	"github.com/sluice-llm/sluice/policies/quota/redisstore"
	"github.com/sluice-llm/sluice/router/auth"
	"github.com/sluice-llm/sluice/router/respindex"
)

// buildTenants turns the config's tenants into the router's directory; no
// tenants gives an open directory.
func buildTenants(c *configs.Config) (*auth.Directory, error) {
	tenants := make([]*auth.Tenant, 0, len(c.Tenants))
	keys := make([][]auth.Digest, 0, len(c.Tenants))
	for i, t := range c.Tenants {
		tier, ok := c.Tier(t.Tier)
		if !ok {
			return nil, &configs.FieldError{Field: fmt.Sprintf("tenants[%d].tier", i), Message: "no tier " + t.Tier}
		}
		plan := tier.Effective(t.Overrides)
		q := plan.Quota
		tenants = append(tenants, &auth.Tenant{
			Name: t.Name, Tier: plan.Tier, Priority: plan.Priority, Models: plan.Models,
			DefaultMaxTokens: int(plan.DefaultMaxTokens),
			Classes:          plan.Classes, DefaultClass: plan.DefaultClass, Weight: t.Weight,
			Limits: quota.Limits{
				RequestsPerMinute: q.RequestsPerMinute, RequestBurst: q.RequestsBurst,
				InputTokensPerMinute: q.InputTokensPerMinute, InputBurst: q.InputTokensBurst,
				OutputTokensPerMinute: q.OutputTokensPerMinute, OutputBurst: q.OutputTokensBurst,
				Concurrency: q.ConcurrentRequests, TokensPerDay: q.TokensPerDay,
			},
		})
		var ds []auth.Digest
		for j, h := range t.KeyHashes() {
			var d auth.Digest
			if n, err := hex.Decode(d[:], []byte(h)); err != nil || n != len(d) {
				return nil, &configs.FieldError{Field: fmt.Sprintf("tenants[%d].api_keys[%d]", i, j), Message: "not a SHA-256 hex digest"}
			}
			ds = append(ds, d)
		}
		keys = append(keys, ds)
	}
	return auth.NewDirectory(tenants, keys)
}

// limitStore is the configured Store: Redis when a URL is given (the
// --redis-url flag or SLUICE_REDIS_URL override the file), else
// in-process. close releases it.
type limitStore struct {
	store quota.Store
	redis bool
	close func() error
	load  func(context.Context) error // loads Redis's scripts; nil in-process
	// client is the Redis client, nil in-process; admission shares its
	// budgets through it too.
	client redis.UniversalClient
	// url is the Redis URL the client was made from, for messages (to be
	// shown through configs.RedactURL).
	url string
}

func newLimitStore(c *configs.Config, redisURL string) (limitStore, error) {
	if redisURL == "" {
		redisURL = c.Limits.RedisURL
	}
	if redisURL == "" {
		return limitStore{store: memstore.New(), close: func() error { return nil }}, nil
	}
	client, err := redisClient(redisURL, c.Limits.Timeout.Std())
	if err != nil {
		return limitStore{}, fmt.Errorf("limits.redis_url: %w", err)
	}
	st, err := redisstore.New(client, redisstore.Options{KeyPrefix: c.Limits.KeyPrefix})
	if err != nil {
		_ = client.Close()
		return limitStore{}, err
	}
	return limitStore{store: st, redis: true, close: client.Close, load: st.Load, client: client, url: redisURL}, nil
}

// redisRefusal names what a Redis that answered refused (the password or
// user, the database number, a command the user may not run), or is
// empty for any other err: one that says Redis is down or slow, which
// time may mend.
func redisRefusal(err error) string {
	switch {
	case err == nil:
		return ""
	case redis.IsAuthError(err), redis.HasErrorPrefix(err, "AUTH"), redis.HasErrorPrefix(err, "invalid password"),
		redis.HasErrorPrefix(err, "Client sent AUTH"):
		return "the password (or user)"
	case redis.HasErrorPrefix(err, "DB index"), redis.HasErrorPrefix(err, "SELECT is not allowed"):
		return "the database number"
	case redis.IsPermissionError(err):
		return "a command Sluice needs (EVAL, EVALSHA, SCRIPT LOAD) to the user"
	}
	return ""
}

// newLimiter builds the limit stage over st.
func newLimiter(c *configs.Config, st limitStore, log *slog.Logger, reg prometheus.Registerer) (*quota.Limiter, error) {
	return quota.NewLimiter(quota.LimiterOptions{
		Store:      st.store,
		FailClosed: !c.Limits.FailsOpen(),
		Timeout:    c.Limits.Timeout.Std(),
		LeaseTTL:   c.Limits.LeaseTTL.Std(),
		Async:      st.redis,
		Logger:     log,
		Metrics:    reg,
	})
}

// redisClient connects to one Redis node (redis://, rediss://, unix://),
// a Sentinel-managed one (a master_name=NAME query, sentinels as addr=
// queries) or a Cluster (addr= queries naming more nodes). Every call is
// bounded by timeout and never retried: a slow Redis must make the
// limits fail open or closed, not hold requests.
func redisClient(raw string, timeout time.Duration) (redis.UniversalClient, error) {
	if msg := configs.CheckRedisURL(raw); msg != "" {
		return nil, errors.New(msg)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		o, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return nil, err
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries = 4*timeout, timeout, timeout, timeout, -1
		o.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(o), nil
	case q.Has("addr"):
		o, err := redis.ParseClusterURL(raw)
		if err != nil {
			return nil, err
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries = 4*timeout, timeout, timeout, timeout, -1
		o.ContextTimeoutEnabled = true
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries = 4*timeout, timeout, timeout, timeout, -1
	o.ContextTimeoutEnabled = true
	return redis.NewClient(o), nil
}

// newSharedAdmission shares admission budgets through the limits' Redis
// when there is one (nil in-process).
func newSharedAdmission(c *configs.Config, st limitStore, log *slog.Logger, reg prometheus.Registerer) (*sharedAdmission, error) {
	if st.client == nil {
		return nil, nil
	}
	slots, err := redisslots.New(st.client, c.Limits.KeyPrefix)
	if err != nil {
		return nil, err
	}
	timed, err := newTimedSlots(slots, reg)
	if err != nil {
		return nil, err
	}
	errs := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_admission_store_errors_total",
		Help: "Shared admission store calls that failed, or that were not made because it was failing (one call per 250 ms asks it); admission went on within this replica's share of the budgets.",
	})
	up := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_admission_store_up",
		Help: "1 while the shared admission store (Redis) answers, 0 from its first failure until a call succeeds again; while 0 each replica admits within its share of the budgets.",
	})
	for _, m := range []prometheus.Collector{errs, up} {
		if err := reg.Register(m); err != nil {
			return nil, err
		}
	}
	up.Set(1)
	s := &sharedAdmission{store: slots, leaseTTL: c.Limits.LeaseTTL.Std(), log: log, errors: errs, up: up}
	s.prefilled = newBatchedPrefilled(newBreakerSlots(timed, slots.Forget, s.recovered), s.failed)
	s.slots = s.prefilled
	return s, nil
}

// redisLog writes go-redis's own log lines to log at debug level.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", "msg_text", fmt.Sprintf(format, v...))
}

// newResponseIndex is where the router remembers which backend made each
// stored Responses API response: the limits' Redis, shared by the
// replicas, when there is one, backed by this replica's memory while Redis
// fails; else this replica's memory alone.
func newResponseIndex(c *configs.Config, st limitStore) (respindex.Index, error) {
	local := respindex.NewMemory(c.StoredResponsesTTL.Std(), 0, nil)
	if st.client == nil {
		return local, nil
	}
	shared, err := respindex.NewRedis(st.client, c.Limits.KeyPrefix, c.StoredResponsesTTL.Std())
	if err != nil {
		return nil, err
	}
	return &respindex.Fallback{Shared: shared, Local: local}, nil
}
