package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/router/auth"
	"github.com/sluice-llm/sluice/router/batch"
)

// batchAPI is the Batch API of a config with batch.enabled: the service
// the router mounts; run starts the runner of its batches.
type batchAPI struct {
	svc   *batch.Service
	close func() error
	cfg   configs.Batch
	log   *slog.Logger
}

// batchRedisTimeout bounds each call of the batch store's Redis: batch
// work is off the interactive path, so it waits longer than the limits'
// calls, with a client (and connection pool) of its own.
const batchRedisTimeout = time.Second

// newBatchAPI builds the Batch API from the config, or returns nil when
// it is off. Its files live under batch.data_dir/files; its state under
// batch.data_dir/state, or with the redis store in the limits' Redis
// (redisURL, the flag's or the file's).
func newBatchAPI(c *configs.Config, redisURL string, log *slog.Logger) (*batchAPI, error) {
	if !c.Batch.Enabled {
		return nil, nil
	}
	b := c.Batch
	var (
		store      batch.Store
		closeStore = func() error { return nil }
	)
	switch b.Store {
	case "redis":
		if redisURL == "" {
			return nil, &configs.FieldError{Field: "batch.store", Message: "redis needs limits.redis_url (or --redis-url)"}
		}
		client, err := redisClient(redisURL, batchRedisTimeout)
		if err != nil {
			return nil, fmt.Errorf("limits.redis_url: %w", err)
		}
		rs, err := batch.NewRedisStore(client, batch.RedisOptions{KeyPrefix: c.Limits.KeyPrefix, Timeout: 4 * batchRedisTimeout})
		if err != nil {
			return nil, errors.Join(err, client.Close())
		}
		store, closeStore = rs, client.Close
	default:
		ds, err := batch.OpenDiskStore(filepath.Join(b.DataDir, "state"))
		if err != nil {
			return nil, fmt.Errorf("batch.data_dir: %w", err)
		}
		store, closeStore = ds, ds.Close
	}
	svc, err := batch.New(batch.Options{
		Store: store, Dir: filepath.Join(b.DataDir, "files"), Owner: batchOwner,
		MaxFileBytes: b.MaxFileBytes, MaxLines: b.MaxLines, CompletionWindow: b.CompletionWindow.Std(),
		QueuedTokens: b.QueuedTokens, Logger: log, UploadIdle: c.BodyReadTimeout.Std(),
		MaxBodyBytes: c.MaxBodyBytes, MaxTenantBytes: b.MaxTenantBytes, FileExpiry: b.FileExpiry.Std(),
	})
	if err != nil {
		return nil, errors.Join(err, closeStore())
	}
	log.Info("batch API on", "data_dir", b.DataDir, "store", b.Store, "concurrency", b.Concurrency)
	return &batchAPI{svc: svc, close: closeStore, cfg: b, log: log}, nil
}

// batchOwner is the tenant the router authenticated, as the Batch API
// sees its caller.
func batchOwner(ctx context.Context) batch.Owner {
	t := auth.TenantFrom(ctx)
	if t == nil {
		return batch.Owner{}
	}
	return batch.Owner{Tenant: t.Name, Tier: t.Tier, DefaultMaxTokens: t.DefaultMaxTokens,
		NoFlex: len(t.Classes) > 0 && !slices.Contains(t.Classes, "flex")}
}

// runAsTenant runs a batch line as its tenant (the router's directory
// resolves the name, so its current limits apply) and marked as a batch
// line, which admission runs only in what other requests leave.
func runAsTenant(ctx context.Context, tenant string, draining <-chan struct{}) context.Context {
	ctx = admission.WithBatch(ctx, draining)
	if tenant == "" {
		return ctx
	}
	return auth.WithTenant(ctx, &auth.Tenant{Name: tenant})
}

// run starts the runner, sending lines through handler (the router's),
// until ctx ends; the lines running then have drain to finish. The func
// returned waits for it (and stops it first if ctx has not ended); it may
// be called more than once.
func (b *batchAPI) run(ctx context.Context, handler http.Handler, metrics prometheus.Registerer, drain time.Duration) (func(), error) {
	r, err := batch.NewRunner(b.svc, batch.RunnerOptions{
		Handler: handler, RunAs: runAsTenant, Concurrency: b.cfg.Concurrency, Metrics: metrics,
		Interval: b.cfg.DispatchInterval.Std(), LeaseTTL: b.cfg.LeaseTTL.Std(), MaxAttempts: b.cfg.MaxAttempts,
		Drain: drain,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			b.log.Warn("batch runner stopped", "err", err)
		}
	}), nil
}
