package configs

import (
	"maps"
	"slices"
	"time"
)

// Batch configures OpenAI's Batch API (/v1/files and /v1/batches): batch
// lines run in the flex service class, as their tenant, in the capacity
// interactive traffic leaves (restart to change). The models batches use
// should have admission on, or flex lines compete with interactive ones.
type Batch struct {
	// Enabled serves the Batch API and runs batches on this replica.
	// Default false.
	Enabled bool `yaml:"enabled"`
	// DataDir holds uploaded files, batches' output files and, with the
	// disk store, the batch state (so a restart resumes). Replicas sharing
	// the redis store must share it too. Default "./sluice-data".
	DataDir string `yaml:"data_dir"`
	// Store is where batch state and line progress live: "disk" (in
	// data_dir, for one replica) or "redis" (limits.redis_url, or
	// --redis-url, shared by replicas: any runs any batch's lines, and a
	// dead replica's lines are taken over once lease_ttl passes).
	// Default "disk".
	Store string `yaml:"store"`
	// Concurrency bounds the batch lines this replica runs at once.
	// Default 64; 1 to 10000.
	Concurrency int `yaml:"concurrency"`
	// DispatchInterval is how often the runner looks at the batches, and
	// the shortest it holds off a model the fleet had no room for.
	// Default 200ms; at least 10ms.
	DispatchInterval Duration `yaml:"dispatch_interval"`
	// MaxFileBytes caps an uploaded file (413 beyond). Default 200 MiB.
	MaxFileBytes int64 `yaml:"max_file_bytes"`
	// MaxTenantBytes caps the bytes one tenant's files (uploads and
	// batch outputs) hold in data_dir: an upload past it, and a batch
	// created while the tenant is at or over it, are refused (400
	// storage_limit_exceeded). Output files are written whatever the cap,
	// so the batches a tenant has running may take it past. Default
	// 10 GiB; -1: no cap.
	MaxTenantBytes int64 `yaml:"max_tenant_bytes"`
	// MaxLines caps the requests in one batch input file. Default 50000.
	MaxLines int `yaml:"max_lines"`
	// FileExpiry is how long an uploaded file is kept when its upload
	// does not say (expires_after), as OpenAI deletes batch files after 30
	// days; a runner deletes expired files an hour after they expire (it
	// looks each minute), once no running batch reads them. Output files are kept until deleted unless the
	// batch says (output_expires_after). Default 720h; at least 1s; -1s
	// keeps uploads until deleted.
	FileExpiry Duration `yaml:"file_expiry"`
	// CompletionWindow is how long a batch may run before it expires,
	// returning what finished. Default 24h; at least 1s.
	CompletionWindow Duration `yaml:"completion_window"`
	// LeaseTTL is how long a line claimed by a replica that stopped (or
	// died) stays claimed before another runs it. Default 1m; at least 1s.
	LeaseTTL Duration `yaml:"lease_ttl"`
	// MaxAttempts is how many times a line the fleet fails (5xx other than
	// 503) runs before that error is its result. Default 3; 1 to 100.
	MaxAttempts int `yaml:"max_attempts"`
	// QueuedTokens caps, per tier name, the estimated tokens (prompt
	// bytes / 4 + max_tokens) of one tenant's batches that have not
	// ended; a batch that would pass it fails with token_limit_exceeded.
	// Keys are names from tiers; a tier not listed has no cap. Default
	// none.
	QueuedTokens map[string]int64 `yaml:"queued_tokens"`
}

// Defaults of the batch section.
const (
	DefaultBatchDataDir          = "./sluice-data"
	DefaultBatchConcurrency      = 64
	DefaultBatchDispatchInterval = 200 * time.Millisecond
	DefaultBatchMaxFileBytes     = 200 << 20
	DefaultBatchMaxTenantBytes   = 10 << 30
	DefaultBatchMaxLines         = 50_000
	DefaultBatchFileExpiry       = 30 * 24 * time.Hour
	DefaultBatchCompletionWindow = 24 * time.Hour
	DefaultBatchLeaseTTL         = time.Minute
	DefaultBatchMaxAttempts      = 3
)

func (b *Batch) applyDefaults() {
	if b.DataDir == "" {
		b.DataDir = DefaultBatchDataDir
	}
	if b.Store == "" {
		b.Store = "disk"
	}
	if b.Concurrency == 0 {
		b.Concurrency = DefaultBatchConcurrency
	}
	if b.DispatchInterval == 0 {
		b.DispatchInterval = Duration(DefaultBatchDispatchInterval)
	}
	if b.MaxFileBytes == 0 {
		b.MaxFileBytes = DefaultBatchMaxFileBytes
	}
	if b.MaxTenantBytes == 0 {
		b.MaxTenantBytes = DefaultBatchMaxTenantBytes
	}
	if b.MaxLines == 0 {
		b.MaxLines = DefaultBatchMaxLines
	}
	if b.FileExpiry == 0 {
		b.FileExpiry = Duration(DefaultBatchFileExpiry)
	}
	if b.CompletionWindow == 0 {
		b.CompletionWindow = Duration(DefaultBatchCompletionWindow)
	}
	if b.LeaseTTL == 0 {
		b.LeaseTTL = Duration(DefaultBatchLeaseTTL)
	}
	if b.MaxAttempts == 0 {
		b.MaxAttempts = DefaultBatchMaxAttempts
	}
}

func (c *Config) validateBatch(bad func(field, format string, args ...any)) {
	b := c.Batch
	if b.Store != "disk" && b.Store != "redis" {
		bad("batch.store", "want disk or redis, got %q", b.Store)
	}
	if b.Concurrency < 1 || b.Concurrency > 10_000 {
		bad("batch.concurrency", "must be between 1 and 10000, got %d", b.Concurrency)
	}
	if b.DispatchInterval < Duration(10*time.Millisecond) {
		bad("batch.dispatch_interval", "must be at least 10ms, got %s", b.DispatchInterval.Std())
	}
	if b.MaxFileBytes < 1 {
		bad("batch.max_file_bytes", "must be positive, got %d", b.MaxFileBytes)
	}
	if b.MaxTenantBytes < -1 {
		bad("batch.max_tenant_bytes", "must be positive, or -1 for no cap, got %d", b.MaxTenantBytes)
	}
	if b.MaxLines < 1 {
		bad("batch.max_lines", "must be positive, got %d", b.MaxLines)
	}
	if b.FileExpiry > 0 && b.FileExpiry < Duration(time.Second) || b.FileExpiry < 0 && b.FileExpiry != Duration(-time.Second) {
		bad("batch.file_expiry", "must be at least 1s, or -1s to keep files until deleted, got %s", b.FileExpiry.Std())
	}
	if b.CompletionWindow < Duration(time.Second) {
		bad("batch.completion_window", "must be at least 1s, got %s", b.CompletionWindow.Std())
	}
	if b.LeaseTTL < Duration(time.Second) {
		bad("batch.lease_ttl", "must be at least 1s, got %s", b.LeaseTTL.Std())
	}
	if b.MaxAttempts < 1 || b.MaxAttempts > 100 {
		bad("batch.max_attempts", "must be between 1 and 100, got %d", b.MaxAttempts)
	}
	for _, tier := range slices.Sorted(maps.Keys(b.QueuedTokens)) {
		if _, ok := c.Tier(tier); !ok {
			bad("batch.queued_tokens."+tier, "%q is not one of tiers", tier)
		} else if n := b.QueuedTokens[tier]; n < 1 {
			bad("batch.queued_tokens."+tier, "must be positive (leave the tier out for no cap), got %d", n)
		}
	}
}
